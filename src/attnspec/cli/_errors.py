"""The one kind of command-line error: :class:`CLIError` (flag, offending value, allowed range).

:func:`attnspec.cli.main` prints it as one line ``attnspec <command>: error: ...`` with exit status 2.
"""
from __future__ import annotations

from typing import Any

__all__ = ["CLIError"]


class CLIError(Exception):
    """A user error on the command line: ``flag``, offending ``value`` and what is ``allowed``."""

    def __init__(self, flag: str, value: Any, allowed: str):
        self.flag, self.value, self.allowed = flag, value, allowed
        shown = "" if value is None or value == "" else f" {value}"
        super().__init__(f"{flag}{shown}: {allowed}")
