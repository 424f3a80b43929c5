"""``attnspec identify``: estimate Gaussian-equivalent parameters from an observed spectrum."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from ._checks import (LAW_BETA_MAX, CLIError, check_input_file, check_output_file, float_range, int_list, int_range,
                      nonneg_int)
from ._options import HelpFormatter, add_config_arguments, config_from_args, write_json

ORDER = 50

FREE_PARAMETERS = ("beta", "psi", "phi", "scale")


def _free(text: str) -> tuple[str, ...]:
    names = tuple(s.strip() for s in str(text).split(","))
    if not names or any(n not in FREE_PARAMETERS for n in names) or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"{text}: must be a comma-separated subset of {', '.join(FREE_PARAMETERS)} "
                                         "(each at most once)")
    return names


DESCRIPTION = (
    "Fit the Gaussian-equivalent law to an observed spectrum by minimum W1 of the bulk (quantile matching; eigenvalues "
    "above the fitted edge are reported as outliers), with parametric-bootstrap confidence intervals (spectra of the "
    "--model simulated at the observed size near the fit, each refitted; the offset of the refits corrects the "
    "estimate), a goodness-of-fit test whose p-value is calibrated on the same draws, and a Fisher-information report "
    "of the directions the spectrum does not pin down. The input must be a possible Gram spectrum: at least 10 finite "
    "eigenvalues, not all zero, none negative beyond round-off (1e-6 x the largest). A warning goes to stderr when the "
    f"fit fails its own goodness-of-fit test (p < 1 - level). beta is limited to [0, {LAW_BETA_MAX:g}] (the law "
    "solver's range). Method, derivation and measured coverage: docs/identify.md; the model: docs/theory.md.")


def register(sub) -> None:
    p = sub.add_parser("identify", description=DESCRIPTION, formatter_class=HelpFormatter,
                       help="estimate beta (and optionally widths, head count, scale) from an observed spectrum")
    p.add_argument("input", type=Path, metavar="INPUT",
                   help="eigenvalues: .npy, .csv/.txt/.tsv/.dat (numbers separated by commas or whitespace; one header "
                        "line allowed), or JSON (a list, or an object with 'eigenvalues' or '<model>_eigenvalues', e.g. "
                        "from `attnspec simulate --json`, whose 'config' is then the default base configuration)")
    p.add_argument("--model", choices=("softmax", "surrogate"), default="softmax",
                   help="the model that produced the spectrum, and what the parametric bootstrap simulates at the "
                        "fit: softmax (default; a real attention layer or a simulated softmax one: intervals and the "
                        "goodness-of-fit test then include the softmax-vs-Gaussian-equivalent model error) or "
                        "surrogate (a Gaussian-equivalent spectrum). Also picks the spectrum of a simulate JSON")
    p.add_argument("--free", type=_free, default=("beta",), metavar="P[,P...]",
                   help="comma-separated continuous parameters to estimate: beta, psi (d_qk/d), phi (d_v/d), scale "
                        "(default beta)")
    p.add_argument("--heads-candidates", type=int_list(1, what="head counts"), default=None, metavar="H1,H2,...",
                   help="profile the head count over these values (each >= 1) at fixed total width")
    p.add_argument("--boot", type=int_range(2, 100000), default=99,
                   help="parametric-bootstrap size B, 2..100000 (99 allows p = 0.01)")
    p.add_argument("--level", type=float_range(0.0, 1.0, lo_open=True, hi_open=True), default=0.95,
                   help="confidence level, in (0, 1)")
    p.add_argument("--ci-method", choices=("normal", "basic"), default="normal",
                   help="normal: bias-corrected t interval; basic: bootstrap quantiles reflected at the fit")
    p.add_argument("--max-se", type=float_range(0.0, lo_open=True), default=0.1,
                   help="standard error (fit coordinates, > 0) above which a direction is non-identifiable")
    p.add_argument("--seed", type=nonneg_int, default=0, help="bootstrap seed, >= 0")
    p.add_argument("--json", type=Path, metavar="PATH", help="write the full result as JSON")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_config_arguments(p, seq_len=0, d_model=0, beta_max=LAW_BETA_MAX)
    p.set_defaults(func=run)


def load_spectrum(path: Path, model: str = "softmax") -> tuple[np.ndarray, dict | None]:
    """:func:`attnspec.identify.read_spectrum` with its errors as :class:`CLIError` naming ``INPUT``."""
    from ..identify import SpectrumFileError, read_spectrum

    check_input_file("INPUT", path)
    try:
        return read_spectrum(path, model)
    except SpectrumFileError as e:
        raise CLIError("INPUT", path, e.reason) from None


def run(args: argparse.Namespace) -> int:
    from ..config import ConfigError, MHSAConfig
    from ..identify import SpectrumError, check_spectrum

    eigs, cfg = load_spectrum(args.input, args.model)
    try:
        eigs = check_spectrum(eigs)
    except SpectrumError as e:
        raise CLIError("INPUT", args.input, str(e)) from None
    check_output_file("--json", args.json)
    if cfg is not None and args.config is None:
        try:
            cfg = MHSAConfig.from_dict(cfg).to_dict()
        except ConfigError as e:
            raise CLIError("INPUT", args.input, f"its 'config' is not a valid configuration: {e}") from None
        base = config_from_args(args, base=cfg)   # flags override the JSON's configuration, in memory
    else:
        args._config_defaults = {"seq_len": eigs.size, "d_model": args.seq_len or eigs.size}
        base = config_from_args(args)
    if eigs.size % base.seq_len:
        raise CLIError("--seq-len", base.seq_len, f"INPUT holds {eigs.size} eigenvalues, not a whole number of "
                                                  f"spectra of length {base.seq_len}; give --seq-len dividing {eigs.size}")
    if "beta" not in args.free and base.beta > LAW_BETA_MAX:
        raise CLIError("--beta", f"{base.beta:g}", f"must be in [0, {LAW_BETA_MAX:g}] (the law solver's range) when "
                                                   "beta is not estimated")
    from ._cost import check_simulation_cost
    # the parametric bootstrap simulates spectra of the observed size: its memory is checked before anything runs
    check_simulation_cost(base, max(1, eigs.size // base.seq_len), None, models=(args.model,),
                          where=f"INPUT ({eigs.size} eigenvalues) ")
    from ..identify import identify

    res = identify(eigs, base, free=args.free, heads=args.heads_candidates, n_boot=args.boot, level=args.level,
                   method=args.ci_method, seed=args.seed, max_se=args.max_se, model=args.model,
                   progress=not args.no_progress)
    print(f"{eigs.size} eigenvalues from {args.input}")
    print(res.summary())
    p = res.gof.get("p_value")
    if p is not None and p < 1 - args.level:
        print(f"attnspec identify: warning: the fit fails its own goodness-of-fit test (p = {p:.3g} < "
              f"{1 - args.level:.3g} = 1 - level): this model does not describe the spectrum; read the estimates "
              "and intervals with caution", file=sys.stderr)
    if args.json:
        print(f"  wrote {write_json(args.json, res.to_dict())}", file=sys.stderr)
    return 0
