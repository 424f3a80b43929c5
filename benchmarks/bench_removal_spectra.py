"""The layer's spectrum without each head from the layer's eigenvectors against exactly (``removal_spectra``).

For each model, the one-pass diagnosis (``removal=False, gradient=False``) with ``removal_spectra='exact'`` (one
eigendecomposition per head, text and spectrum) and with ``'ritz'`` (the default: one per text,
:func:`attnspec.diagnostics.statistics.spectral.layer_eigs_ritz`), on the texts of ``bench_scale.py --parts
speed`` (MiniLM: 64 built-in texts; the causal LMs: 16 packed texts of 128 tokens). Prints, for
``removal_spec_shift`` and ``removal_spec_shift_ge``: the Spearman rank correlation over all heads, the median
within-layer one, the percentiles (5 / 50 / 95) of Rayleigh-Ritz over exact, the heads more than 10 % off, the error
over the largest exact shift of the head's layer (95th percentile and largest), the layers whose largest shift names
the same head; the largest relative change of every other column (heads, layers and pairs);
and the spectra step's seconds of each run (wall time: a figure only on an otherwise idle machine).

Prints figures only; asserts nothing. Usage:
``python benchmarks/bench_removal_spectra.py [--models minilm,gemma3-270m,qwen2.5-0.5b,smollm2-135m] [--threads 2]``.
"""
from __future__ import annotations

import argparse
import os
import warnings

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

SHIFTS = ("removal_spec_shift", "removal_spec_shift_ge")


def _diagnoses(name: str) -> dict:
    import torch
    from attnspec import diagnose
    from attnspec.data import builtin_texts, packed_texts
    from attnspec.models import adapt, load_model
    model, tok = load_model(name)
    ad = adapt(model)
    n = 64 if name == "minilm" else 16
    texts = packed_texts(tok, n, 128) if ad.kind == "causal-lm" else builtin_texts(n)
    with torch.no_grad():
        return {how: diagnose(ad, tok, texts, max_length=128, removal=False, gradient=False, min_tokens=0,
                              removal_spectra=how) for how in ("exact", "ritz")}


def _largest_other_change(a: pd.DataFrame, b: pd.DataFrame, skip: set) -> tuple[float, str]:
    worst = (0.0, "")
    for c in a.columns:
        if c in skip or not pd.api.types.is_numeric_dtype(a[c]) or pd.api.types.is_bool_dtype(a[c]):
            if c not in skip and not (a[c].astype(str) == b[c].astype(str)).all():
                return float("inf"), c
            continue
        x, y = a[c].to_numpy(float), b[c].to_numpy(float)
        ok = np.isfinite(x) & np.isfinite(y)
        if (np.isfinite(x) != np.isfinite(y)).any():
            return float("inf"), c
        r = float(np.max(np.abs(x[ok] - y[ok]) / (np.abs(x[ok]) + 1e-12))) if ok.any() else 0.0
        worst = max(worst, (r, c))
    return worst


def main() -> None:
    warnings.filterwarnings("ignore")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="minilm,gemma3-270m,qwen2.5-0.5b,smollm2-135m")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    import torch
    torch.set_num_threads(args.threads)
    print(f"load average at start: {os.getloadavg()[0]:.1f}")
    for name in args.models.split(","):
        d = _diagnoses(name)
        ex, fo = d["exact"].heads, d["ritz"].heads
        print(f"{name} ({len(ex)} heads): spectra step {d['exact'].summary['timings_s']['spectra']:.2f} s exact, "
              f"{d['ritz'].summary['timings_s']['spectra']:.2f} s Rayleigh-Ritz", flush=True)
        for c in SHIFTS:
            x, y = ex[c].to_numpy(float), fo[c].to_numpy(float)
            per_layer = pd.DataFrame({"layer": ex["layer"], "x": x, "y": y}).groupby("layer")
            within = per_layer.apply(lambda g: g.x.rank().corr(g.y.rank())).median()
            same_top = per_layer.apply(lambda g: g.x.idxmax() == g.y.idxmax()).mean()
            r = y / x
            scale = per_layer.x.transform("max").to_numpy()
            e = np.abs(y - x) / scale
            print(f"  {c}: Spearman {spearmanr(x, y)[0]:.4f} (within layers, median {within:.3f}); Ritz / "
                  f"exact 5/50/95 %: {' / '.join(f'{q:.3f}' for q in np.percentile(r, [5, 50, 95]))}; "
                  f"{int((np.abs(r - 1) > 0.1).sum())} heads more than 10 % off; error over the layer's largest "
                  f"shift {np.percentile(e, 95):.3f} (95 %), {e.max():.3f} (largest); largest shift the same head in "
                  f"{100 * same_top:.0f} % of layers", flush=True)
        skip = set(SHIFTS) | {c + s for c in SHIFTS for s in ("_lo", "_hi")}
        for table in ("heads", "layers", "pairs"):
            r, c = _largest_other_change(getattr(d["exact"], table), getattr(d["ritz"], table), skip)
            print(f"  other {table} columns: largest relative change {r:.1e}" + (f" ({c})" if r > 0 else ""), flush=True)


if __name__ == "__main__":
    main()
