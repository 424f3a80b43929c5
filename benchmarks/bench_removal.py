"""Head removal at scale: the default removal mode's whole-process time, and its ranking against exact removal.

For each model, two subprocesses on the same built-in texts (packed to ``--max-length`` tokens):

* ``default``: the whole process (imports, model load, the full diagnosis with ``removal='auto'``, i.e.
  'sampled' for models above 150 M parameters: every head exactly on a seeded sample of the texts, 6 first and
  more until the heads' ranking is predicted to agree with the whole corpus' at Spearman 0.92
  (``removal_texts='auto'``), truncated vocabulary) timed from the interpreter's start (goal: <= 120 s on 2
  cores for Gemma 3 270M, 16 texts of 128 tokens; 685 s before);
* ``exact``: every head removed exactly on every predicted position (the reference ranking), or read from
  ``--reference-dir`` (JSON written by an earlier run) or ``--reference-npz`` (per-text effects ``e``
  ``(n_layers, H, texts)`` and normalizers ``c`` of every head on every text, e.g. from
  ``attnspec.models.ablation.iter_removal_effects``; the reference is ``e.sum(-1) / c.sum()``).

Prints both times, the texts the default mode used, their stages and predicted agreement, the Spearman
correlation between the default mode's ``removal_estimate`` and the exact effects over all heads (goal >= 0.9),
and the same for first order alone when the default mode computes it. Prints figures only; asserts nothing.
``--device cuda --exact-only --reference-dir DIR`` computes the reference on an accelerator (float32) and keeps
it in DIR for a later CPU run. Usage: ``python benchmarks/bench_removal.py [--models gemma3-270m,qwen2.5-0.5b]
[--n-texts 16] [--reference-npz qwen2.5-0.5b=PATH] [--reference-dir DIR] [--device cuda --exact-only]``.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

CHILD = r"""
import json, sys, time, warnings
t_start = float(sys.argv[3])
warnings.filterwarnings("ignore")
import numpy as np, torch
torch.set_num_threads(int(sys.argv[2]))
job = json.loads(sys.argv[1])
from attnspec import diagnose
from attnspec.models import adapt, load_model
model, tok = load_model(job["model"], device=job.get("device", "cpu"))
ad = adapt(model)
t_diag = time.perf_counter()
if job["what"] == "default":
    d = diagnose(ad, tok, "builtin", n_texts=job["n_texts"], max_length=job["max_length"], min_tokens=0)
    h = d.heads
    out = {"estimate": h["removal_estimate" if "removal_estimate" in h else "removal_effect"].tolist(),
           "first_order": h["removal_first_order"].tolist() if "removal_first_order" in h else None,
           "removal": d.summary["removal"], "timings": d.summary["timings_s"]}
else:
    from attnspec.diagnostics.pipeline.passes import exact_pass
    from attnspec.diagnostics.pipeline.shards import make_shards
    from attnspec.diagnostics.pipeline.texts import resolve_texts
    texts, _ = resolve_texts("builtin", tok, ad.kind, job["n_texts"], job["max_length"], None)
    sh = make_shards(tok, texts, 1, job["max_length"])[0]
    r = exact_pass(ad, sh.removal_batches, mean_ablation=False, means=None, max_tokens=16384, seed=0)
    e = r.exact.mean()
    if job.get("device") == "cuda":
        torch.cuda.synchronize()
    out = {"estimate": [float(e[i, k]) for i, s in enumerate(ad.sites) for k in range(s.n_heads)]}
out["diagnose_s"] = time.perf_counter() - t_diag
out["process_s"] = time.time() - t_start
print("RESULT " + json.dumps(out))
"""


def run(job: dict, threads: int) -> dict:
    p = subprocess.run([sys.executable, "-c", CHILD, json.dumps(job), str(threads), str(time.time())],
                       capture_output=True, text=True)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{job}: {p.stderr[-2000:]}")


def spearman(a, b) -> float:
    import numpy as np
    import pandas as pd
    a, b = np.asarray(a, float), np.asarray(b, float)
    ok = np.isfinite(a) & np.isfinite(b)
    return float(np.corrcoef(pd.Series(a[ok]).rank(), pd.Series(b[ok]).rank())[0, 1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="gemma3-270m,qwen2.5-0.5b")
    ap.add_argument("--n-texts", type=int, default=16)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip-exact", action="store_true", help="time the default mode only")
    ap.add_argument("--exact-only", action="store_true",
                    help="compute (or read) the all-heads exact reference only, e.g. on an accelerator with --device")
    ap.add_argument("--device", default="cpu", help="device of both runs (e.g. cuda for the exact reference)")
    ap.add_argument("--reference-dir", default=None,
                    help="keep the all-heads exact reference here and reuse it (it takes ~20 min on Gemma)")
    ap.add_argument("--reference-npz", action="append", default=[], metavar="MODEL=PATH",
                    help="the all-heads exact reference of MODEL from saved per-text effects (e, c); repeatable")
    a = ap.parse_args()
    import os
    for m in a.models.split(","):
        job = {"model": m, "n_texts": a.n_texts, "max_length": a.max_length, "device": a.device}
        if a.exact_only:
            e = _exact(job, a)
            print(f"{m}: exact removal of every head on {a.device}: {_took(e)}")
            continue
        d = run(dict(job, what="default"), a.threads)
        rm = d["removal"]
        texts = rm.get("texts")
        print(f"{m}: default mode '{rm['mode']}' (exact on {rm.get('n_exact_heads')} heads, "
              f"{rm.get('positions_per_text') or 'all'} positions/text, texts {texts}, vocabulary "
              f"{rm.get('vocab_top')}): whole process {d['process_s']:.1f} s "
              f"(diagnosis {d['diagnose_s']:.1f} s; {d['timings']}); goal <= 120 s; load {os.getloadavg()[0]:.1f}")
        if rm.get("texts_rule") == "auto":
            print(f"  texts used {rm['n_texts_used']} (stages {rm['stages']}), predicted agreement with all texts "
                  f"{rm['predicted_agreement']} (target {rm['agreement_target']})")
        if rm["mode"] == "screened":
            print(f"  measured by the default mode on its sampled heads: {rm.get('spearman_first_order_exact_sampled')}")
        if a.skip_exact:
            continue
        for e in _references(job, a):
            print(f"  exact removal of every head: {_took(e)}")
            print(f"  Spearman default ranking vs all-heads exact: {spearman(d['estimate'], e['estimate']):.3f} "
                  f"(goal >= 0.9)")
            if d["first_order"] is not None:
                print(f"  Spearman first order alone vs exact: {spearman(d['first_order'], e['estimate']):.3f}")


def _took(e: dict) -> str:
    """Where a reference comes from: its file, or how long it took."""
    return e.get("source") or f"{e['diagnose_s']:.1f} s (whole process {e['process_s']:.1f} s)"


def _references(job: dict, a) -> list[dict]:
    """The ``--reference-npz`` references of the model (``{'estimate', 'source'}``), else the one of :func:`_exact`."""
    import numpy as np
    out = []
    for item in a.reference_npz:
        model, path = item.split("=", 1)
        if model == job["model"]:
            z = np.load(path)
            out.append({"estimate": (z["e"].sum(-1) / z["c"].sum()).ravel().tolist(), "source": path})
    return out or [_exact(job, a)]


def _exact(job: dict, a) -> dict:
    """The all-heads exact reference, read from / written to ``--reference-dir`` when given (it does not
    depend on attnspec's removal options, only on the model, texts and lengths)."""
    import pathlib
    path = (pathlib.Path(a.reference_dir) / f"{job['model']}-{job['n_texts']}x{job['max_length']}.json"
            if a.reference_dir else None)
    if path is not None and path.is_file():
        return json.loads(path.read_text())
    e = run(dict(job, what="exact"), a.threads)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(e))
    return e


if __name__ == "__main__":
    main()
