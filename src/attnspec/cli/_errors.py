"""The one kind of command-line error: :class:`CLIError` (flag, offending value, allowed range).

:func:`attnspec.cli.main` prints it as one line ``attnspec <command>: error: ...`` with exit status 2.
"""
from __future__ import annotations

from typing import Any

__all__ = ["CLIError"]


class CLIError(Exception):
    """A user error on the command line: ``flag``, offending ``value`` and what is ``allowed``.

    Parameters
    ----------
    flag : str
        The option (or options) at fault, e.g. ``"--beta"``.
    value : object
        The offending value; None or ``""`` leaves it out of the message.
    allowed : str
        What is allowed instead, or why the value is refused.

    Examples
    --------
    >>> err = CLIError("--beta", 7.5, "must be a number in [0, 4]")
    >>> str(err), err.flag
    ('--beta 7.5: must be a number in [0, 4]', '--beta')
    >>> str(CLIError("--tie-values-to-keys/--key-dependent-values", None, "choose one of them, not both"))
    '--tie-values-to-keys/--key-dependent-values: choose one of them, not both'
    """

    def __init__(self, flag: str, value: Any, allowed: str):
        self.flag, self.value, self.allowed = flag, value, allowed
        shown = "" if value is None or value == "" else f" {value}"
        super().__init__(f"{flag}{shown}: {allowed}")
