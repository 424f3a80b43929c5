"""``attnspec sweep``: evaluate a grid of configurations on Dask into a resumable SQLite store."""
from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
import tomllib
from dataclasses import fields
from pathlib import Path

import numpy as np

from ..config import CENTERINGS, INPUTS, TARGETS, VALUES, ConfigError, MHSAConfig
from ._checks import (DEFAULT_TIME_LIMIT, LAW_BETA_MAX, SIMULATE_BETA_MAX, CLIError, check_input_file,
                      check_output_file, check_sqlite_file, float_range, int_list, n_cores, nonneg_int, positive_int)
from ._cost import check_simulation_cost
from ._options import HelpFormatter, add_config_arguments, config_from_args

ORDER = 60

EVALUATIONS = ("law", "softmax", "surrogate")
_INT_AXES = {"seq_len": 2, "d_model": 1, "d_out": 1, "heads": 1, "d_qk_per_head": 1, "d_v_per_head": 1, "kv_groups": 1,
             "key_groups": 1, "value_groups": 1, "d_qk": 1, "d_v": 1, "draws": 1, "seed": 0}
_CHOICE_AXES = {"inputs": INPUTS, "values": VALUES, "target": TARGETS, "centering": CENTERINGS}
_FLOAT_AXES = {"beta": (0.0, SIMULATE_BETA_MAX, False), "value_key_scale": (0.0, math.inf, True)}
AXES = tuple(sorted({f.name for f in fields(MHSAConfig)} | set(_INT_AXES) | set(_CHOICE_AXES) | set(_FLOAT_AXES)))


def _value(text: str):
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def check_axis(name: str, values: list) -> list:
    """Validated values of grid axis ``name`` (``ValueError`` with the allowed range otherwise)."""
    if name not in AXES:
        raise ValueError(f"unknown axis {name!r}; axes: {', '.join(AXES)}")
    if not values:
        raise ValueError(f"axis {name!r} has no values")
    out = []
    for v in values:
        if name in _INT_AXES:
            lo = _INT_AXES[name]
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v == int(v) and v >= lo
            if not ok:
                raise ValueError(f"{name}={v!r}: {name} values must be integers >= {lo}")
            out.append(int(v))
        elif name in _FLOAT_AXES:
            lo, hi, lo_open = _FLOAT_AXES[name]
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and (
                v > lo if lo_open else v >= lo) and v <= hi
            if not ok:
                rng = f"> {lo:g}" if hi == math.inf else f"in [{lo:g}, {hi:g}]"
                raise ValueError(f"{name}={v!r}: {name} values must be finite numbers {rng}")
            out.append(float(v))
        elif name in _CHOICE_AXES:
            if v not in _CHOICE_AXES[name]:
                raise ValueError(f"{name}={v!r}: {name} values must be one of {', '.join(_CHOICE_AXES[name])}")
            out.append(v)
        else:  # pragma: no cover - every MHSAConfig field is listed above
            out.append(v)
    return out


def _axis(text: str) -> tuple[str, list]:
    """``name=v1,v2,...`` or ``name=start:stop:num`` (inclusive linspace)."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"{text}: expected AXIS=V1,V2,... or AXIS=START:STOP:NUM")
    name, vals = text.split("=", 1)
    name = name.strip().replace("-", "_")
    try:
        if vals.count(":") == 2:
            a, b, n = vals.split(":")
            try:
                start, stop, num = float(a), float(b), int(n)
            except ValueError:
                raise ValueError(f"{vals!r}: START:STOP:NUM needs two numbers and an integer NUM >= 1") from None
            if num < 1 or not (math.isfinite(start) and math.isfinite(stop)):
                raise ValueError(f"{vals!r}: START:STOP:NUM needs finite START, STOP and NUM >= 1")
            from ..sweeps.spec import MAX_POINTS
            if num > MAX_POINTS:
                raise ValueError(f"{vals!r}: NUM {num:,} exceeds the {MAX_POINTS:,} points one sweep may hold")
            values = [float(x) for x in np.round(np.linspace(start, stop, num), 12)]
        else:
            values = [_value(v.strip()) for v in vals.split(",") if v.strip()]
        return name, check_axis(name, values)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text}: {e}") from None


def _evaluations(text: str) -> tuple[str, ...]:
    names = tuple(e.strip() for e in str(text).split(",") if e.strip())
    if not names or any(n not in EVALUATIONS for n in names):
        raise argparse.ArgumentTypeError(f"{text}: must be a comma-separated, non-empty subset of {','.join(EVALUATIONS)}")
    return names


def _evaluator(text: str | None):
    if not text:
        return None
    mod, _, fn = text.partition(":")
    if not mod or not fn:
        raise CLIError("--evaluator", text, "must be MODULE:FUNCTION")
    try:
        func = getattr(importlib.import_module(mod), fn)
    except ImportError as e:
        raise CLIError("--evaluator", text, f"cannot import module {mod!r} ({e})") from None
    except AttributeError:
        raise CLIError("--evaluator", text, f"module {mod!r} has no attribute {fn!r}") from None
    if not callable(func):
        raise CLIError("--evaluator", text, "is not callable")
    return func


def register(sub) -> None:
    p = sub.add_parser(
        "sweep", help="run a parameter sweep (law and Monte-Carlo per point) on Dask into a resumable SQLite store",
        description="Evaluate a grid of MHSA configurations - each by the limiting law and/or Monte-Carlo (softmax and "
                    "surrogate), with moments, edges and distances per point - on a Dask LocalCluster (default) or an "
                    "existing scheduler. Each finished point is committed at once to an SQLite database (one row per "
                    "point, keyed by the hash of its configuration, seed, draws and evaluations), so re-running the "
                    "same sweep skips finished points and a killed sweep loses no finished point. Before anything starts, "
                    f"every point is checked: beta in [0, {LAW_BETA_MAX:g}] when the law is evaluated, [0, {SIMULATE_BETA_MAX:g}] "
                    "for Monte-Carlo only; "
                    "memory (available memory shared among the workers) and a rough time per point under "
                    "--time-limit; --db must be an SQLite file or a new path.",
        formatter_class=HelpFormatter)
    p.add_argument("spec", nargs="?", type=Path, help="sweep specification (TOML/JSON with [sweep], [base], [grid], "
                                                       "[[points]]); otherwise the base comes from the flags below")
    p.add_argument("--db", type=Path, required=True, help="SQLite results store (created if missing)")
    p.add_argument("--name", help="sweep name recorded with the rows (default: from the spec, else 'sweep')")
    p.add_argument("--grid", type=_axis, action="append", default=[], metavar="AXIS=V1,V2|START:STOP:NUM",
                   help="a grid axis (repeatable; Cartesian product). Axes: any MHSAConfig field, heads (fixed total "
                        "width), d_qk_per_head, d_v_per_head, kv_groups, seed, draws")
    p.add_argument("--seeds", type=int_list(0, what="seeds"), default=(0,), metavar="S[,S...]",
                   help="comma-separated seeds >= 0, each grid point once per seed (default 0)")
    p.add_argument("--draws", type=positive_int, default=1, help="Monte-Carlo draws pooled per point, >= 1")
    p.add_argument("--evaluations", type=_evaluations, default=EVALUATIONS, metavar="E[,E...]",
                   help="subset of law,softmax,surrogate (default all three)")
    p.add_argument("--time-limit", type=float_range(0.0, lo_open=True), default=DEFAULT_TIME_LIMIT, metavar="SECONDS",
                   help="refuse points whose rough Monte-Carlo time estimate (a fast machine's) exceeds this")
    d = p.add_argument_group("execution")
    d.add_argument("--scheduler", metavar="ADDRESS", help="use a running Dask scheduler (tcp://host:port) instead of a "
                                                          "LocalCluster")
    d.add_argument("--workers", type=nonneg_int, default=2, help="LocalCluster worker processes (1 thread each), >= 0; "
                                                                 "0 = run in this process without Dask")
    d.add_argument("--evaluator", metavar="MODULE:FUNCTION", help="custom evaluation (SweepPoint -> dict) importable "
                                                                  "by the workers")
    d.add_argument("--dry-run", action="store_true", help="list the points and how many are already stored; compute "
                                                          "nothing")
    d.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    e = p.add_argument_group("export")
    e.add_argument("--parquet", type=Path, metavar="PATH", help="write the store (all rows) as Parquet")
    e.add_argument("--csv", type=Path, metavar="PATH", help="write the store (all rows) as CSV")
    e.add_argument("--plot", type=Path, metavar="PNG", help="plot --y columns against --x for this sweep's points")
    e.add_argument("--x", default=None, help="x column for --plot (default: the first grid axis, as tag.<axis>)")
    e.add_argument("--y", default="law.m2,surrogate.m2,softmax.m2", help="comma-separated y columns for --plot")
    add_config_arguments(p, seq_len=128, d_model=128, beta_max=SIMULATE_BETA_MAX,
                         beta_note=f"; [0, {LAW_BETA_MAX:g}] when the law is evaluated")
    p.set_defaults(func=run)


def _read_spec(path: Path) -> dict:
    check_input_file("SPEC", path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise CLIError("SPEC", path, f"is not UTF-8 text ({e.reason} at byte {e.start})") from None
    kind = "TOML" if path.suffix == ".toml" else "JSON"
    try:
        spec = tomllib.loads(text) if kind == "TOML" else json.loads(text)
    except ValueError as e:
        raise CLIError("SPEC", path, f"is not valid {kind} ({e})") from None
    if not isinstance(spec, dict):
        raise CLIError("SPEC", path, "must be a table/object with [sweep], [base], [grid] and/or [[points]]")
    grid = spec.get("grid", {})
    if not isinstance(grid, dict):
        raise CLIError("SPEC", path, "[grid] must be a table of AXIS = [values]")
    for name, vals in grid.items():
        try:
            check_axis(name, list(vals) if isinstance(vals, list) else [vals])
        except ValueError as e:
            raise CLIError("SPEC", path, f"[grid] {e}") from None
    return spec


def build_points(args: argparse.Namespace):
    from ..sweeps.spec import MAX_POINTS, expand_grid, grid_size, points_from_spec, spec_size

    if args.spec is not None:
        if args.grid:
            raise CLIError("--grid", None, "give the grid either in the specification file or with --grid, not both")
        spec = _read_spec(args.spec)
        count, flag, value = spec_size(spec), "SPEC", args.spec
    else:
        spec = None
        count, flag, value = grid_size(dict(args.grid), args.seeds), "--grid", None
    if count > MAX_POINTS:
        raise CLIError(flag, value, f"the sweep has {count:,} points, more than the {MAX_POINTS:,} one sweep may hold "
                                    "(each is built, keyed and checked before anything runs); split the grid into "
                                    "several sweeps (the same --db takes them all)")
    if args.dry_run:
        print(f"sweep: {count:,} points; checking them and the store ...", flush=True)
    if spec is not None:
        try:
            name, points = points_from_spec(spec)
        except (ConfigError, ValueError, TypeError, KeyError) as e:
            why = str(e) if isinstance(e, ValueError) else f"{type(e).__name__}: {e}"
            raise CLIError("SPEC", args.spec, why) from None
        axes = list(spec.get("grid", {}))
    else:
        name = "sweep"
        base = config_from_args(args)
        try:
            points = expand_grid(base, dict(args.grid), seeds=args.seeds, draws=args.draws, evaluations=args.evaluations)
        except ConfigError as e:
            raise CLIError("--grid", None, str(e)) from None
        axes = [a for a, _ in args.grid]
    return args.name or name, points, axes


def check_points(points, args: argparse.Namespace, axes: list[str]) -> None:
    """beta range per evaluation, memory and time per point, before any worker starts."""
    workers = 1 if args.scheduler else max(1, args.workers)
    seen = set()
    for i, p in enumerate(points):
        if p.key in seen:
            continue
        seen.add(p.key)
        where = f"point {i + 1} of {len(points)} ({p.config.describe()})"
        if "law" in p.evaluations and p.config.beta > LAW_BETA_MAX:
            flag = "--grid beta" if "beta" in axes and not args.spec else ("SPEC" if args.spec else "--beta")
            raise CLIError(flag, f"{p.config.beta:g}", f"{where}: beta must be in [0, {LAW_BETA_MAX:g}] when the law "
                                                       f"is evaluated ([0, {SIMULATE_BETA_MAX:g}] with --evaluations "
                                                       "softmax,surrogate)")
        models = tuple(m for m in p.evaluations if m != "law")
        if models and args.evaluator is None:
            check_simulation_cost(p.config, p.draws, args.time_limit, models=models, workers=workers,
                                  where=f"point {i + 1} of {len(points)}: ")


def run(args: argparse.Namespace) -> int:
    check_sqlite_file("--db", args.db)   # before anything imports Dask or opens the store
    if not args.scheduler and args.workers > max(2, n_cores()):
        raise CLIError("--workers", args.workers, f"at most {max(2, n_cores())} (the cores of this machine, 2 at least: "
                                                  "more worker processes only compete for them); for more workers "
                                                  "start a Dask cluster and pass its address to --scheduler")
    for flag in ("parquet", "csv", "plot"):
        check_output_file(f"--{flag}", getattr(args, flag))
    evaluator = _evaluator(args.evaluator)
    name, points, axes = build_points(args)
    check_points(points, args, axes)

    from ..sweeps import pending_points, points_frame, run_sweep, to_frame, to_parquet
    if args.dry_run:
        todo = pending_points(points, args.db)
        print(f"sweep {name!r}: {len(points)} points, {len(points) - len(todo)} stored, {len(todo)} to compute")
        for p in todo:
            print(f"  {p.key[:12]}  seed={p.seed} draws={p.draws} {p.config.describe()}")
        return 0
    report = run_sweep(points, args.db, name=name, scheduler=args.scheduler, n_workers=args.workers,
                       evaluator=evaluator, progress=not args.no_progress)
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
        from ..figures.sweeps import sweep_plot

        x = args.x or (f"tag.{axes[0]}" if axes else "cfg.beta")
        ys = [c.strip() for c in args.y.split(",")]
        print(f"  wrote {sweep_plot(points_frame(points, args.db), x, ys, name, args.plot)}", file=sys.stderr)
    return 1 if report.failed else 0
