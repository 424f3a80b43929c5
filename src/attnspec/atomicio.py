"""Output files written whole or not at all: :class:`StagedFiles`.

Each file is first written to a temporary name in its final directory (``.<name>.<random>.tmp``, created
exclusively, so an existing file or symlink of that name is never opened), and renamed into place only
when every file of the set has been written. A failure while writing (a full disk, an error, an
interrupt) removes the temporary files and leaves the directory as it was; a rename replaces a symlink
at the final name by the file (the symlink's target is never written). The ``last`` file (a summary) is
removed before the first rename and renamed last, so a directory with that file is complete; ``stale``
names of an earlier run's files that this set does not write are removed with it.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["StagedFiles", "write_text"]


class StagedFiles:
    """A set of files of ``directory`` written to temporary names and renamed into place together.

    Parameters
    ----------
    directory : str or pathlib.Path
        Created if missing.
    last : str, optional
        The name renamed last (and removed first when this set writes it).
    stale : iterable of str
        Names of files an earlier run may have left here: those this set does not write are removed when it
        is committed (a symlink is removed, never followed).

    Use as a context manager: on a clean exit the files are committed (:meth:`commit`), on an exception the
    temporary files are removed (:meth:`discard`).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "old.parquet").write_text("from an earlier run")
    >>> with StagedFiles(d, last="summary.json", stale=("old.parquet",)) as st:
    ...     _ = st.path("summary.json").write_text("{}")
    ...     _ = st.path("table.csv").write_text("a,b")
    ...     sorted(p.name for p in d.iterdir() if not p.name.startswith("."))    # nothing in place yet
    ['old.parquet']
    >>> sorted(p.name for p in d.iterdir())
    ['summary.json', 'table.csv']
    >>> import shutil; shutil.rmtree(d)
    """

    def __init__(self, directory: str | os.PathLike, last: str | None = None, stale=()):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.last, self.stale = last, tuple(stale)
        self.items: dict[str, Path] = {}

    def path(self, name: str) -> Path:
        """A new temporary file in the directory that becomes ``name`` on :meth:`commit`."""
        if not name or Path(name).name != name:
            raise ValueError(f"{name!r}: a file name inside the directory, without a folder")
        if name in self.items:
            return self.items[name]
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=self.dir)
        try:
            os.fchmod(fd, 0o666 & ~_umask())      # as open() would create it (mkstemp makes it 0600)
        except (AttributeError, OSError):
            pass
        os.close(fd)
        self.items[name] = Path(tmp)
        return self.items[name]

    def commit(self) -> list[Path]:
        """Rename every temporary file into place (``last`` last, removed first) and remove the stale names;
        the final paths in the order written."""
        order = [n for n in self.items if n != self.last] + [n for n in self.items if n == self.last]
        if self.last in self.items:
            _remove(self.dir / self.last)
        out = []
        for name in order:
            if name == self.last:
                for old in self.stale:
                    if old not in self.items:
                        _remove(self.dir / old)
            os.replace(self.items[name], self.dir / name)
            out.append(self.dir / name)
        if self.last not in self.items:
            for old in self.stale:
                if old not in self.items:
                    _remove(self.dir / old)
        self.items.clear()
        return out

    def discard(self) -> None:
        """Remove the temporary files (nothing is renamed)."""
        for tmp in self.items.values():
            try:
                tmp.unlink()
            except FileNotFoundError:
                pass
        self.items.clear()

    def __enter__(self) -> "StagedFiles":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            try:
                self.commit()
            finally:
                self.discard()
        else:
            self.discard()


_UMASK: list[int] = []


def _umask() -> int:
    if not _UMASK:
        mask = os.umask(0o022)
        os.umask(mask)
        _UMASK.append(mask)
    return _UMASK[0]


def _remove(path: Path) -> None:
    """Remove a file or a symlink (not its target); a directory is left alone."""
    if path.is_symlink() or path.is_file():
        try:
            path.unlink()
        except FileNotFoundError:
            pass


def write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` through a temporary file renamed into place (see module docstring).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp(), "sub", "a.txt")
    >>> write_text(p, "hello").read_text()
    'hello'
    >>> import shutil; shutil.rmtree(p.parent.parent)
    """
    path = Path(path)
    with StagedFiles(path.parent) as st:
        st.path(path.name).write_text(text, encoding=encoding)
    return path
