"""``attnspec identify``: estimate Gaussian-equivalent parameters from an observed spectrum."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from ._options import add_config_arguments, config_from_args, write_json

ORDER = 50


def register(sub) -> None:
    p = sub.add_parser(
        "identify", help="estimate beta (and optionally widths, head count, scale) from an observed spectrum",
        description="Fit the Gaussian-equivalent law to an observed spectrum by minimum W1 of the bulk (quantile "
                    "matching; eigenvalues above the fitted edge are reported as outliers), with parametric-bootstrap "
                    "confidence intervals (surrogate spectra simulated at the fit and at the observed size, each "
                    "refitted), a goodness-of-fit test whose p-value is calibrated on the same surrogate draws, and a "
                    "Fisher-information report of the directions the spectrum does not pin down.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("input", type=Path, help="eigenvalues: .npy, .csv/.txt (one column or flat), or JSON from "
                                            "`attnspec simulate --json` (its config is the default base)")
    p.add_argument("--model", choices=("softmax", "surrogate"), default="softmax",
                   help="which spectrum of a simulate JSON to use")
    p.add_argument("--free", default="beta", help="comma-separated continuous parameters: beta, psi (d_qk/d), "
                                                  "phi (d_v/d), scale")
    p.add_argument("--heads-candidates", default=None, metavar="H1,H2,...",
                   help="profile the head count over these values at fixed total width")
    p.add_argument("--boot", type=int, default=99, help="parametric-bootstrap size B (99 allows p = 0.01)")
    p.add_argument("--level", type=float, default=0.95, help="confidence level")
    p.add_argument("--ci-method", choices=("normal", "basic"), default="normal")
    p.add_argument("--max-se", type=float, default=0.1, help="standard error (fit coordinates) above which a "
                                                             "direction is non-identifiable")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, metavar="PATH", help="write the full result as JSON")
    p.add_argument("--no-progress", action="store_true")
    add_config_arguments(p, seq_len=0, d_model=0)
    p.set_defaults(func=run)


def load_spectrum(path: Path, model: str = "softmax") -> tuple[np.ndarray, dict | None]:
    """Eigenvalues (1-D) and, for JSON input, the configuration dictionary it carries."""
    if path.suffix == ".npy":
        return np.load(path).astype(float).ravel(), None
    if path.suffix == ".json":
        data = json.loads(path.read_text())
        for key in (f"{model}_eigenvalues", "eigenvalues", "eigs"):
            if key in data:
                return np.asarray(data[key], dtype=float).ravel(), data.get("config")
        raise SystemExit(f"{path}: no '{model}_eigenvalues' or 'eigenvalues' array")
    text = path.read_text().replace(",", " ").split()
    vals = []
    for tok in text:
        try:
            vals.append(float(tok))
        except ValueError:
            continue   # header
    return np.asarray(vals), None


def run(args: argparse.Namespace) -> int:
    from ..config import MHSAConfig
    from ..identify import identify

    eigs, cfg = load_spectrum(args.input, args.model)
    if cfg is not None and args.config is None:
        tmp = args.input.with_suffix(".config.json")
        base = MHSAConfig.from_dict(cfg)
        if any(getattr(args, k) is not None for k in ("seq_len", "d_model", "heads", "d_qk", "d_v", "d_out", "beta",
                                                         "target")):
            tmp.write_text(base.to_json())
            args.config = tmp
            base = config_from_args(args)
            tmp.unlink()
    else:
        if args.seq_len is None:
            args.seq_len = eigs.size
        if args.d_model is None:
            args.d_model = args.seq_len
        base = config_from_args(args)
    free = tuple(s.strip() for s in args.free.split(",") if s.strip())
    heads = [int(h) for h in args.heads_candidates.split(",")] if args.heads_candidates else None
    res = identify(eigs, base, free=free, heads=heads, n_boot=args.boot, level=args.level, method=args.ci_method,
                   seed=args.seed, max_se=args.max_se, progress=not args.no_progress)
    print(f"{eigs.size} eigenvalues from {args.input}")
    print(res.summary())
    if args.json:
        print(f"  wrote {write_json(args.json, res.to_dict())}", file=sys.stderr)
    return 0
