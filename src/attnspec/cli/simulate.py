"""``attnspec simulate``: Monte-Carlo spectra of softmax MHSA and its Gaussian-equivalent surrogate."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ._checks import (DEFAULT_TIME_LIMIT, LAW_BETA_MAX, SIMULATE_BETA_MAX, CLIError, check_output_file, float_range,
                      nonneg_int, positive_int)
from ._cost import check_simulation_cost, fmt_number
from ._options import HelpFormatter, add_config_arguments, config_from_args, write_json

ORDER = 10


def register(sub) -> None:
    p = sub.add_parser(
        "simulate", help="simulate softmax MHSA and its Gaussian-equivalent surrogate; spectra and distances",
        description="Draw inputs and weights, compute softmax MHSA and its Gaussian-equivalent surrogate "
                    "(each A_h replaced by (1 1^T + beta S_h + alpha Z_h)/l on the same inputs and weights), and "
                    "report the eigenvalues of Y Y^T with Y = sqrt(l/d_out) P O (docs/theory.md, 'Model and normalization'), pooled over "
                    "draws, their moments and the W1/KS distances between the two spectra. "
                    f"beta is limited to [0, {SIMULATE_BETA_MAX:g}] (beyond it the surrogate's moments overflow "
                    f"float64) and to [0, {LAW_BETA_MAX:g}] with --with-law (the law solver's range). Runs whose "
                    "estimated memory exceeds the available memory, or whose rough time estimate exceeds "
                    "--time-limit, are refused before anything is allocated. Numbers that overflow are printed "
                    "as 'overflow'.",
        formatter_class=HelpFormatter)
    add_config_arguments(p, beta_max=SIMULATE_BETA_MAX, beta_note=f"; [0, {LAW_BETA_MAX:g}] with --with-law")
    r = p.add_argument_group("run")
    r.add_argument("--draws", type=positive_int, default=1, help="independent draws (pooled), >= 1")
    r.add_argument("--seed", type=nonneg_int, default=0, help="random seed >= 0 (same seed, same output bit for bit)")
    r.add_argument("--json", type=Path, metavar="PATH", help="write eigenvalues, moments and distances as JSON")
    r.add_argument("--plot", type=Path, metavar="PATH", help="write a PNG of both histograms overlaid")
    r.add_argument("--with-law", action="store_true", help="also compute the limiting law and overlay it")
    r.add_argument("--time-limit", type=float_range(0.0, lo_open=True), default=DEFAULT_TIME_LIMIT, metavar="SECONDS",
                   help="refuse runs whose rough time estimate (a fast machine's) exceeds this")
    r.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    if args.with_law and config.beta > LAW_BETA_MAX:
        raise CLIError("--beta", f"{config.beta:g}", f"must be in [0, {LAW_BETA_MAX:g}] with --with-law (the law "
                                                     f"solver's range; [0, {SIMULATE_BETA_MAX:g}] without it)")
    check_output_file("--json", args.json)
    check_output_file("--plot", args.plot)
    check_simulation_cost(config, args.draws, args.time_limit)

    from ..simulation import simulate

    result = simulate(config, seed=args.seed, draws=args.draws, progress=args.draws > 1 and not args.no_progress)
    summary = result.summary()
    law = None
    if args.with_law:
        from ..theory import law_distances, solve_law

        law = solve_law(config)
        summary["law"] = {k: v for k, v in law.to_dict().items() if k not in ("grid", "density")}
        summary["law_distances"] = {m: law_distances(law, getattr(result, m)) for m in ("softmax", "surrogate")}
    d = summary["distances"]
    f = fmt_number
    print(f"{config.describe()} | draws={result.draws} seed={args.seed}")
    for m in ("softmax", "surrogate"):
        mom = summary[m]["moments"]
        print(f"  {m:9s} m1..m4 = " + ", ".join(f(x) for x in mom) + f" | atom {f(summary[m]['atom_at_zero'], '.4f')}")
    print(f"  W1 = {f(d['w1'], '.4g')} (bulk {f(d['w1_bulk'], '.4g')}), KS = {f(d['ks'], '.4g')} "
          f"(bulk {f(d['ks_bulk'], '.4g')}), softmax outliers above the surrogate edge {f(d['bulk_edge'], '.4g')}: "
          f"{d['n_outliers']}")
    if law is not None:
        for m, ld in summary["law_distances"].items():
            print(f"  W1(law, {m}) = {f(ld['w1'], '.4g')}, KS = {f(ld['ks'], '.4g')}")
    if args.json:
        payload = dict(summary, softmax_eigenvalues=result.softmax.ravel(), surrogate_eigenvalues=result.surrogate.ravel(),
                       moments={m: summary[m]["moments"] for m in ("softmax", "surrogate")})
        print(f"  wrote {write_json(args.json, payload)}", file=sys.stderr)
    if args.plot:
        from ..figures import plot_law, plot_spectra, save_figure

        samples = {"softmax": result.softmax, "surrogate": result.surrogate}
        title = f"{config.describe()}\n{result.draws} draw(s), seed {args.seed}; W1 bulk {f(d['w1_bulk'], '.3g')}"
        ax = plot_law(law, None, samples, title=title) if law is not None else plot_spectra(None, samples, title=title)
        print(f"  wrote {save_figure(ax.figure, args.plot)}", file=sys.stderr)
    return 0
