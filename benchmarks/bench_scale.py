"""One-pass diagnosis at scale: speed against a plain forward pass, and peak memory.

Each measurement runs in its own subprocess (clean peak RSS, ``ru_maxrss``):

* ``speed``: for each model, the one-pass diagnosis (``removal=False, gradient=False``: identification,
  selection, dependence, spectra) and a plain ``model(**batch)`` forward over the same length-bucketed
  batches; prints tokens/s of both and the time ratio (goal: diagnosis <= 3x the forward's time);
* ``length``: peak RSS of the one-pass diagnosis of one packed text of ``--max-length`` 128, 512, 2048
  tokens (Qwen2.5-0.5B by default), beside the peak of the plain forward on the same text: attnspec's
  part should grow like the model's activations, with no ``L^2`` term beyond one tile;
* ``corpus``: peak RSS of MiniLM on 64 and 1,024 built-in texts (goal: within 10 %).

Prints figures only; asserts nothing. Usage:
``python benchmarks/bench_scale.py [--models minilm,gemma3-270m,qwen2.5-0.5b] [--parts speed,length,corpus]
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
out = {"tokens": int(sum(int(b["attention_mask"].sum()) for b in batches)), "rss_loaded_mb": base}
if job["what"] in ("forward", "both"):
    t = time.perf_counter()
    with torch.no_grad():
        for b in batches:
            ad.run_base(b)
    out["forward_s"] = time.perf_counter() - t
    out["rss_forward_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
if job["what"] in ("diagnose", "both"):
    t = time.perf_counter()
    d = diagnose(ad, tok, texts, max_length=L, removal=False, gradient=False, min_tokens=0)
    out["diagnose_s"] = time.perf_counter() - t
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="minilm,gemma3-270m,qwen2.5-0.5b")
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
                  f"({r['diagnose_s']:.2f} s): ratio {r['diagnose_s'] / r['forward_s']:.1f}x  {r['timings']}", flush=True)
    if "length" in parts:
        print(f"peak RSS vs text length ({args.length_model}, one packed text):")
        for L in (int(x) for x in args.lengths.split(",")):
            f = run({"model": args.length_model, "n_texts": 1, "max_length": L, "what": "forward"}, args.threads)
            d = run({"model": args.length_model, "n_texts": 1, "max_length": L, "what": "diagnose"}, args.threads)
            print(f"  L={L:5d}: loaded {f['rss_loaded_mb']:.0f} MB, forward peak {f['rss_forward_mb']:.0f} MB "
                  f"(+{f['rss_forward_mb'] - f['rss_loaded_mb']:.0f}), diagnosis peak {d['rss_diagnose_mb']:.0f} MB "
                  f"(+{d['rss_diagnose_mb'] - d['rss_loaded_mb']:.0f}), diagnosis {d['diagnose_s']:.1f} s", flush=True)
    if "corpus" in parts:
        print("peak RSS vs corpus size (minilm, built-in texts):")
        rs = {n: run({"model": "minilm", "n_texts": n, "max_length": 128, "what": "diagnose"}, args.threads)
              for n in (64, 1024)}
        for n, r in rs.items():
            print(f"  {n:5d} texts ({r['tokens']} tokens): peak {r['rss_diagnose_mb']:.0f} MB, {r['diagnose_s']:.1f} s")
        print(f"  ratio 1024/64: {rs[1024]['rss_diagnose_mb'] / rs[64]['rss_diagnose_mb']:.3f}")


if __name__ == "__main__":
    main()
