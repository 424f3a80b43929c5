"""Validation shared by the subcommands: argparse types, file and directory checks.

Everything here runs *before* any model is loaded or any computation starts, and reports a user
error as one :class:`CLIError` (flag, value, allowed range), which :func:`attnspec.cli.main` prints
as one line ``attnspec <command>: error: ...`` with exit status 2. Model arguments are checked in
:mod:`._registry`, simulation costs in :mod:`._cost`.
"""
from __future__ import annotations

import argparse
import contextlib
import math
import os
from pathlib import Path
from typing import Callable, Iterable, Iterator

from ._errors import CLIError

__all__ = ["CLIError", "SIMULATE_BETA_MAX", "LAW_BETA_MAX", "DEFAULT_TIME_LIMIT", "int_range", "positive_int",
           "nonneg_int", "float_range", "int_list", "check_output_dir", "check_output_file", "check_input_file",
           "read_text_lines", "check_sqlite_file", "output_dir", "n_cores", "check_cores", "check_apart", "output_lock"]

#: Largest beta for Monte-Carlo alone (``simulate`` without ``--with-law``, sweeps without the law):
#: the surrogate's fourth moment grows like ``e^{4 beta^2}`` and overflows float64 from beta ~ 13.5
#: (measured at l = d = 300, one and two heads); 12 keeps a margin of ~1e56.
SIMULATE_BETA_MAX = 12.0
#: Largest beta for anything that solves the limiting law (``law``, ``simulate --with-law``,
#: ``identify``, sweeps with the law): the Dyson solver converged for all of 93 configurations tried
#: (13 chosen, 80 drawn at random: heads 1-16, sharing, tying, key-dependent values, both input
#: conventions, l/d 0.125-2) up to beta = 4.5; the first failures ("solver on a wrong branch?") came at
#: beta = 4.75, most configurations fail from 6.
LAW_BETA_MAX = 4.0
#: Default ``--time-limit`` (seconds) for simulations and sweep points.
DEFAULT_TIME_LIMIT = 3600.0

_SQLITE_HEADER = b"SQLite format 3\x00"


# ---------------------------------------------------------------------------------------------- argparse types
def _parse_int(text: str) -> int | None:
    try:
        return int(str(text).strip())
    except ValueError:
        try:  # accept 1e6 and 5.0, never 2.5
            x = float(str(text).strip())
        except ValueError:
            return None
        return int(x) if math.isfinite(x) and x == int(x) else None


def _describe_int(lo: int | None, hi: int | None) -> str:
    if lo is not None and hi is not None:
        return f"an integer in [{lo}, {hi}]"
    if lo is not None:
        return f"an integer >= {lo}"
    return f"an integer <= {hi}"


def int_range(lo: int | None = None, hi: int | None = None, note: str = "") -> Callable[[str], int]:
    """argparse ``type=``: an integer in ``[lo, hi]`` (either bound may be None).

    Parameters
    ----------
    lo, hi : int or None
        Inclusive bounds; None leaves that side open.
    note : str
        Appended to the allowed range in the error message.

    Returns
    -------
    callable
        ``str -> int``; accepts ``"1e3"`` and ``"5.0"`` (integral values), raises
        :class:`argparse.ArgumentTypeError` naming the allowed range otherwise.

    Examples
    --------
    >>> heads = int_range(1, 64)
    >>> heads("8"), heads("1e1")
    (8, 10)
    >>> heads("65")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: 65: must be an integer in [1, 64]
    """
    want = _describe_int(lo, hi) + note

    def convert(text: str) -> int:
        v = _parse_int(text)
        if v is None or (lo is not None and v < lo) or (hi is not None and v > hi):
            raise argparse.ArgumentTypeError(f"{text}: must be {want}")
        return v
    convert.__name__ = "int"
    return convert


positive_int = int_range(1)
positive_int.__doc__ = """argparse ``type=``: an integer >= 1 (``int_range(1)``).

Examples
--------
>>> positive_int("3")
3
>>> positive_int("0")
Traceback (most recent call last):
argparse.ArgumentTypeError: 0: must be an integer >= 1
"""
nonneg_int = int_range(0)
nonneg_int.__doc__ = """argparse ``type=``: an integer >= 0 (``int_range(0)``); ``"-1"`` is refused like ``"2.5"``.

Examples
--------
>>> nonneg_int("0"), nonneg_int("2.0"), nonneg_int("1e2")
(0, 2, 100)
"""


def float_range(lo: float | None = None, hi: float | None = None, lo_open: bool = False, hi_open: bool = False,
                note: str = "") -> Callable[[str], float]:
    """argparse ``type=``: a finite number in the interval ``lo..hi`` (open or closed ends).

    Parameters
    ----------
    lo, hi : float or None
        Bounds; None leaves that side unbounded (but the number must still be finite).
    lo_open, hi_open : bool
        Exclude the bound itself.
    note : str
        Appended to the allowed range in the error message.

    Returns
    -------
    callable
        ``str -> float``, raising :class:`argparse.ArgumentTypeError` with the allowed interval.

    Examples
    --------
    >>> beta = float_range(0.0, 4.0)
    >>> beta("1.5")
    1.5
    >>> beta("nan")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: nan: must be a number in [0, 4]
    >>> float_range(0.0, lo_open=True)("0")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: 0: must be a finite number > 0
    """
    left = "(" if lo_open else "["
    right = ")" if hi_open else "]"
    if lo is not None and hi is not None:
        want = f"a number in {left}{lo:g}, {hi:g}{right}"
    elif lo is not None:
        want = f"a finite number {'>' if lo_open else '>='} {lo:g}"
    else:
        want = f"a finite number {'<' if hi_open else '<='} {hi:g}"
    want += note

    def convert(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text}: must be {want}") from None
        bad = not math.isfinite(v)
        if lo is not None:
            bad = bad or (v <= lo if lo_open else v < lo)
        if hi is not None:
            bad = bad or (v >= hi if hi_open else v > hi)
        if bad:
            raise argparse.ArgumentTypeError(f"{text}: must be {want}")
        return v
    convert.__name__ = "float"
    return convert


def int_list(lo: int | None = 1, hi: int | None = None, what: str = "integers") -> Callable[[str], tuple[int, ...]]:
    """argparse ``type=``: a comma-separated, non-empty list of integers in ``[lo, hi]``.

    Parameters
    ----------
    lo, hi : int or None
        Inclusive bounds of every entry.
    what : str
        What the entries are, for the error message.

    Returns
    -------
    callable
        ``str -> tuple[int, ...]``.

    Examples
    --------
    >>> widths = int_list(1, what="widths")
    >>> widths("16, 32,64")
    (16, 32, 64)
    >>> widths("16,,32")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: 16,,32: must be one or more comma-separated widths, each an integer >= 1
    """
    want = f"one or more comma-separated {what}, each {_describe_int(lo, hi)}"

    def convert(text: str) -> tuple[int, ...]:
        parts = [p.strip() for p in str(text).split(",")]
        vals = [_parse_int(p) for p in parts]
        if not parts or any(p == "" for p in parts) or any(
                v is None or (lo is not None and v < lo) or (hi is not None and v > hi) for v in vals):
            raise argparse.ArgumentTypeError(f"{text}: must be {want}")
        return tuple(vals)  # type: ignore[arg-type]
    convert.__name__ = "list"
    return convert


def output_dir(text: str) -> Path:
    """argparse ``type=`` of an output directory: a non-empty path (``--out ""`` would be the current directory).

    Examples
    --------
    >>> output_dir("out/run1").as_posix()
    'out/run1'
    >>> output_dir("  ")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: '  ': must be a directory path, not empty (use . for the current directory)
    """
    if not str(text).strip():
        raise argparse.ArgumentTypeError(f"{text!r}: must be a directory path, not empty (use . for the current "
                                         "directory)")
    return Path(text)


def n_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the platform has one).

    Examples
    --------
    >>> n_cores() >= 1
    True
    """
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def check_cores(flag: str, n: int | None, what: str, hint: str = "") -> None:
    """Refuse ``n`` above the cores of this machine (:func:`n_cores`), before anything starts.

    Examples
    --------
    >>> check_cores("--threads", 1, "torch threads")
    >>> check_cores("--threads", 10 ** 6, "torch threads")
    Traceback (most recent call last):
    attnspec.cli._errors.CLIError: --threads 1000000: at most ... (the cores of this machine: more torch threads than cores ...
    """
    if n is None:
        return
    cores = n_cores()
    if n > cores:
        raise CLIError(flag, n, f"at most {cores} (the cores of this machine: more {what} than cores only compete for "
                                f"them{hint})")


# ---------------------------------------------------------------------------------------------- files
def _nearest_existing(path: Path) -> Path:
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_output_dir(flag: str, path: Path | str) -> Path:
    """``path`` is an existing writable directory, or can be created (its nearest existing ancestor is
    a writable directory).

    ``flag`` is the option named in the error; nothing is created here.

    Raises
    ------
    CLIError
        When ``path`` is a file, or neither it nor its nearest existing ancestor is writable.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> tmp = tempfile.mkdtemp()
    >>> check_output_dir("--out", pathlib.Path(tmp, "new", "figs")).name     # may be created
    'figs'
    >>> _ = pathlib.Path(tmp, "f").write_text("x")
    >>> check_output_dir("--out", pathlib.Path(tmp, "f", "figs"))
    Traceback (most recent call last):
    attnspec.cli._errors.CLIError: --out .../f/figs: cannot be created: .../f is a file, not a directory
    >>> import shutil; shutil.rmtree(tmp)
    """
    path = Path(path)
    if path.exists():
        if not path.is_dir():
            raise CLIError(flag, path, "exists and is not a directory; give a directory (created if missing)")
        if not os.access(path, os.W_OK | os.X_OK):
            raise CLIError(flag, path, "is a directory this user cannot write into")
        return path
    anc = _nearest_existing(path)
    if not anc.is_dir():
        raise CLIError(flag, path, f"cannot be created: {anc} is a file, not a directory")
    if not os.access(anc, os.W_OK | os.X_OK):
        raise CLIError(flag, path, f"cannot be created: no write permission in {anc}")
    return path


def check_output_file(flag: str, path: Path | str | None) -> Path | None:
    """``path`` (if given) is a writable file path: not a directory, its directory exists or can be created.

    ``flag`` is the option named in the error; None passes through.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> tmp = tempfile.mkdtemp()
    >>> check_output_file("--json", pathlib.Path(tmp, "out", "r.json")).name
    'r.json'
    >>> check_output_file("--json", tmp)
    Traceback (most recent call last):
    attnspec.cli._errors.CLIError: --json ...: is a directory; give a file path
    >>> import shutil; shutil.rmtree(tmp)
    >>> check_output_file("--json", None) is None
    True
    """
    if path is None:
        return None
    path = Path(path)
    if path.is_dir():
        raise CLIError(flag, path, "is a directory; give a file path")
    if path.exists() and not os.access(path, os.W_OK):
        raise CLIError(flag, path, "exists and is not writable")
    parent = path.absolute().parent
    if parent.exists():
        if not parent.is_dir():
            raise CLIError(flag, path, f"cannot be written: {parent} is a file, not a directory")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise CLIError(flag, path, f"cannot be written: no write permission in {parent}")
    else:
        check_output_dir(flag, parent)
    return path


def check_input_file(flag: str, path: Path | str) -> Path:
    """``path`` is an existing, readable, non-empty regular file.

    Examples
    --------
    >>> check_input_file("--texts", "/no/such/file.txt")
    Traceback (most recent call last):
    attnspec.cli._errors.CLIError: --texts /no/such/file.txt: no such file
    """
    path = Path(path)
    if not path.exists():
        raise CLIError(flag, path, "no such file")
    if not path.is_file():
        raise CLIError(flag, path, "is not a regular file")
    if not os.access(path, os.R_OK):
        raise CLIError(flag, path, "is not readable")
    if path.stat().st_size == 0:
        raise CLIError(flag, path, "is empty")
    return path


def read_text_lines(flag: str, path: Path | str) -> list[str]:
    """Non-blank lines of a UTF-8 text file (a :class:`CLIError` if it is missing, not UTF-8 or blank).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp(), "t.txt")
    >>> _ = f.write_text("first text\\n\\n  \\nsecond\\n")
    >>> read_text_lines("--texts", f)
    ['first text', 'second']
    >>> import shutil; shutil.rmtree(f.parent)
    """
    path = check_input_file(flag, path)
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CLIError(flag, path, f"is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}); "
                                   "give a UTF-8 file, one text per line") from None
    lines = [t for t in text.splitlines() if t.strip()]
    if not lines:
        raise CLIError(flag, path, "has no non-blank line; give a UTF-8 file, one text per line")
    return lines


def check_sqlite_file(flag: str, path: Path | str) -> Path:
    """``path`` is an SQLite database (checked by its 16-byte header), an empty file, or can be created.

    Examples
    --------
    >>> import tempfile, pathlib, sqlite3
    >>> tmp = tempfile.mkdtemp()
    >>> db = pathlib.Path(tmp, "sweep.sqlite")
    >>> con = sqlite3.connect(db); _ = con.execute("create table t (x)"); con.commit(); con.close()
    >>> check_sqlite_file("--db", db).name
    'sweep.sqlite'
    >>> _ = pathlib.Path(tmp, "notes.txt").write_text("hello")
    >>> check_sqlite_file("--db", pathlib.Path(tmp, "notes.txt"))
    Traceback (most recent call last):
    attnspec.cli._errors.CLIError: --db ...notes.txt: exists and is not an SQLite database (wrong file header); ...
    >>> import shutil; shutil.rmtree(tmp)
    """
    path = Path(path)
    if path.exists():
        if not path.is_file():
            raise CLIError(flag, path, "is not a regular file; give an SQLite database file (created if missing)")
        with open(path, "rb") as fh:
            head = fh.read(16)
        if head and not _SQLITE_HEADER.startswith(head):  # a prefix: another runner is creating it right now
            raise CLIError(flag, path, "exists and is not an SQLite database (wrong file header); give an "
                                       "SQLite file or a new path")
        if not os.access(path, os.R_OK | os.W_OK):
            raise CLIError(flag, path, "is not readable and writable")
        # WAL mode writes <db>-wal and <db>-shm next to it
        if not os.access(path.absolute().parent, os.W_OK | os.X_OK):
            raise CLIError(flag, path, f"its directory {path.absolute().parent} is not writable (SQLite needs it)")
        return path
    return check_output_file(flag, path)  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------- inputs and outputs
def _real(path: Path | str) -> Path:
    return Path(os.path.realpath(Path(path).expanduser()))


def _inside(inner: Path, outer: Path) -> bool:
    return inner == outer or outer in inner.parents


def check_apart(flag: str, out: Path | str, inputs: Iterable[tuple[str, Path | str]], written: Iterable[str] = ()
                ) -> None:
    """The output folder ``out`` is not, and does not lie inside, an input folder; and no input is, or lies inside,
    something the command writes there (``written``: names inside ``out``, files or folders).

    Inputs that are not paths on this machine (built-in model names) are skipped; links are resolved.

    Parameters
    ----------
    flag : str
        The output's flag (``--out``).
    out : path
    inputs : iterable of (flag, path)
    written : iterable of str
        What the command writes inside ``out``.

    Raises
    ------
    CLIError

    Examples
    --------
    >>> import tempfile, pathlib
    >>> tmp = pathlib.Path(tempfile.mkdtemp())
    >>> (tmp / "diag").mkdir()
    >>> check_apart("--out", tmp / "cmp", [("A", tmp / "diag")], ["heads.csv"])
    >>> check_apart("--out", tmp / "diag", [("A", tmp / "diag")], ["heads.csv"])
    Traceback (most recent call last):
    attnspec.cli._errors.CLIError: --out .../diag: is the input A (.../diag): an output folder must be apart from the ...
    >>> check_apart("--out", tmp, [("A", tmp / "diag")], ["diag"])
    Traceback (most recent call last):
    attnspec.cli._errors.CLIError: --out ...: would write .../diag, which holds the input A (...): ...
    """
    o = _real(out)
    targets = [_real(o / w) for w in written]
    for what, x in inputs:
        if x is None or not Path(x).expanduser().exists():
            continue
        i = _real(x)
        if _inside(o, i):
            where = "is" if o == i else "lies inside"
            raise CLIError(flag, out, f"{where} the input {what} ({x}): an output folder must be apart from the "
                                      "command's inputs (it would overwrite them); choose another folder")
        for t in targets:
            if _inside(i, t):
                raise CLIError(flag, out, f"would write {t}, which holds the input {what} ({x}): choose another "
                                          "folder")


@contextlib.contextmanager
def output_lock(flag: str, out: Path | str) -> Iterator[Path]:
    """Hold the lock of the output folder ``out`` for a whole command (:class:`attnspec.atomicio.DirectoryLock`):
    a second command writing the same folder at the same time is refused at once (a :class:`CLIError`) instead of
    mixing its files with this one's. A folder the lock created and nothing was written into is removed after.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp(), "o")
    >>> with output_lock("--out", out) as d:
    ...     _ = (d / "f.txt").write_text("x")
    >>> sorted(p.name for p in out.iterdir())
    ['f.txt']
    """
    from ..atomicio import DirectoryBusy, DirectoryLock
    lock = DirectoryLock(out)
    try:
        lock.acquire()
    except DirectoryBusy as busy:
        who = f" (process {busy.pid})" if busy.pid else ""
        raise CLIError(flag, out, f"another attnspec run{who} is writing into this folder; wait for it to end or "
                                  "choose another folder") from None
    try:
        yield Path(out)
    finally:
        lock.release()
