"""Spectra on a sample of the texts (``spectra_texts``) against spectra on every text.

For each model and corpus size, the one-pass diagnosis (removal off, intervals and verdicts included) with
``spectra_texts='all'`` is the reference; each other setting (``'auto'``, the default, and fixed sample sizes)
is compared with it: the share of heads whose ``selection`` verdict agrees (and how the others changed), the
Spearman rank correlation of each spectral column, the stages and predicted agreement of ``'auto'``
(:mod:`attnspec.diagnostics.pipeline.spectra_plan`), and the wall time of the diagnosis and of its spectra step.
The other verdicts (``query_selection``, ``dependence``) do not read the spectra; the script checks that they
are unchanged.

Prints figures only; asserts nothing. Timings are those of this process: take them on a quiet machine.
Usage: ``python benchmarks/bench_spectra_texts.py [--models minilm,gemma3-270m,qwen2.5-0.5b] [--texts 64,256]
[--fixed 32,64] [--threads 2]``.
"""
from __future__ import annotations

import argparse
import os
import time
import warnings

import numpy as np

SPECTRAL = ("spec_w1_rel", "spec_ks", "spec_outliers_per_text", "null_w1_rel", "selection_score",
            "removal_spec_shift", "removal_spec_shift_ge")


def _run(ad, tok, texts, spectra_texts):
    from attnspec import diagnose
    t = time.perf_counter()
    d = diagnose(ad, tok, texts, max_length=128, removal=False, gradient=False, spectra_texts=spectra_texts)
    return d, time.perf_counter() - t


def _compare(ref, d) -> str:
    from scipy.stats import spearmanr
    a, b = ref.heads, d.heads
    agree = float(np.mean(a["selection"].to_numpy() == b["selection"].to_numpy()))
    moves = {}
    for x, y in zip(a["selection"], b["selection"]):
        if x != y:
            moves[f"{x}->{y}"] = moves.get(f"{x}->{y}", 0) + 1
    others = all((a[v] == b[v]).all() for v in ("query_selection", "dependence") if v in a)
    rho = []
    for c in SPECTRAL:
        x, y = a[c].to_numpy(float), b[c].to_numpy(float)
        ok = np.isfinite(x) & np.isfinite(y)
        rho.append(f"{c} {spearmanr(x[ok], y[ok]).statistic:.3f}" if ok.sum() > 2 else f"{c} n/a")
    return (f"selection verdicts agree {agree:.3f} ({len(a)} heads; {moves or 'none changed'}); other verdicts "
            f"{'unchanged' if others else 'CHANGED'}; Spearman: " + ", ".join(rho))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="minilm,gemma3-270m,qwen2.5-0.5b")
    ap.add_argument("--texts", default="64,256", help="corpus sizes (built-in texts; packed for causal LMs)")
    ap.add_argument("--fixed", default="32,64", help="fixed sample sizes compared besides 'auto'")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    import torch
    torch.set_num_threads(args.threads)
    from attnspec.data import builtin_texts, packed_texts
    from attnspec.models import adapt, load_model
    print(f"load average at start: {os.getloadavg()[0]:.1f}")
    for name in args.models.split(","):
        model, tok = load_model(name)
        ad = adapt(model)
        warm = packed_texts(tok, 8, 128) if ad.kind == "causal-lm" else builtin_texts(8)
        _run(ad, tok, warm, "all")                  # first calls allocate and choose kernels: not timed
        for n in (int(x) for x in args.texts.split(",")):
            texts = packed_texts(tok, n, 128) if ad.kind == "causal-lm" else builtin_texts(n)
            ref, t_ref = _run(ad, tok, texts, "all")
            print(f"{name}, {n} texts: all {t_ref:.1f} s (spectra {ref.summary['timings_s']['spectra']:.1f} s)",
                  flush=True)
            settings = ["auto"] + [int(k) for k in args.fixed.split(",") if int(k) < n]
            for st in settings:
                d, t = _run(ad, tok, texts, st)
                plan = d.summary["spectra_texts"]
                print(f"  {str(st):>4s}: {t:.1f} s (spectra {d.summary['timings_s']['spectra']:.1f} s), "
                      f"{plan['texts_used']} texts {plan['stages']}, predicted {plan['predicted_agreement']}; "
                      f"{_compare(ref, d)}; load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
