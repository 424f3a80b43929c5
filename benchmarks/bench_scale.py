"""One-pass diagnosis at scale: speed against a plain forward pass, and peak memory.

Each measurement runs in its own subprocess (clean peak RSS, ``ru_maxrss``):

* ``speed``: for each model, the one-pass diagnosis (``removal=False, gradient=False``: identification,
  selection, dependence, spectra) and a plain ``model(**batch)`` forward over the same length-bucketed
  batches; prints tokens/s of both and the time ratio (goal: diagnosis <= 3x the forward's time), and the
  same ratio in CPU time of the process (all threads; less sensitive than wall time to other jobs on a
  shared machine) with the load average after the run;
* ``length``: peak RSS of the one-pass diagnosis of one packed text of ``--max-length`` 128, 512, 2048
  tokens (Qwen2.5-0.5B by default), beside the peak of the plain forward on the same text: attnspec's
  part should grow like the model's activations, with no ``L^2`` term beyond one tile. Each line also
  prints the terms of the peak formula (:func:`peak_terms`) for that model and length;
* ``corpus``: peak RSS of MiniLM on 64 and 1,024 built-in texts (goal: within 10 %).

Prints figures only; asserts nothing. Usage:
``python benchmarks/bench_scale.py [--models minilm,gemma3-270m,qwen2.5-0.5b,smollm2-135m] [--parts speed,length,corpus]
[--threads 2]``.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time, warnings
warnings.filterwarnings("ignore")
import torch
torch.set_num_threads(int(sys.argv[2]))
from attnspec import diagnose
from attnspec.data import builtin_texts, packed_texts
from attnspec.models import adapt, load_model, make_batches
job = json.loads(sys.argv[1])
model, tok = load_model(job["model"])
ad = adapt(model)
causal = ad.kind == "causal-lm"
n, L = job["n_texts"], job["max_length"]
texts = packed_texts(tok, n, L) if causal else builtin_texts(n)
batches = make_batches(tok, texts, max_length=L, bucket_size=16)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
if job["what"] == "both":               # warm-up: first calls allocate and choose kernels
    with torch.no_grad():
        ad.run_base(batches[0])
out = {"tokens": int(sum(int(b["attention_mask"].sum()) for b in batches)), "rss_loaded_mb": base,
       "geometry": [[s.n_heads, s.n_kv_heads, s.head_dim, s.d_out] for s in ad.sites],
       "itemsize": next(model.parameters()).element_size()}
if job["what"] in ("forward", "both"):
    t, c = time.perf_counter(), time.process_time()
    with torch.no_grad():
        for b in batches:
            ad.run_base(b)
    out["forward_s"], out["forward_cpu_s"] = time.perf_counter() - t, time.process_time() - c
    out["rss_forward_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
if job["what"] in ("diagnose", "both"):
    t, c = time.perf_counter(), time.process_time()
    d = diagnose(ad, tok, texts, max_length=L, removal=False, gradient=False, min_tokens=0)
    out["diagnose_s"], out["diagnose_cpu_s"] = time.perf_counter() - t, time.process_time() - c
    out["timings"] = d.summary["timings_s"]
    out["rss_diagnose_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print("RESULT " + json.dumps(out))
"""


def run(job: dict, threads: int) -> dict:
    p = subprocess.run([sys.executable, "-c", CHILD, json.dumps(job), str(threads)], capture_output=True, text=True)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{job}: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else 'no result'}")


def peak_terms(geometry: list, L: int, B: int = 1, itemsize: int = 4, threads: int = 2,
               dense_masks: int = 0) -> dict[str, float]:
    """Terms (MB) of the diagnosis' peak beyond the plain forward pass, for ``B`` texts of ``L`` tokens.

    ``geometry``: per layer ``(H, H_kv, d_head, d_out)``. Terms: ``qkv``, the recorded attention inputs of
    all layers, ``sum_layers B L (H + 2 H_kv) d_head`` numbers of ``itemsize`` bytes (the forward cache's
    pages of a batch stay mapped until its last layer is processed); ``masks``, one ``B L^2``-byte allowed
    set per distinct mask tensor the model passes its attention (``dense_masks``: none for causal SDPA on
    unpadded texts, whose allowed set is kept as its rule, :mod:`attnspec.models.rule_mask`); ``grams``, the
    three float64 head-pair Gram sums per layer, ``3 (H d_head)^2 8`` bytes; ``layer``, one spectra layer in
    flight per thread: about 12 ``B H L d_head`` float32 numbers (the centered contexts, the layer outputs, the free rotation in
    float64) plus the removed-head Grams' budget ``max(32 MiB, 64 min(L, d_out)^2)``.
    """
    mb = 2.0 ** 20
    qkv = sum(B * L * (h + 2 * kv) * d * itemsize for h, kv, d, _ in geometry) / mb
    masks = dense_masks * B * L * L / mb
    grams = sum(3 * (h * d) ** 2 * 8 for h, _, d, _ in geometry) / mb
    layer = max(12 * B * h * L * d * 4 + max(32 * mb, 64 * min(L, o) ** 2) for h, _, d, o in geometry) / mb
    return {"qkv": qkv, "masks": masks, "grams": grams, "layer": threads * layer,
            "total": qkv + masks + grams + threads * layer}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="minilm,gemma3-270m,qwen2.5-0.5b,smollm2-135m")
    ap.add_argument("--parts", default="speed,length,corpus")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--length-model", default="qwen2.5-0.5b")
    ap.add_argument("--lengths", default="128,512,2048")
    args = ap.parse_args()
    parts = args.parts.split(",")
    import os
    print(f"load average at start: {os.getloadavg()[0]:.1f} (figures are upper bounds on a busy machine)")
    if "speed" in parts:
        print("speed (one-pass diagnosis vs plain forward, same batches):")
        for m in args.models.split(","):
            n = 64 if m == "minilm" else 16
            r = run({"model": m, "n_texts": n, "max_length": 128, "what": "both"}, args.threads)
            print(f"  {m:14s} {n} texts, {r['tokens']} tokens: forward {r['tokens'] / r['forward_s']:8.0f} tok/s "
                  f"({r['forward_s']:.2f} s), diagnosis {r['tokens'] / r['diagnose_s']:7.0f} tok/s "
                  f"({r['diagnose_s']:.2f} s): ratio {r['diagnose_s'] / r['forward_s']:.1f}x; CPU time (all threads) "
                  f"forward {r['forward_cpu_s']:.2f} s, diagnosis {r['diagnose_cpu_s']:.2f} s: ratio "
                  f"{r['diagnose_cpu_s'] / r['forward_cpu_s']:.1f}x; load {os.getloadavg()[0]:.1f}  {r['timings']}",
                  flush=True)
    if "length" in parts:
        print(f"peak RSS vs text length ({args.length_model}, one packed text):")
        for L in (int(x) for x in args.lengths.split(",")):
            f = run({"model": args.length_model, "n_texts": 1, "max_length": L, "what": "forward"}, args.threads)
            d = run({"model": args.length_model, "n_texts": 1, "max_length": L, "what": "diagnose"}, args.threads)
            print(f"  L={L:5d}: loaded {f['rss_loaded_mb']:.0f} MB, forward peak {f['rss_forward_mb']:.0f} MB "
                  f"(+{f['rss_forward_mb'] - f['rss_loaded_mb']:.0f}), diagnosis peak {d['rss_diagnose_mb']:.0f} MB "
                  f"(+{d['rss_diagnose_mb'] - d['rss_loaded_mb']:.0f}), diagnosis {d['diagnose_s']:.1f} s", flush=True)
            terms = peak_terms(d["geometry"], L, 1, d["itemsize"], args.threads)
            print(f"           diagnosis - forward: {d['rss_diagnose_mb'] - f['rss_forward_mb']:+.0f} MB; formula: "
                  + ", ".join(f"{k} {v:.0f}" for k, v in terms.items()) + " MB", flush=True)
    if "corpus" in parts:
        print("peak RSS vs corpus size (minilm, built-in texts):")
        rs = {n: run({"model": "minilm", "n_texts": n, "max_length": 128, "what": "diagnose"}, args.threads)
              for n in (64, 1024)}
        for n, r in rs.items():
            print(f"  {n:5d} texts ({r['tokens']} tokens): peak {r['rss_diagnose_mb']:.0f} MB, {r['diagnose_s']:.1f} s")
        print(f"  ratio 1024/64: {rs[1024]['rss_diagnose_mb'] / rs[64]['rss_diagnose_mb']:.3f}")


if __name__ == "__main__":
    main()
