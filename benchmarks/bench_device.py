"""The diagnosis on CUDA (float32 and bfloat16) against the CPU in float32, with the statistics on the CPU and on
the GPU.

For each model (MiniLM: 64 texts, removal exact; a causal LM such as Qwen2.5-0.5B: 16 packed texts of 128
tokens, removal off; gradient importance on, or off with ``--one-pass``): diagnose on ``cpu``/``float32``, then
on ``cuda`` with the model in ``float32`` and the statistics on the CPU (``statistics_device='cpu'``) and on the
GPU (``'model'``), and in ``bfloat16`` with the statistics on the GPU; time a plain ``model(**batch)`` forward on
the same texts on each. Prints the wall time of each diagnosis with its steps' ``timings_s``, its ratio to the
forward on the same device (goal with the statistics on the GPU: 10x for Qwen2.5-0.5B, one pass), the speed-up
of each CUDA run over the CPU run, and per numeric column of the heads table the largest and the median relative
difference to the CPU run, ``|x - x_cpu| / (|x_cpu| + 1e-12)`` (goal 1e-4 in float32). The float32 differences
come from the order of the floating-point operations (the code path and the device), the bfloat16 ones from
the model's own bfloat16 forward pass.

``--models`` takes built-in names or model paths (a directory with safetensors weights, a GGUF file).
Without a CUDA device it prints one line saying so and exits 0. Usage:
``python benchmarks/bench_device.py [--models minilm,qwen2.5-0.5b] [--device cuda] [--threads N] [--one-pass]``.
"""
from __future__ import annotations

import argparse
import time

SKIP = ("layer", "head", "kv_group", "n_tokens", "cka_partner", "dependence_partner")


def _sync(device: str) -> None:
    import torch
    if device == "cuda":
        torch.cuda.synchronize()


def forward_seconds(model, tok, texts, device: str, max_length: int) -> float:
    """Wall time of plain ``model(**batch)`` forwards over ``texts`` in batches of 16 (the second of two runs)."""
    import torch
    batches = [tok(texts[i:i + 16], return_tensors="pt", padding=True, truncation=True, max_length=max_length)
               for i in range(0, len(texts), 16)]
    dev = next(model.parameters()).device
    best = float("inf")
    with torch.no_grad():
        for _ in range(2):
            _sync(device)
            t = time.perf_counter()
            for b in batches:
                model(**{k: v.to(dev) for k, v in b.items()})
            _sync(device)
            best = min(best, time.perf_counter() - t)
    return best


def diagnose_on(name: str, device: str, dtype: str, statistics: str = "cpu", one_pass: bool = False) -> tuple:
    """``(diagnosis, diagnosis seconds, forward seconds)`` of ``name`` on ``device`` in ``dtype``, the statistics on
    ``statistics`` (``'cpu'`` or ``'model'``); ``one_pass``: removal and gradient importance off."""
    from attnspec import diagnose
    from attnspec.diagnostics.pipeline.texts import resolve_texts
    from attnspec.models import adapt, load_model
    model, tok = load_model(name, device=device, dtype=dtype)
    ad = adapt(model)
    causal = ad.kind != "encoder"
    n = 16 if causal else 64
    texts, _ = resolve_texts("builtin", tok, ad.kind, n, 128, None)
    t_fwd = forward_seconds(model, tok, list(texts), device, 128)
    _sync(device)
    t = time.perf_counter()
    d = diagnose(ad, tok, "builtin", n_texts=n, removal="none" if causal or one_pass else "exact",
                 gradient=not one_pass, statistics_device=statistics)
    _sync(device)
    return d, time.perf_counter() - t, t_fwd


def compare(ref, other, label: str) -> None:
    """Print per numeric column the largest and the median relative difference of ``other`` to ``ref``."""
    import numpy as np
    a, b = ref.heads.select_dtypes("number"), other.heads.select_dtypes("number")
    rel = (b - a).abs() / (a.abs() + 1e-12)
    worst = []
    for col in a.columns:
        if col in SKIP or not np.isfinite(rel[col]).any():
            continue
        worst.append((float(np.nanmax(rel[col])), col, float(np.nanmedian(rel[col]))))
    print(f"  {label}: max rel diff over {len(worst)} columns {max(worst)[0]:.3g} ({max(worst)[1]})")
    for mx, col, med in sorted(worst, reverse=True):
        print(f"    {col:26s} max {mx:.3g}  median {med:.3g}")
    for col in ("selection", "dependence"):
        if col in ref.heads:
            agree = float((ref.heads[col] == other.heads[col]).mean())
            print(f"    {col} labels equal for {agree:.1%} of heads")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="minilm,qwen2.5-0.5b", help="built-in names or model paths, comma-separated")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's)")
    ap.add_argument("--one-pass", action="store_true", help="removal and gradient importance off")
    args = ap.parse_args()
    import torch
    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench_device: skipped, no CUDA device on this machine")
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, "
          f"{torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA'}")
    for name in args.models.split(","):
        cpu, t_cpu, f_cpu = diagnose_on(name, "cpu", "float32", one_pass=args.one_pass)
        print(f"{name}: cpu/float32 diagnosis {t_cpu:.1f} s, {t_cpu / f_cpu:.1f}x its forward ({f_cpu:.3f} s) "
              f"{cpu.summary['timings_s']}")
        for dtype, stats in (("float32", "cpu"), ("float32", "model"), ("bfloat16", "model")):
            run, t_run, f_run = diagnose_on(name, args.device, dtype, stats, args.one_pass)
            label = f"{args.device}/{dtype}, statistics on {run.summary['statistics_device']}"
            print(f"{name}: {label}: diagnosis {t_run:.1f} s, {t_run / f_run:.1f}x its forward ({f_run:.3f} s); "
                  f"speed-up over cpu/float32 {t_cpu / t_run:.1f}x {run.summary['timings_s']}")
            compare(cpu, run, f"{label} vs cpu/float32")


if __name__ == "__main__":
    main()
