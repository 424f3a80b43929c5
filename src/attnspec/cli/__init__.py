"""The ``attnspec`` command line.

Each subcommand lives in its own module of this package and exposes
``register(subparsers) -> None`` (adding its parser and setting ``func=run``) and an integer
``ORDER`` for its place in ``attnspec --help``. Modules are discovered automatically.

User errors (bad flags, unreadable or malformed files, configurations outside the documented
ranges, a model the loaders refuse) end with exit status 2 and one line on stderr,
``attnspec <command>: error: <flag> <value>: <allowed>``; anything else is a bug and keeps its
traceback. ``ATTNSPEC_DEBUG=1`` shows the traceback of user errors too.

SIGINT (Ctrl-C) and SIGTERM (``timeout``, SLURM, ``docker stop``) end a command with one line,
``attnspec <command>: interrupted by SIGTERM ...``, and exit status 130 or 143, after the temporary files
of the run (the forward cache) are removed on the way out; a further signal during that cleanup is ignored.
"""
from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import re
import signal
import sys
import threading

from .. import __version__
from ..config import ConfigError
from ._checks import CLIError
from ._options import HelpFormatter

__all__ = ["main", "build_parser", "ArgumentParser"]


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


class ArgumentParser(argparse.ArgumentParser):
    """argparse with one-line errors: ``attnspec <command>: error: --flag VALUE: allowed``, exit 2.

    Subparsers inherit the class (``add_subparsers`` uses the parent's type).

    Examples
    --------
    >>> ArgumentParser(prog="attnspec demo").prog
    'attnspec demo'
    """

    def error(self, message: str):  # noqa: D401 - argparse API
        message = re.sub(r"^argument ([^:]+): ", r"\1 ", _one_line(message))
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``attnspec`` parser with one subcommand per module of this package (sorted by ``ORDER``).

    Examples
    --------
    >>> build_parser().parse_args(["law", "--beta", "0.5"]).beta
    0.5
    """
    parser = ArgumentParser(
        prog="attnspec", formatter_class=HelpFormatter,
        description="Random-matrix diagnostics of multi-head self-attention: simulate softmax MHSA and its "
                    "Gaussian-equivalent surrogate, compute the limiting spectral law, diagnose trained models.",
        epilog="User errors exit with status 2 and one line on stderr (ATTNSPEC_DEBUG=1 shows the traceback).",
    )
    parser.add_argument("--version", action="version", version=f"attnspec {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = [importlib.import_module(f"{__name__}.{m.name}") for m in pkgutil.iter_modules(__path__)
               if not m.name.startswith("_")]
    for mod in sorted((m for m in modules if hasattr(m, "register")), key=lambda m: getattr(m, "ORDER", 100)):
        mod.register(sub)
    return parser


def _user_errors() -> tuple[type[BaseException], ...]:
    """The exception classes that mean 'bad input', not 'bug' (imported lazily: models imports torch)."""
    errors: list[type[BaseException]] = [CLIError, ConfigError, OSError, UnicodeDecodeError, ValueError]
    if "attnspec.models" in sys.modules:
        from ..models import AdapterError, ModelLoadError
        errors += [AdapterError, ModelLoadError]
    if "attnspec.theory" in sys.modules:
        from ..theory import LawSolverError
        errors.append(LawSolverError)
    return tuple(errors)


class Terminated(BaseException):
    """Raised in the main thread by SIGTERM (like KeyboardInterrupt for SIGINT): unwinds the command so that its
    ``finally`` blocks remove temporary files."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _on_signal(signum, frame):
    """The first SIGINT/SIGTERM: further ones are ignored while the command unwinds and removes its files."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(signum)


def _run(args) -> int:
    """``args.func(args)`` with SIGTERM raising :class:`Terminated` (main thread only); handlers restored after."""
    if threading.current_thread() is not threading.main_thread():
        return int(args.func(args) or 0)
    old = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGTERM, _on_signal)
    if old[signal.SIGINT] is signal.default_int_handler:     # not when the shell ignores SIGINT (cmd &)
        signal.signal(signal.SIGINT, _on_signal)
    try:
        return int(args.func(args) or 0)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def main(argv: list[str] | None = None) -> int:
    """Run the command line on ``argv`` (default ``sys.argv[1:]``); the exit status (2 for user errors).

    Examples
    --------
    >>> main(["--version"])
    attnspec ...
    0
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # argparse: --help/--version (0) or a usage error (2, already printed)
        return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 2)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return _run(args)
    except KeyboardInterrupt:
        print(f"attnspec {args.command}: interrupted by SIGINT; temporary files removed", file=sys.stderr)
        return 130
    except Terminated as stop:
        name = signal.Signals(stop.signum).name
        print(f"attnspec {args.command}: interrupted by {name}; temporary files removed", file=sys.stderr)
        return 128 + stop.signum
    except _user_errors() as err:  # evaluated when raised: the classes of the modules imported by then
        if os.environ.get("ATTNSPEC_DEBUG"):
            raise
        if isinstance(err, OSError) and err.filename is not None:
            msg = f"{err.filename}: {err.strerror or err}"
        else:
            msg = str(err) or type(err).__name__
        print(f"attnspec {args.command}: error: {_one_line(msg)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
