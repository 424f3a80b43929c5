"""``attnspec reproduce STUDY``: recompute a published figure from scratch and print the numbers it shows.

Studies: ``hayase2025`` (Hayase, Collins and Karakida 2025, arXiv 2510.06685): the bulk of the squared singular
values of ``sqrt(d) A`` for one softmax head (d = d_qk = 1000, beta = 1, 10 draws, top three removed) against the
Gaussian-equivalent law and against Marchenko-Pastur."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ._checks import check_output_dir, float_range, int_range, nonneg_int, output_dir
from ._options import HelpFormatter

ORDER = 45
STUDY_NAMES = ("hayase2025",)
QUICK = dict(d=200, draws=2)


def register(sub) -> None:
    p = sub.add_parser(
        "reproduce", help="recompute a published figure (hayase2025: attention-matrix bulk vs the law and MP)",
        description="Recompute a published figure from scratch with the simulator and the limiting law, write it "
                    "(PNG) with its numbers (JSON, CSV histogram) into --out, and print the numbers. hayase2025: "
                    "Hayase, Collins and Karakida (2025, arXiv 2510.06685), one softmax head with d = d_qk = l = "
                    "1000, beta = 1, 10 draws; the squared singular values of sqrt(d) A with the top three removed "
                    "(the rank-one mean and normalization outliers) against the Gaussian-equivalent law and the "
                    "Marchenko-Pastur law of the same variance (docs/theory.md, 'The Gaussian equivalent').",
        formatter_class=HelpFormatter)
    p.add_argument("study", choices=STUDY_NAMES, help="the figure to reproduce")
    p.add_argument("--out", type=output_dir, default=Path("out/reproduce"), help="output directory (created if missing)")
    p.add_argument("--draws", type=int_range(1, 1000), default=10, help="independent draws, pooled")
    p.add_argument("--beta", type=float_range(0.05, 4.0), default=1.0, help="inverse temperature, in [0.05, 4]")
    p.add_argument("--inputs", choices=("orthonormal", "gaussian"), default="orthonormal",
                   help="input convention: orthonormal rows (A) or iid Gaussian entries (B, a different law)")
    p.add_argument("--seed", type=nonneg_int, default=0, help="Monte-Carlo seed, >= 0")
    p.add_argument("--quick", action="store_true", help=f"d = {QUICK['d']}, {QUICK['draws']} draws: a fast smoke run")
    p.add_argument("--d", type=int_range(16, 4000), default=1000, help=argparse.SUPPRESS)   # reduced sizes (tests)
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    p.set_defaults(func=run)


def _table(s: dict) -> list[str]:
    law, mp = s["law"], s["marchenko_pastur"]
    lines = [f"Hayase, Collins & Karakida (2025): d = d_qk = l = {s['d']}, beta = {s['beta']:g}, {s['draws']} draws, "
             f"top {s['n_remove']} squared singular values removed, {s['inputs']} inputs",
             f"  Gaussian-equivalent law: right edge {law['right_edge']:.5g}, m1 {law['m1']:.5g}, m2 {law['m2']:.5g}",
             f"  Marchenko-Pastur (variance e^(beta^2)-1): right edge {mp['right_edge']:.5g}, m1 {mp['m1']:.5g}, "
             f"m2 {mp['m2']:.5g}",
             f"  {'bulk of':14s} {'W1 law':>8s} {'KS law':>8s} {'W1 MP':>8s} {'KS MP':>8s} {'max':>8s} {'m1':>8s} "
             f"{'m2':>8s} {'>MP edge':>8s}  removed (mean)"]
    for name, label in (("softmax", "sqrt(d) A"), ("linear", "linear model")):
        r = s[name]
        removed = ", ".join(f"{v:.4g}" for v in r["removed_mean"])
        lines.append(f"  {label:14s} {r['w1_to_law']:8.4f} {r['ks_to_law']:8.4f} {r['w1_to_mp']:8.4f} {r['ks_to_mp']:8.4f} "
                     f"{r['bulk_max_mean']:8.4f} {r['bulk_m1']:8.4f} {r['bulk_m2']:8.4f} {r['beyond_mp_edge']:8d}  {removed}")
    lines.append("  (W1, KS: pooled bulk against each law; max: mean over draws of the largest bulk value; "
                 ">MP edge: bulk values above 1.02 x the MP edge)")
    return lines


def run(args: argparse.Namespace) -> int:
    check_output_dir("--out", args.out)
    from ..reproduce import STUDIES

    d, draws = (QUICK["d"], QUICK["draws"]) if args.quick else (args.d, args.draws)
    t0 = time.perf_counter()
    result = STUDIES[args.study](d=d, beta=args.beta, draws=draws, seed=args.seed, inputs=args.inputs,
                                 progress=not args.no_progress)
    result.summary["seconds"] = time.perf_counter() - t0
    paths = result.write(args.out)
    print("\n".join(_table(result.summary)))
    print(f"wrote {', '.join(str(p) for p in paths)} ({result.summary['seconds']:.1f} s)", file=sys.stderr)
    return 0
