"""``attnspec sweep``: evaluate a grid of configurations on Dask into a resumable SQLite store."""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import tomllib
from pathlib import Path

import numpy as np

from ._options import add_config_arguments, config_from_args

ORDER = 60


def _value(text: str):
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def _axis(text: str) -> tuple[str, list]:
    """``name=v1,v2,...`` or ``name=start:stop:num`` (inclusive linspace)."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected AXIS=V1,V2,... or AXIS=START:STOP:NUM, got {text!r}")
    name, vals = text.split("=", 1)
    name = name.strip().replace("-", "_")
    if vals.count(":") == 2:
        a, b, n = vals.split(":")
        return name, [float(x) for x in np.round(np.linspace(float(a), float(b), int(n)), 12)]
    return name, [_value(v.strip()) for v in vals.split(",") if v.strip()]


def _evaluator(text: str | None):
    if not text:
        return None
    mod, _, fn = text.partition(":")
    if not fn:
        raise SystemExit(f"--evaluator must be MODULE:FUNCTION, got {text!r}")
    return getattr(importlib.import_module(mod), fn)


def register(sub) -> None:
    p = sub.add_parser(
        "sweep", help="run a parameter sweep (law and Monte-Carlo per point) on Dask into a resumable SQLite store",
        description="Evaluate a grid of MHSA configurations - each by the limiting law and/or Monte-Carlo (softmax and "
                    "surrogate), with moments, edges and distances per point - on a Dask LocalCluster (default) or an "
                    "existing scheduler. Each finished point is committed at once to an SQLite database (one row per "
                    "point, keyed by the hash of its configuration, seed, draws and evaluations), so re-running the "
                    "same sweep skips finished points and a killed sweep loses no finished point.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("spec", nargs="?", type=Path, help="sweep specification (TOML/JSON with [sweep], [base], [grid], "
                                                       "[[points]]); otherwise the base comes from the flags below")
    p.add_argument("--db", type=Path, required=True, help="SQLite results store (created if missing)")
    p.add_argument("--name", help="sweep name recorded with the rows (default: from the spec, else 'sweep')")
    p.add_argument("--grid", type=_axis, action="append", default=[], metavar="AXIS=V1,V2|START:STOP:NUM",
                   help="a grid axis (repeatable; Cartesian product). Axes: any MHSAConfig field, heads (fixed total "
                        "width), d_qk_per_head, d_v_per_head, kv_groups, seed, draws")
    p.add_argument("--seeds", default="0", help="comma-separated seeds (each grid point once per seed)")
    p.add_argument("--draws", type=int, default=1, help="Monte-Carlo draws pooled per point")
    p.add_argument("--evaluations", default="law,softmax,surrogate", help="subset of law,softmax,surrogate")
    d = p.add_argument_group("execution")
    d.add_argument("--scheduler", metavar="ADDRESS", help="use a running Dask scheduler (tcp://host:port) instead of a "
                                                          "LocalCluster")
    d.add_argument("--workers", type=int, default=2, help="LocalCluster worker processes (1 thread each); 0 = run in "
                                                          "this process without Dask")
    d.add_argument("--evaluator", metavar="MODULE:FUNCTION", help="custom evaluation (SweepPoint -> dict) importable "
                                                                  "by the workers")
    d.add_argument("--dry-run", action="store_true", help="list the points and how many are already stored; compute "
                                                          "nothing")
    d.add_argument("--no-progress", action="store_true")
    e = p.add_argument_group("export")
    e.add_argument("--parquet", type=Path, metavar="PATH", help="write the store (all rows) as Parquet")
    e.add_argument("--csv", type=Path, metavar="PATH", help="write the store (all rows) as CSV")
    e.add_argument("--plot", type=Path, metavar="PNG", help="plot --y columns against --x for this sweep's points")
    e.add_argument("--x", default=None, help="x column for --plot (default: the first grid axis, as tag.<axis>)")
    e.add_argument("--y", default="law.m2,surrogate.m2,softmax.m2", help="comma-separated y columns for --plot")
    add_config_arguments(p, seq_len=128, d_model=128)
    p.set_defaults(func=run)


def build_points(args: argparse.Namespace):
    from ..sweeps import expand_grid, points_from_spec

    seeds = [int(s) for s in str(args.seeds).split(",") if s.strip()]
    evaluations = tuple(e.strip() for e in args.evaluations.split(",") if e.strip())
    if args.spec is not None:
        text = args.spec.read_text()
        spec = tomllib.loads(text) if args.spec.suffix == ".toml" else json.loads(text)
        name, points = points_from_spec(spec)
        if args.grid:
            raise SystemExit("give the grid either in the specification file or with --grid, not both")
        axes = list(spec.get("grid", {}))
    else:
        name = "sweep"
        points = expand_grid(config_from_args(args), dict(args.grid), seeds=seeds, draws=args.draws,
                             evaluations=evaluations)
        axes = [a for a, _ in args.grid]
    return args.name or name, points, axes


def run(args: argparse.Namespace) -> int:
    from ..sweeps import pending_points, points_frame, run_sweep, to_frame, to_parquet

    name, points, axes = build_points(args)
    if args.dry_run:
        todo = pending_points(points, args.db)
        print(f"sweep {name!r}: {len(points)} points, {len(points) - len(todo)} stored, {len(todo)} to compute")
        for p in todo:
            print(f"  {p.key[:12]}  seed={p.seed} draws={p.draws} {p.config.describe()}")
        return 0
    report = run_sweep(points, args.db, name=name, scheduler=args.scheduler, n_workers=args.workers,
                       evaluator=_evaluator(args.evaluator), progress=not args.no_progress)
    print(report)
    for key, err in report.failed[:5]:
        print(f"  failed {key[:12]}: {err.strip().splitlines()[-1] if err.strip() else err}", file=sys.stderr)
    if args.parquet:
        print(f"  wrote {to_parquet(args.db, args.parquet)}", file=sys.stderr)
    if args.csv:
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        to_frame(args.db).to_csv(args.csv, index=False)
        print(f"  wrote {args.csv}", file=sys.stderr)
    if args.plot:
        import matplotlib.pyplot as plt

        from ..plots import save_figure

        df = points_frame(points, args.db)
        x = args.x or (f"tag.{axes[0]}" if axes else "cfg.beta")
        fig, ax = plt.subplots(figsize=(6, 4))
        for y in (c.strip() for c in args.y.split(",")):
            if y in df and x in df:
                g = df.groupby(x)[y].mean()
                ax.plot(g.index, g.values, "o-" if not y.startswith("law") else "-", label=y)
        ax.set_xlabel(x)
        ax.legend()
        ax.set_title(f"sweep {name}")
        print(f"  wrote {save_figure(fig, args.plot)}", file=sys.stderr)
    return 1 if report.failed else 0
