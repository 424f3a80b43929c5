"""``attnspec law``: the limiting spectral law of a configuration (operator-valued free probability)."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ._checks import LAW_BETA_MAX, check_output_file, int_range
from ._cost import fmt_number
from ._options import HelpFormatter, add_config_arguments, config_from_args, write_json

ORDER = 20


def register(sub) -> None:
    p = sub.add_parser(
        "law", help="limiting spectral law (density, edges, moments, atom) by free probability",
        description="Compute the limiting law of the eigenvalues of Y Y^T (docs/theory.md, sections 'Model and "
                    "normalization' to 'Computing the law: the linear pencil'): a Hermitian linear pencil of the "
                    "Gaussian-equivalent model, its operator-valued Dyson equation solved by Newton with "
                    "continuation, density on an adaptive grid, edges, contour moments m1..m4 and the "
                    "atom at zero. Only the ratios l/d, d_qk/d, d_v/d, d_out/d, beta, sharing/tying and the input "
                    "convention matter, so sizes cost nothing. beta is limited to "
                    f"[0, {LAW_BETA_MAX:g}]: the solver converged on every configuration tried up to 4.5 and fails "
                    "on some from 4.75. Numbers that overflow are printed as 'overflow'.",
        formatter_class=HelpFormatter)
    add_config_arguments(p, beta_max=LAW_BETA_MAX)
    r = p.add_argument_group("output")
    r.add_argument("--json", type=Path, metavar="PATH", help="write moments, edges, atom, grid and density as JSON")
    r.add_argument("--plot", type=Path, metavar="PATH", help="write a PNG of the density")
    r.add_argument("--grid", type=int_range(20, 20000), default=200, metavar="N",
                   help="base number of density grid points, 20..20000 (refined adaptively)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    check_output_file("--json", args.json)
    check_output_file("--plot", args.plot)

    from ..theory import solve_law

    t0 = time.perf_counter()
    law = solve_law(config, n_grid=args.grid)  # LawSolverError: one line, exit 2 (cli.main)
    seconds = time.perf_counter() - t0
    m = law.moments
    print(f"{config.describe()} (law depends on gamma={config.gamma:.4g}, omega={config.omega:.4g}, "
          f"psi={[round(x, 4) for x in config.psi]}, phi={[round(x, 4) for x in config.phi]})")
    f = fmt_number
    print("  m1..m4 = " + ", ".join(f(x, ".10g") for x in m[:4])
          + f"  (closed-form m1 {f(law.checks['m1_closed_form'], '.10g')})")
    left = "" if law.left_edge is None else f", left edge {f(law.left_edge, '.8g')}"
    print(f"  right edge {f(law.right_edge, '.8g')}{left}, atom at zero {f(law.atom_at_zero, '.6g')}, "
          f"mass {f(law.mass, '.6f')}, {law.grid.size} grid points, {seconds:.2f} s")
    if args.json:
        data = law.to_dict()
        data["seconds"] = seconds
        print(f"  wrote {write_json(args.json, data)}", file=sys.stderr)
    if args.plot:
        from ..figures import plot_law, save_figure

        ax = plot_law(law)
        print(f"  wrote {save_figure(ax.figure, args.plot)}", file=sys.stderr)
    return 0
