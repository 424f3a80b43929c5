"""Is a change of the diagnosis' random draws within the statistics' own seed-to-seed spread?

A change of how the Gaussian equivalents' noise, the null heads or the free rotations are drawn gives every
head a new realization of the same random statistic: it acts like a change of ``seed``. Comparing its verdicts
with the old code's at one seed therefore measures the seed-to-seed spread, not the change. This benchmark runs
the one-pass diagnosis (``removal=False, gradient=False``) of each model at seeds ``0..S-1`` with this checkout
(*new*) and with a baseline source tree (*old*: ``--baseline-src``, the ``src`` folder of another checkout, for
example one made by ``git worktree add /tmp/base <rev>``), and prints per model and verdict column the share of
heads whose verdicts agree, as min / mean / max over pairs of runs:

* ``old~old``: the baseline against itself at two different seeds (the envelope, ``S (S - 1) / 2`` pairs);
* ``new~old``: this checkout against the baseline, every pair of seeds (``S^2`` pairs; the same seed too);
* ``new~new``: this checkout against itself at two different seeds;

and the same for the Spearman correlation of ``selection_score`` over heads. A change of draws keeps the
statistic when ``new~old`` lies within ``old~old``. Per side it also prints the variance over seeds of
``selection_score = log(D / D_null)`` (mean over heads), the part of it that ``log D_null`` (the null head's
departure) carries, the mean width of the score's interval and the share of ``undetermined`` verdicts: equal
figures on both sides say that the new draws give the same statistic. MiniLM reads 64 built-in texts, causal models 16 packed
texts of 128 tokens (the texts of ``bench_scale.py --parts speed``). Each run's head table is kept in ``--out``
(``{side}_{model}_s{seed}.pkl``) and reused by a later call with the same ``--out`` (give a fresh one after
changing either checkout). Prints figures only; asserts nothing. Usage:
``python benchmarks/bench_seed_envelope.py --baseline-src /tmp/base/src [--models minilm,gemma3-270m,...]
[--seeds 4] [--threads 2] [--out out/bench_seed_envelope] [--reference]``.

Per side it also prints the share of heads whose interval in one run holds another run's point score (every
ordered pair of runs). Since the reference draws (equivalents' noise, null heads, free rotation) take
``reference_seed`` apart from ``seed``, ``new~new`` measures a rerun with another seed (the bootstrap's Monte-Carlo
draws only); ``--reference`` adds the side ``ref`` (reference_seed 0..N-1 at seed 0), whose spread is what one
reference draw adds to a score, and checks that the intervals hold the mean over those draws.
"""
from __future__ import annotations

import argparse
import itertools
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np

CHILD = r"""
import pickle, sys, warnings
warnings.filterwarnings("ignore")
import torch
torch.set_num_threads(int(sys.argv[3]))
from attnspec import diagnose
from attnspec.data import builtin_texts, packed_texts
from attnspec.models import adapt, load_model
name, seed, out, ref = sys.argv[1], int(sys.argv[2]), sys.argv[4], int(sys.argv[5])
model, tok = load_model(name)
ad = adapt(model)
causal = ad.kind == "causal-lm"
texts = packed_texts(tok, 16, 128) if causal else builtin_texts(64)
kw = {"reference_seed": ref} if ref else {}        # a baseline before the reference seed takes none
d = diagnose(ad, tok, texts, max_length=128, removal=False, gradient=False, seed=seed, **kw)
with open(out + ".part", "wb") as f:
    pickle.dump(d.heads, f)
"""

VERDICTS = ("selection", "query_selection", "dependence")


def heads_of(side: str, src: Path, model: str, seed: int, threads: int, out: Path, reference_seed: int = 0):
    """The head table of one run (kept in ``out``; computed in a subprocess on ``src``'s package)."""
    path = out / f"{side}_{model}_s{seed}_r{reference_seed}.pkl"
    if not path.exists():
        env = {**os.environ, "PYTHONPATH": str(src)}
        p = subprocess.run([sys.executable, "-c", CHILD, model, str(seed), str(threads), str(path),
                            str(reference_seed)], env=env,
                           capture_output=True, text=True)
        if p.returncode:
            raise RuntimeError(f"{side} {model} seed {seed}: {p.stderr.strip().splitlines()[-1]}")
        os.replace(str(path) + ".part", path)          # a run is kept whole or not at all
    with open(path, "rb") as f:
        return pickle.load(f)


def agreement(a, b, column: str) -> float:
    """Share of heads with the same verdict in ``column``."""
    return float(np.mean(a[column].astype(str).to_numpy() == b[column].astype(str).to_numpy()))


def spearman(a, b, column: str = "selection_score") -> float:
    from scipy.stats import spearmanr
    x, y = a[column].to_numpy(float), b[column].to_numpy(float)
    keep = np.isfinite(x) & np.isfinite(y)
    return float(spearmanr(x[keep], y[keep]).statistic)


def holds(a, b, column: str = "selection_score") -> float:
    """Share of heads whose interval in run ``a`` holds run ``b``'s point value of ``column``."""
    x = b[column].to_numpy(float)
    return float(np.mean((a[column + "_lo"].to_numpy(float) <= x) & (x <= a[column + "_hi"].to_numpy(float))))


def spread(runs: list) -> str:
    """Over the seeds of one side: the variance of ``selection_score`` and of ``log D_null`` per head (means over
    heads), the mean interval width of the score and the share of ``undetermined`` verdicts."""
    def var(column, f=lambda x: x):
        X = np.stack([f(r[column].to_numpy(float)) for r in runs])
        return np.nanmean(X.var(0, ddof=1))
    score, null = var("selection_score"), var("null_w1_rel", np.log)
    width = np.nanmedian([np.nanmedian(r["selection_score_hi"] - r["selection_score_lo"]) for r in runs])
    open_ = np.mean([np.mean(r["selection"].astype(str) == "undetermined") for r in runs])
    cross = np.mean([holds(a, b) for a, b in itertools.permutations(runs, 2)])
    share = f"{null / score:.0%}" if score > 1e-20 else "-"        # no spread left: no share to speak of
    return (f"var(selection_score) {score:.2e}, of which log D_null {share}; median interval "
            f"width {width:.3f}; undetermined {open_:.3f}; an interval holds another run's score {cross:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline-src", type=Path, required=True, help="the src folder of the baseline checkout")
    ap.add_argument("--models", default="minilm,gemma3-270m,qwen2.5-0.5b,smollm2-135m")
    ap.add_argument("--seeds", type=int, default=4, help="seeds 0..N-1 on each side (>= 2)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("out/bench_seed_envelope"))
    ap.add_argument("--reference", action="store_true",
                    help="also a side 'ref': this checkout at seed 0 with reference_seed 0..N-1 (the reference draws' "
                         "own spread), and the share of heads whose new seed-0 interval holds the mean of those scores")
    args = ap.parse_args()
    if args.seeds < 2:
        ap.error(f"--seeds must be >= 2, got {args.seeds}")
    if not (args.baseline_src / "attnspec").is_dir():
        ap.error(f"--baseline-src {args.baseline_src} holds no attnspec package")
    args.out.mkdir(parents=True, exist_ok=True)
    here = Path(__file__).resolve().parents[1] / "src"
    seeds = range(args.seeds)
    print(f"{len(seeds)} seeds a side; agreement of verdicts and Spearman of selection_score, min / mean / max over "
          "pairs of runs")
    for model in args.models.split(","):
        runs = {side: [heads_of(side, src, model, s, args.threads, args.out) for s in seeds]
                for side, src in (("old", args.baseline_src), ("new", here))}
        if args.reference:
            runs["ref"] = [heads_of("new", here, model, 0, args.threads, args.out, r) for r in seeds]
        pairs = {"old~old": [(runs["old"][i], runs["old"][j]) for i, j in itertools.combinations(seeds, 2)],
                 "new~old": [(runs["new"][i], runs["old"][j]) for i, j in itertools.product(seeds, seeds)],
                 "new~new": [(runs["new"][i], runs["new"][j]) for i, j in itertools.combinations(seeds, 2)]}
        if args.reference:
            pairs["ref~ref"] = [(runs["ref"][i], runs["ref"][j]) for i, j in itertools.combinations(seeds, 2)]
        print(f"{model} ({len(runs['old'][0])} heads):")
        for what in (*VERDICTS, "spearman selection_score"):
            if what in VERDICTS and what not in runs["old"][0]:
                continue
            f = spearman if what.startswith("spearman") else (lambda a, b, c=what: agreement(a, b, c))
            cells = []
            for name, ps in pairs.items():
                v = np.array([f(a, b) for a, b in ps])
                cells.append(f"{name} {v.min():.3f} / {v.mean():.3f} / {v.max():.3f}")
            print(f"  {what:26s} " + "   ".join(cells), flush=True)
        for side, rs in runs.items():
            print(f"  {side}: " + spread(rs), flush=True)
        if args.reference:
            mean = runs["ref"][0].copy()
            mean["selection_score"] = np.mean([r["selection_score"].to_numpy(float) for r in runs["ref"]], 0)
            print(f"  new seed-0 intervals holding the mean score over {len(seeds)} reference draws: "
                  f"{holds(runs['new'][0], mean):.3f}", flush=True)


if __name__ == "__main__":
    main()
