"""``attnspec simulate``: Monte-Carlo spectra of softmax MHSA and its Gaussian-equivalent surrogate."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ._options import add_config_arguments, config_from_args, write_json

ORDER = 10


def register(sub) -> None:
    p = sub.add_parser(
        "simulate", help="simulate softmax MHSA and its Gaussian-equivalent surrogate; spectra and distances",
        description="Draw inputs and weights, compute softmax MHSA and its Gaussian-equivalent surrogate "
                    "(each A_h replaced by (1 1^T + beta S_h + alpha Z_h)/l on the same inputs and weights), and "
                    "report the eigenvalues of Y Y^T with Y = sqrt(l/d_out) P O (THEORY.md section 1), pooled over "
                    "draws, their moments and the W1/KS distances between the two spectra.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_config_arguments(p)
    r = p.add_argument_group("run")
    r.add_argument("--draws", type=int, default=1, help="independent draws (pooled)")
    r.add_argument("--seed", type=int, default=0, help="random seed (same seed, same output bit for bit)")
    r.add_argument("--json", type=Path, metavar="PATH", help="write eigenvalues, moments and distances as JSON")
    r.add_argument("--plot", type=Path, metavar="PATH", help="write a PNG of both histograms overlaid")
    r.add_argument("--with-law", action="store_true", help="also compute the limiting law and overlay it (needs attnspec.theory)")
    r.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..simulation import simulate

    config = config_from_args(args)
    result = simulate(config, seed=args.seed, draws=args.draws, progress=args.draws > 1 and not args.no_progress)
    summary = result.summary()
    law = None
    if args.with_law:
        from ..theory import law_distances, solve_law

        law = solve_law(config)
        summary["law"] = {k: v for k, v in law.to_dict().items() if k not in ("grid", "density")}
        summary["law_distances"] = {m: law_distances(law, getattr(result, m)) for m in ("softmax", "surrogate")}
    d = summary["distances"]
    print(f"{config.describe()} | draws={result.draws} seed={args.seed}")
    for m in ("softmax", "surrogate"):
        mom = summary[m]["moments"]
        print(f"  {m:9s} m1..m4 = " + ", ".join(f"{x:.6g}" for x in mom) + f" | atom {summary[m]['atom_at_zero']:.4f}")
    print(f"  W1 = {d['w1']:.4g} (bulk {d['w1_bulk']:.4g}), KS = {d['ks']:.4g} (bulk {d['ks_bulk']:.4g}), "
          f"softmax outliers above the surrogate edge {d['bulk_edge']:.4g}: {d['n_outliers']}")
    if law is not None:
        for m, ld in summary["law_distances"].items():
            print(f"  W1(law, {m}) = {ld['w1']:.4g}, KS = {ld['ks']:.4g}")
    if args.json:
        payload = dict(summary, softmax_eigenvalues=result.softmax.ravel(), surrogate_eigenvalues=result.surrogate.ravel(),
                       moments={m: summary[m]["moments"] for m in ("softmax", "surrogate")})
        print(f"  wrote {write_json(args.json, payload)}", file=sys.stderr)
    if args.plot:
        import matplotlib.pyplot as plt

        from ..plots import plot_spectra, save_figure

        fig, ax = plt.subplots(figsize=(7, 4.2))
        plot_spectra(ax, {"softmax": result.softmax, "surrogate": result.surrogate}, law=law,
                     title=f"{config.describe()}\n{result.draws} draw(s), seed {args.seed}; W1 bulk {d['w1_bulk']:.3g}")
        print(f"  wrote {save_figure(fig, args.plot)}", file=sys.stderr)
    return 0
