"""The one-pass diagnosis on CUDA in bfloat16 against CPU in float32.

For MiniLM (64 texts) and Qwen2.5-0.5B (16 packed texts of 128 tokens): diagnose on ``cpu``/``float32``
and on ``cuda``/``bfloat16`` (``removal=False``; gradient importance on), print the wall time of each, their
ratio, and per numeric column of the heads table the largest relative difference
``|x_gpu - x_cpu| / (|x_cpu| + 1e-12)`` and the median one. Statistics are accumulated in float64 on
the CPU in both runs; the differences come from the model's own bfloat16 forward pass.

Without a CUDA device it prints one line saying so and exits 0. Usage:
``python benchmarks/bench_device.py [--models minilm,qwen2.5-0.5b] [--device cuda] [--dtype bfloat16]``.
"""
from __future__ import annotations

import argparse
import time


def diagnose_on(name: str, device: str, dtype: str):
    import torch

    from attnspec import diagnose
    from attnspec.models import load_model
    model, tok = load_model(name, device=device, dtype=dtype)
    n = 64 if name == "minilm" else 16
    t = time.perf_counter()
    d = diagnose(model, tok, "builtin", n_texts=n, removal=False, gradient=True)
    if device == "cuda":
        torch.cuda.synchronize()
    return d, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="minilm,qwen2.5-0.5b")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    args = ap.parse_args()
    import numpy as np
    import torch
    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench_device: skipped, no CUDA device on this machine")
        return
    for name in args.models.split(","):
        cpu, t_cpu = diagnose_on(name, "cpu", "float32")
        gpu, t_gpu = diagnose_on(name, args.device, args.dtype)
        print(f"{name}: cpu/float32 {t_cpu:.1f} s, {args.device}/{args.dtype} {t_gpu:.1f} s, speed-up {t_cpu / t_gpu:.1f}x")
        a, b = cpu.heads.select_dtypes("number"), gpu.heads.select_dtypes("number")
        rel = ((b - a).abs() / (a.abs() + 1e-12))
        for col in a.columns:
            if col in ("layer", "head", "kv_group", "n_tokens", "cka_partner"):
                continue
            print(f"  {col:24s} max rel diff {np.nanmax(rel[col]):.3g}  median {np.nanmedian(rel[col]):.3g}")
        agree = float((cpu.heads["selection"] == gpu.heads["selection"]).mean())
        print(f"  selection labels equal for {agree:.1%} of heads")


if __name__ == "__main__":
    main()
