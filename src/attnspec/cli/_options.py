"""Configuration flags shared by every subcommand that takes an MHSA configuration."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..config import CENTERINGS, INPUTS, TARGETS, ConfigError, MHSAConfig
from ..jsonio import jsonable, write_json

__all__ = ["add_config_arguments", "config_from_args", "write_json", "jsonable"]


def _widths(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(w) for w in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or a comma-separated list of integers, got {text!r}") from None


def add_config_arguments(parser: argparse.ArgumentParser, seq_len: int = 500, d_model: int = 500) -> None:
    """Add the MHSA configuration flags (see ``MHSAConfig``) to ``parser``."""
    g = parser.add_argument_group("MHSA configuration (flags override --config)")
    g.add_argument("--config", type=Path, metavar="FILE", help="TOML or JSON configuration file ([mhsa] table or top-level keys)")
    g.add_argument("--seq-len", type=int, metavar="L", help=f"sequence length l (default {seq_len})")
    g.add_argument("--d-model", type=int, metavar="D", help=f"model width d (default {d_model})")
    g.add_argument("--heads", type=int, metavar="H", help="number of heads (default 1, or the length of a --d-qk list)")
    g.add_argument("--d-qk", type=_widths, metavar="W[,W...]", help="query/key width per head: one value or a list (default d/H)")
    g.add_argument("--d-v", type=_widths, metavar="W[,W...]", help="value width per head (default d_qk)")
    g.add_argument("--d-out", type=int, metavar="N", help="output width (default d)")
    g.add_argument("--beta", type=float, help="inverse temperature, 0..25 (default 1)")
    g.add_argument("--input", dest="inputs", choices=INPUTS, help="orthonormal = convention A (default), gaussian = convention B")
    g.add_argument("--kv-groups", type=int, metavar="N", help="number of shared K/V groups for keys and values alike (H = MHA, 1 = MQA)")
    g.add_argument("--key-groups", type=int, metavar="N", help="number of distinct W_K (default H)")
    g.add_argument("--value-groups", type=int, metavar="N", help="number of distinct W_V (default H)")
    g.add_argument("--tie-values-to-keys", action="store_true", help="within-head tying W_V = W_K (needs d_v = d_qk)")
    g.add_argument("--key-dependent-values", type=float, metavar="SCALE", help="values V = K M with M iid N(0, SCALE^2/d_qk)")
    g.add_argument("--target", choices=TARGETS, help="output (default) or the single-head attention matrix alone")
    g.add_argument("--centering", choices=CENTERINGS, help="tokens: P O (default); values: subtract the mean value path")
    parser.set_defaults(_config_defaults=dict(seq_len=seq_len, d_model=d_model))


def config_from_args(args: argparse.Namespace) -> MHSAConfig:
    """Build the configuration: file (if any), then defaults for what is missing, then explicit flags."""
    data: dict[str, Any] = MHSAConfig.load(args.config).to_dict() if args.config else {}
    defaults = getattr(args, "_config_defaults", {})
    for key in ("seq_len", "d_model", "d_out", "beta", "inputs", "target", "centering"):
        if getattr(args, key) is not None:
            data[key] = getattr(args, key)
        elif key in defaults and key not in data:
            data[key] = defaults[key]
    if args.target == "attention" and args.heads is None and "d_qk" not in data:
        data["d_qk"] = (data["d_model"],)
    if args.d_qk is not None or args.heads is not None or "d_qk" not in data:
        heads = args.heads or (len(args.d_qk) if args.d_qk else 1)
        if heads < 1:
            raise ConfigError("heads", heads, "must be an integer >= 1")
        d_qk = args.d_qk or (max(1, data["d_model"] // heads),)
        data["d_qk"] = d_qk * heads if len(d_qk) == 1 else d_qk
    if args.d_v is not None:
        data["d_v"] = args.d_v * len(data["d_qk"]) if len(args.d_v) == 1 else args.d_v
    elif "d_v" not in data or len(data["d_v"]) != len(data["d_qk"]):
        data["d_v"] = data["d_qk"]
    data.setdefault("d_out", data["d_model"])
    if args.kv_groups is not None:
        data["key_groups"] = data["value_groups"] = args.kv_groups
    for key in ("key_groups", "value_groups"):
        if getattr(args, key) is not None:
            data[key] = getattr(args, key)
    if args.tie_values_to_keys and args.key_dependent_values is not None:
        raise ConfigError("values", "tied-to-keys and key-dependent", "choose one of --tie-values-to-keys, --key-dependent-values")
    if args.tie_values_to_keys:
        data["values"] = "tied-to-keys"
    if args.key_dependent_values is not None:
        data["values"], data["value_key_scale"] = "key-dependent", args.key_dependent_values
    return MHSAConfig.from_dict(data)
