"""The ``attnspec`` command line.

Each subcommand lives in its own module of this package and exposes
``register(subparsers) -> None`` (adding its parser and setting ``func=run``) and an integer
``ORDER`` for its place in ``attnspec --help``. Modules are discovered automatically.
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from .. import __version__
from ..config import ConfigError

__all__ = ["main", "build_parser"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attnspec",
        description="Random-matrix diagnostics of multi-head self-attention: simulate softmax MHSA and its "
                    "Gaussian-equivalent surrogate, compute the limiting spectral law, diagnose trained models.",
    )
    parser.add_argument("--version", action="version", version=f"attnspec {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = [importlib.import_module(f"{__name__}.{m.name}") for m in pkgutil.iter_modules(__path__)
               if not m.name.startswith("_")]
    for mod in sorted((m for m in modules if hasattr(m, "register")), key=lambda m: getattr(m, "ORDER", 100)):
        mod.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except (ConfigError, FileNotFoundError) as err:  # user input: one clear line, no traceback
        print(f"attnspec {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
