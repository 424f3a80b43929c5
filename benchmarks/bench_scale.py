"""One-pass diagnosis at scale: speed against a plain forward pass, and peak memory.

Each measurement runs in its own subprocess (clean peak RSS, ``ru_maxrss``):

* ``speed``: for each model, the one-pass diagnosis (``removal=False, gradient=False``: identification,
  selection, dependence, spectra) and a plain ``model(**batch)`` forward over the same length-bucketed
  batches; prints tokens/s of both and the time ratio (goal: diagnosis <= 3x the forward's time), and the
  same ratio in CPU time of the process (all threads; less sensitive than wall time to other jobs on a
  shared machine) with the load average after the run;
* ``length``: peak RSS of the one-pass diagnosis of one packed text of ``L`` tokens, beside the peak of the
  plain forward on the same text, each over the loaded model (``+MB``), and the ratio of the two increments
  (diagnosis increment / forward increment), with the diagnosis' wall time: attnspec's part should grow like
  the model's activations, with no ``L^2`` term beyond one tile. Each line also prints the terms of the
  peak formula (:func:`peak_terms`) for that model and length. The plan ``--length-model`` is
  ``MODEL[:L1,L2,...]`` items joined by ``;`` (quote it in a shell; a model without lengths takes
  ``--lengths``); default Qwen2.5-0.5B at 128, 512, 2,048 and SmolLM2-135M (8,192-token context) at
  2,048, 4,096, 8,192 tokens; with ``--repeats N``, N fresh processes of each and the min / median / max of the
  increments (a peak is a resident size, so it includes freed memory the allocator keeps: it moves by up to
  100 MB between runs of the same code). The text is :func:`attnspec.data.packed_texts`' first one (consecutive
  corpus sentences joined until it has ``L`` tokens, then truncated to ``L``); the built-in corpus is
  about 45k tokens (SmolLM2's tokenizer), enough for 8,192 without repeating it;
* ``wide``: a random model with Llama-3-8B's attention and MLP geometry (d_model 4,096, 32 query and 8
  key-value heads of 128, MLP 14,336) but ``--wide-layers`` layers (default 2, about 1.8 GB in float32)
  and a 1,024-token vocabulary (``LlamaForCausalLM``, ``torch.manual_seed(0)``, SDPA), on one text of
  ``--wide-lengths`` random tokens (default 512, 2,048; all-ones mask) given to ``diagnose`` as token ids:
  a plain ``run_base`` forward (after one warm-up) against the one-pass diagnosis of the same batch, with
  the time ratio, the diagnosis' ``timings_s`` and the peak RSS of each (not in the default ``--parts``: slow);
* ``corpus``: peak RSS of MiniLM on 64 and 1,024 built-in texts (goal: within 10 %).

Prints figures only; asserts nothing. Usage:
``python benchmarks/bench_scale.py [--models minilm,gemma3-270m,qwen2.5-0.5b,smollm2-135m]
[--parts speed,length,corpus,wide] [--threads 2] [--length-model 'qwen2.5-0.5b:128,512,2048;smollm2-135m:2048']
[--repeats 1] [--wide-layers 2] [--wide-lengths 512,2048]``.
"""
from __future__ import annotations

import argparse
import json
import statistics
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

WIDE_CHILD = r"""
import json, resource, sys, time, warnings
warnings.filterwarnings("ignore")
import torch
torch.set_num_threads(int(sys.argv[2]))
from transformers import LlamaConfig, LlamaForCausalLM
from attnspec import diagnose
from attnspec.models import adapt, make_batches
job = json.loads(sys.argv[1])
L = job["length"]
torch.manual_seed(0)
cfg = LlamaConfig(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                  intermediate_size=14336, num_hidden_layers=job["layers"], vocab_size=1024,
                  max_position_embeddings=max(8192, L), attn_implementation="sdpa")
model = LlamaForCausalLM(cfg).float().eval()
ad = adapt(model)
g = torch.Generator().manual_seed(1)
inputs = {"input_ids": torch.randint(0, cfg.vocab_size, (1, L), generator=g),
          "attention_mask": torch.ones(1, L, dtype=torch.long)}
batch = make_batches(inputs)[0]
out = {"tokens": L, "params_m": sum(p.numel() for p in model.parameters()) / 1e6,
       "rss_loaded_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
with torch.no_grad():
    ad.run_base(batch)                  # warm-up: first calls allocate and choose kernels
    t = time.perf_counter()
    ad.run_base(batch)
    out["forward_s"] = time.perf_counter() - t
out["rss_forward_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t = time.perf_counter()
d = diagnose(ad, inputs, max_length=L, removal=False, gradient=False, min_tokens=0)
out["diagnose_s"] = time.perf_counter() - t
out["timings"] = d.summary["timings_s"]
out["rss_diagnose_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print("RESULT " + json.dumps(out))
"""


def run(job: dict, threads: int, child: str = CHILD) -> dict:
    p = subprocess.run([sys.executable, "-c", child, json.dumps(job), str(threads)], capture_output=True, text=True)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{job}: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else 'no result'}")


def peak_terms(geometry: list, L: int, B: int = 1, itemsize: int = 4, threads: int = 2,
               dense_masks: int = 0) -> dict[str, float]:
    """Terms (MB) of the diagnosis' peak beyond the plain forward pass, for ``B`` texts of ``L`` tokens.

    ``geometry``: per layer ``(H, H_kv, d_head, d_out)``. Terms: ``qkv``, the recorded attention inputs of
    the layers in flight, ``threads`` times the largest layer's ``B L (H + 2 H_kv) d_head`` numbers of
    ``itemsize`` bytes (the forward cache writes each layer's record as the model makes it and the steps read
    them back memory-mapped; without the cache, on an accelerator, every layer's); ``masks``, one ``B L^2``-byte allowed
    set per distinct mask tensor the model passes its attention (``dense_masks``: none for causal SDPA on
    unpadded texts, whose allowed set is kept as its rule, :mod:`attnspec.models.rule_mask`); ``grams``, the
    float64 head-pair Gram blocks per layer (the upper ones, ``H (H + 1) / 2`` blocks of ``d_head^2``) and one more
    while batches add up; ``layer``, one spectra layer in flight per thread, the larger of its two phases
    (:mod:`attnspec.diagnostics.pipeline.spectra`): two contexts (``B H L d_head`` float32 numbers each) beside
    about 12 of one query tile's temporaries (``DEFAULT_TILE_BYTES`` each: the weights, the equivalent's noise and
    weights, the null head's logits) while a pass builds them, or two contexts, the layer output (``B L d_out``)
    and the budget of the layer without each head, ``max(32 MiB, one text's Rayleigh-Ritz temporaries)``
    (:func:`attnspec.diagnostics.statistics.spectral.ritz_bytes_per_text`) while the layer spectra are taken.
    """
    from attnspec.diagnostics.options import DEFAULT_TILE_BYTES
    from attnspec.diagnostics.statistics.spectral import REMOVED_GRAM_BYTES, ritz_bytes_per_text
    mb = 2.0 ** 20
    qkv = threads * max(B * L * (h + 2 * kv) * d * itemsize for h, kv, d, _ in geometry) / mb
    masks = dense_masks * B * L * L / mb
    grams = sum(2 * h * (h + 1) // 2 * d * d * 8 for h, _, d, _ in geometry) / mb
    layer = max(2 * B * h * L * d * 4 + max(12 * DEFAULT_TILE_BYTES,
                                            B * L * o * 4 + max(REMOVED_GRAM_BYTES, ritz_bytes_per_text(h, d, L, o)))
                for h, _, d, o in geometry) / mb
    return {"qkv": qkv, "masks": masks, "grams": grams, "layer": threads * layer,
            "total": qkv + masks + grams + threads * layer}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="minilm,gemma3-270m,qwen2.5-0.5b,smollm2-135m")
    ap.add_argument("--parts", default="speed,length,corpus")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--length-model", default="qwen2.5-0.5b:128,512,2048;smollm2-135m:2048,4096,8192",
                    help="MODEL[:L1,L2,...] items joined by ';' (a model without lengths takes --lengths)")
    ap.add_argument("--lengths", default="128,512,2048")
    ap.add_argument("--repeats", type=int, default=1,
                    help="length part: runs of the forward and of the diagnosis per length, each in a fresh process "
                         "(their peaks move by up to 100 MB with what the allocator keeps): min / median / max")
    ap.add_argument("--wide-layers", type=int, default=2)
    ap.add_argument("--wide-lengths", default="512,2048")
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
        for item in args.length_model.split(";"):
            model, _, lengths = item.strip().partition(":")
            print(f"peak RSS vs text length ({model}, one packed text):")
            for L in (int(x) for x in (lengths or args.lengths).split(",")):
                fis, dis = [], []
                for _ in range(max(1, args.repeats)):
                    f = run({"model": model, "n_texts": 1, "max_length": L, "what": "forward"}, args.threads)
                    d = run({"model": model, "n_texts": 1, "max_length": L, "what": "diagnose"}, args.threads)
                    fi, di = f["rss_forward_mb"] - f["rss_loaded_mb"], d["rss_diagnose_mb"] - d["rss_loaded_mb"]
                    fis.append(fi)
                    dis.append(di)
                    print(f"  L={L:5d} ({d['tokens']} tokens): loaded {f['rss_loaded_mb']:.0f} MB, forward peak "
                          f"{f['rss_forward_mb']:.0f} MB (+{fi:.0f}), diagnosis peak {d['rss_diagnose_mb']:.0f} MB "
                          f"(+{di:.0f}): increment ratio {di / max(fi, 1):.1f}x; diagnosis {d['diagnose_s']:.1f} s; "
                          f"load {os.getloadavg()[0]:.1f}", flush=True)
                if len(fis) > 1:
                    fm, dm = statistics.median(fis), statistics.median(dis)
                    print(f"           over {len(fis)} runs: forward +{min(fis):.0f} / +{fm:.0f} / +{max(fis):.0f} MB, "
                          f"diagnosis +{min(dis):.0f} / +{dm:.0f} / +{max(dis):.0f} MB (min / median / max): "
                          f"ratio of the medians {dm / max(fm, 1):.1f}x", flush=True)
                terms = peak_terms(d["geometry"], L, 1, d["itemsize"], args.threads)
                print(f"           diagnosis - forward: {d['rss_diagnose_mb'] - f['rss_forward_mb']:+.0f} MB; "
                      "formula: " + ", ".join(f"{k} {v:.0f}" for k, v in terms.items()) + " MB", flush=True)
    if "wide" in parts:
        print(f"Llama-3-8B geometry, {args.wide_layers} random layers (one text of random tokens):")
        for L in (int(x) for x in args.wide_lengths.split(",")):
            r = run({"layers": args.wide_layers, "length": L}, args.threads, WIDE_CHILD)
            print(f"  L={L:5d} ({r['params_m']:.0f}M parameters): forward {r['forward_s']:.2f} s, diagnosis "
                  f"{r['diagnose_s']:.1f} s: ratio {r['diagnose_s'] / r['forward_s']:.1f}x; peak RSS loaded "
                  f"{r['rss_loaded_mb']:.0f} MB, forward {r['rss_forward_mb']:.0f} MB "
                  f"(+{r['rss_forward_mb'] - r['rss_loaded_mb']:.0f}), diagnosis {r['rss_diagnose_mb']:.0f} MB "
                  f"(+{r['rss_diagnose_mb'] - r['rss_loaded_mb']:.0f}); load {os.getloadavg()[0]:.1f}  "
                  f"{r['timings']}", flush=True)
    if "corpus" in parts:
        print("peak RSS vs corpus size (minilm, built-in texts):")
        rs = {n: run({"model": "minilm", "n_texts": n, "max_length": 128, "what": "diagnose"}, args.threads)
              for n in (64, 1024)}
        for n, r in rs.items():
            print(f"  {n:5d} texts ({r['tokens']} tokens): peak {r['rss_diagnose_mb']:.0f} MB, {r['diagnose_s']:.1f} s")
        print(f"  ratio 1024/64: {rs[1024]['rss_diagnose_mb'] / rs[64]['rss_diagnose_mb']:.3f}")


if __name__ == "__main__":
    main()
