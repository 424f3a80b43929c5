"""``attnspec figures``: regenerate the figures behind the seed's claims (law vs Monte-Carlo, edge vs beta,
K/V sharing, V = K tying) from scratch."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ._checks import check_output_dir, nonneg_int, output_dir
from ._options import HelpFormatter, write_json

ORDER = 40


def register(sub) -> None:
    p = sub.add_parser(
        "figures", help="regenerate the theory figures (law vs Monte-Carlo, edge vs beta, sharing, tying)",
        description="Recompute, from scratch, the figures that show the seed's claims (docs/theory.md, 'Checked figures'): the H = 4 "
                    "law against softmax and surrogate Monte-Carlo for d = 250..2000 (W1 shrinking with d), the "
                    "attention-matrix edge vs beta against the Marchenko-Pastur edge, K/V sharing (GQA, MQA, K only, "
                    "V only) vs independent heads, and V = K tying vs independent values. Writes PNGs and "
                    "figures.json into --out.",
        formatter_class=HelpFormatter)
    p.add_argument("--set", dest="figure_set", choices=("theory", "structure"), default="theory",
                   help="theory: the figures above; structure: head allocation vs widths and across-head sharing vs "
                        "within-head dependence, from sweeps stored in OUT/structure.sqlite (re-runs recompute nothing)")
    p.add_argument("--out", type=output_dir, default=Path("out/figures"), help="output directory (created if missing)")
    p.add_argument("--quick", action="store_true", help="small d (250, 500) and few betas: a fast smoke run")
    p.add_argument("--seed", type=nonneg_int, default=0, help="Monte-Carlo seed, >= 0")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    check_output_dir("--out", args.out)
    if args.figure_set == "structure":
        from ..figures.structure import structure_figures

        for path in structure_figures(args.out, quick=args.quick, progress=not args.no_progress):
            print(f"wrote {path}", file=sys.stderr)
        return 0
    from ..figures.claims import all_figures

    t0 = time.perf_counter()
    res = all_figures(args.out, quick=args.quick, seed=args.seed, progress=not args.no_progress)
    res["seconds"] = time.perf_counter() - t0
    lv = res["law_vs_montecarlo"]
    print("law vs Monte-Carlo (H = 4, beta = 1): d, draws, mean W1(law, softmax), mean W1(law, surrogate) [first draw]")
    for r in lv["rows"]:
        print(f"  {r['d']:5d} {r['draws']:3d}  {r['w1_softmax']:.4g} [{r['w1_softmax_first_draw']:.4g}]  "
              f"{r['w1_surrogate']:.4g} [{r['w1_surrogate_first_draw']:.4g}]")
    for key, r in res["edge_vs_beta"].items():
        if key.startswith("gamma"):
            print(f"edge/MP at {key}: " + ", ".join(f"beta {b:g}: {q:.4f}" for b, q in zip(r["beta"], r["ratio"])))
    sh = res["sharing"]
    print(f"sharing at d = {sh['d']} (seed noise KS {sh['seed_noise']['ks']:.4f}, W1 {sh['seed_noise']['w1']:.4f}):")
    for name, r in sh.items():
        if isinstance(r, dict) and "ks_to_independent" in r:
            print(f"  {name:16s} KS {r['ks_to_independent']:.4f}  W1 {r['w1_to_independent']:.4f}  "
                  f"law moments change {r['law_max_rel_moment_change']:.1e}")
    ty = res["tying"]
    for name in ("independent", "tied W_V = W_K"):
        print(f"tying: {name:16s} law m1 {ty[name]['law_moments'][0]:.5f} (softmax {ty[name]['softmax_m1']:.4f}, "
              f"surrogate {ty[name]['surrogate_m1']:.4f}), edge {ty[name]['law_right_edge']:.4f}")
    path = write_json(Path(args.out) / "figures.json", res)
    print(f"wrote {path} and PNGs in {args.out} ({res['seconds']:.1f} s)", file=sys.stderr)
    return 0
