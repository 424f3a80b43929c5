"""Configuration flags shared by every subcommand that takes an MHSA configuration, and the help formatter."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..config import BETA_MAX, CENTERINGS, INPUTS, TARGETS, ConfigError, MHSAConfig
from ..jsonio import jsonable, write_json
from ._checks import CLIError, float_range, int_list, int_range, positive_int

__all__ = ["add_config_arguments", "config_from_args", "write_json", "jsonable", "HelpFormatter",
           "RawHelpFormatter", "FLAG_OF"]


class HelpFormatter(argparse.HelpFormatter):
    """Appends ``(default: X)`` to an option's help unless the help already states its default or the
    default is None/False/empty (so no ``(default 500) (default: None)`` doubles).

    Examples
    --------
    >>> import argparse
    >>> p = argparse.ArgumentParser(prog="demo", formatter_class=HelpFormatter)
    >>> _ = p.add_argument("--draws", type=int, default=4, help="Monte-Carlo draws")
    >>> _ = p.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    >>> [line.strip() for line in p.format_help().splitlines()[-2:]]
    ['--draws DRAWS  Monte-Carlo draws (default: 4)', '--seed SEED    seed (default 0)']
    """

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        d = action.default
        if "default" in text.lower() or d is None or d is False or d is argparse.SUPPRESS or d == [] or d == ():
            return text
        if action.option_strings or action.nargs in (argparse.OPTIONAL, argparse.ZERO_OR_MORE):
            text += " (default: %(default)s)"
        return text


class RawHelpFormatter(argparse.RawDescriptionHelpFormatter, HelpFormatter):
    """:class:`HelpFormatter` that keeps the description's line breaks.

    Examples
    --------
    >>> import argparse
    >>> p = argparse.ArgumentParser(prog="demo", description="line one\\n  line two", formatter_class=RawHelpFormatter)
    >>> p.format_help().splitlines()[2:4]
    ['line one', '  line two']
    """


#: Configuration field -> the flag that sets it (for error messages).
FLAG_OF = {"seq_len": "--seq-len", "d_model": "--d-model", "heads": "--heads", "d_qk": "--d-qk", "d_v": "--d-v",
           "d_out": "--d-out", "beta": "--beta", "inputs": "--input", "key_groups": "--key-groups/--kv-groups",
           "value_groups": "--value-groups/--kv-groups", "values": "--tie-values-to-keys/--key-dependent-values",
           "value_key_scale": "--key-dependent-values", "target": "--target", "centering": "--centering"}

_WIDTHS = int_list(1, what="widths")


def add_config_arguments(parser: argparse.ArgumentParser, seq_len: int = 500, d_model: int = 500,
                         beta_max: float = BETA_MAX, beta_note: str = "") -> None:
    """Add the MHSA configuration flags (see ``MHSAConfig``) to ``parser``; ``--beta`` accepts ``[0, beta_max]``.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        Gets an argument group "MHSA configuration".
    seq_len, d_model : int
        Defaults of ``--seq-len`` and ``--d-model`` (0: decided by the command, e.g. the spectrum's size).
    beta_max : float
        Largest ``--beta`` accepted at parse time.
    beta_note : str
        Appended to the ``--beta`` help (why the range is what it is).

    Examples
    --------
    >>> import argparse
    >>> p = argparse.ArgumentParser(prog="demo")
    >>> add_config_arguments(p, seq_len=64, d_model=64, beta_max=4.0)
    >>> p.parse_args(["--heads", "4", "--beta", "0.5"]).beta
    0.5
    """
    g = parser.add_argument_group("MHSA configuration (flags override --config)")
    g.add_argument("--config", type=Path, metavar="FILE", help="TOML or JSON configuration file ([mhsa] table or top-level keys)")
    sl = f" (default {seq_len})" if seq_len else " (default: the number of eigenvalues)"
    dm = f" (default {d_model})" if d_model else " (default: l)"
    g.add_argument("--seq-len", type=int_range(2), metavar="L", help=f"sequence length l, an integer >= 2{sl}")
    g.add_argument("--d-model", type=positive_int, metavar="D", help=f"model width d, an integer >= 1{dm}")
    g.add_argument("--heads", type=positive_int, metavar="H",
                   help="number of heads, >= 1 (default 1, or the length of a --d-qk list; a --d-qk list must have H entries)")
    g.add_argument("--d-qk", type=_WIDTHS, metavar="W[,W...]",
                   help="query/key width per head, >= 1: one value or one per head (default d/H, rounded down)")
    g.add_argument("--d-v", type=_WIDTHS, metavar="W[,W...]", help="value width per head, >= 1: one value or one per head (default d_qk)")
    g.add_argument("--d-out", type=positive_int, metavar="N", help="output width, >= 1 (default d)")
    g.add_argument("--beta", type=float_range(0.0, beta_max), metavar="BETA",
                   help=f"inverse temperature in [0, {beta_max:g}]{beta_note} (default 1)")
    g.add_argument("--input", dest="inputs", choices=INPUTS, help="orthonormal = convention A (default), gaussian = convention B")
    g.add_argument("--kv-groups", type=positive_int, metavar="N",
                   help="number of shared K/V groups for keys and values alike, dividing H (H = MHA, 1 = MQA)")
    g.add_argument("--key-groups", type=positive_int, metavar="N", help="number of distinct W_K, dividing H (default H)")
    g.add_argument("--value-groups", type=positive_int, metavar="N", help="number of distinct W_V, dividing H (default H)")
    g.add_argument("--tie-values-to-keys", action="store_true", help="within-head tying W_V = W_K (needs d_v = d_qk)")
    g.add_argument("--key-dependent-values", type=float_range(0.0, lo_open=True), metavar="SCALE",
                   help="values V = K M with M iid N(0, SCALE^2/d_qk), SCALE > 0")
    g.add_argument("--target", choices=TARGETS, help="output (default) or the single-head attention matrix alone")
    g.add_argument("--centering", choices=CENTERINGS, help="tokens: P O (default); values: subtract the mean value path")
    parser.set_defaults(_config_defaults=dict(seq_len=seq_len, d_model=d_model))


def load_config_file(path: Path) -> MHSAConfig:
    """``MHSAConfig.load`` with every failure as a one-line :class:`CLIError` naming ``--config``."""
    try:
        return MHSAConfig.load(path)
    except FileNotFoundError:
        raise CLIError("--config", path, "no such file") from None
    except ConfigError as err:
        raise CLIError("--config", path, str(err)) from None
    except (OSError, ValueError) as err:  # unreadable, not UTF-8, TOML/JSON syntax
        raise CLIError("--config", path, f"cannot be read as a TOML/JSON configuration: {err}") from None


def _check_count(flag: str, widths: tuple[int, ...], heads: int) -> None:
    if len(widths) not in (1, heads):
        raise CLIError(flag, ",".join(map(str, widths)),
                       f"lists {len(widths)} widths for {heads} heads; give one width or exactly {heads}")


def config_from_args(args: argparse.Namespace, base: dict[str, Any] | None = None) -> MHSAConfig:
    """Build the configuration: ``base`` or the --config file (if any), then defaults for what is missing,
    then explicit flags. Errors name the flag (:class:`CLIError`).

    Parameters
    ----------
    args : argparse.Namespace
        Parsed by a parser that got :func:`add_config_arguments`.
    base : dict, optional
        Configuration fields to start from instead of ``--config``.

    Returns
    -------
    MHSAConfig
        Per-head widths default to ``d_model // heads``, value widths to the query/key widths.

    Examples
    --------
    >>> import argparse
    >>> p = argparse.ArgumentParser(prog="demo")
    >>> add_config_arguments(p, seq_len=64, d_model=64)
    >>> cfg = config_from_args(p.parse_args(["--heads", "4", "--beta", "0.5"]))
    >>> cfg.seq_len, cfg.d_qk, cfg.beta
    (64, (16, 16, 16, 16), 0.5)
    >>> config_from_args(p.parse_args(["--heads", "3", "--d-qk", "8,8"]))
    Traceback (most recent call last):
    attnspec.cli._errors.CLIError: --d-qk 8,8: lists 2 widths for 3 heads; give one width or exactly 3
    """
    if base is not None:
        data: dict[str, Any] = dict(base)
    else:
        data = load_config_file(args.config).to_dict() if args.config else {}
    defaults = getattr(args, "_config_defaults", {})
    for key in ("seq_len", "d_model", "d_out", "beta", "inputs", "target", "centering"):
        if getattr(args, key) is not None:
            data[key] = getattr(args, key)
        elif key in defaults and key not in data:
            data[key] = defaults[key]
    if args.target == "attention" and args.heads is None and args.d_qk is None and "d_qk" not in data:
        data["d_qk"] = (data["d_model"],)
    if args.d_qk is not None or args.heads is not None or "d_qk" not in data:
        if args.heads is not None:
            heads = args.heads
            if args.d_qk is not None:
                _check_count("--d-qk", args.d_qk, heads)
        else:
            heads = len(args.d_qk) if args.d_qk else 1
        if args.d_qk:
            d_qk = args.d_qk
        else:
            if data["d_model"] // heads < 1:
                raise CLIError("--heads", heads, f"exceeds --d-model {data['d_model']}: the default per-head width "
                                                 "d/H would be 0; give --d-qk (and --d-v) explicitly")
            d_qk = (data["d_model"] // heads,)
        data["d_qk"] = d_qk * heads if len(d_qk) == 1 else d_qk
    heads = len(data["d_qk"])
    if args.d_v is not None:
        _check_count("--d-v", args.d_v, heads)
        data["d_v"] = args.d_v * heads if len(args.d_v) == 1 else args.d_v
    elif "d_v" not in data or len(data["d_v"]) != heads:
        data["d_v"] = data["d_qk"]
    data.setdefault("d_out", data["d_model"])
    if args.kv_groups is not None:
        data["key_groups"] = data["value_groups"] = args.kv_groups
    for key in ("key_groups", "value_groups"):
        if getattr(args, key) is not None:
            data[key] = getattr(args, key)
    if args.tie_values_to_keys and args.key_dependent_values is not None:
        raise CLIError("--tie-values-to-keys/--key-dependent-values", None, "choose one of them, not both")
    if args.tie_values_to_keys:
        data["values"] = "tied-to-keys"
    if args.key_dependent_values is not None:
        data["values"], data["value_key_scale"] = "key-dependent", args.key_dependent_values
    try:
        return MHSAConfig.from_dict(data)
    except ConfigError as err:
        flag = FLAG_OF.get(err.parameter, err.parameter)
        src = " (or --config)" if args.config else ""
        raise CLIError(flag + src, None, str(err)) from None
