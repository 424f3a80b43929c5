"""Output files written whole or not at all: :class:`StagedFiles`.

Each file is first written to a temporary name in its final directory (``.<name>.<random>.tmp``, created
exclusively, so an existing file or symlink of that name is never opened), and renamed into place only
when every file of the set has been written. A failure while writing (a full disk, an error, an
interrupt) removes the temporary files and leaves the directory as it was; a rename replaces a symlink
at the final name by the file (the symlink's target is never written). The ``last`` file (a summary) is
removed before the first rename and renamed last, so a directory with that file is complete; ``stale``
names of an earlier run's files that this set does not write are removed with it.

Two processes writing one directory at once (two runs given the same ``--out``) never leave it mixing their
files: every commit holds the directory's lock (:class:`DirectoryLock`, ``.attnspec.lock`` inside it, an
advisory ``flock``), and a command holds it for its whole run, so that a second run into the same folder is
refused at once (:class:`DirectoryBusy`, naming the process that holds it) instead of interleaving its
files with the first's. The lock file is removed when the lock is released.
"""
from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no advisory locks (each commit stays atomic by renames)
    fcntl = None  # type: ignore[assignment]

__all__ = ["StagedFiles", "write_text", "DirectoryLock", "DirectoryBusy", "LOCK_NAME"]

#: The lock file of a directory being written (:class:`DirectoryLock`).
LOCK_NAME = ".attnspec.lock"
#: Seconds a commit waits for another process's commit into the same directory (commits take milliseconds).
COMMIT_WAIT_S = 30.0


class DirectoryBusy(ValueError):
    """Another process holds the lock of a directory (writes into it); the message is one line naming the
    directory and, when known, the process.

    Examples
    --------
    >>> str(DirectoryBusy("out", 123))
    'out: another attnspec run (process 123) is writing into this folder; wait for it to end or choose another folder'
    """

    def __init__(self, directory, pid: int | None = None):
        self.directory, self.pid = directory, pid
        who = f" (process {pid})" if pid else ""
        super().__init__(f"{directory}: another attnspec run{who} is writing into this folder; wait for it to end "
                         "or choose another folder")


_HELD: dict[str, list] = {}        # realpath -> [fd, count]: re-entrant within this process
_HELD_GUARD = threading.Lock()


class DirectoryLock:
    """An exclusive advisory lock on ``directory`` between processes (``.attnspec.lock`` inside it, removed on
    release), re-entrant within one process.

    Parameters
    ----------
    directory : str or pathlib.Path
        Created if missing; when this lock created it and it is still empty on release, it is removed (a refused
        or failed run leaves no empty folder behind).
    wait : float
        Seconds to wait for another process to release it; 0 refuses at once. Then :class:`DirectoryBusy`.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()) / "out"
    >>> with DirectoryLock(d):
    ...     with DirectoryLock(d):                 # the same process may take it again
    ...         sorted(p.name for p in d.iterdir())
    ['.attnspec.lock']
    >>> d.exists()                                 # created by the lock, still empty: removed
    False
    """

    def __init__(self, directory: str | os.PathLike, wait: float = 0.0):
        self.dir = Path(directory)
        self.wait = float(wait)
        self._key: str | None = None
        self._created = False

    def __enter__(self) -> "DirectoryLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def acquire(self) -> None:
        if not self.dir.is_dir():
            self._created = True
            self.dir.mkdir(parents=True, exist_ok=True)
        key = os.path.realpath(self.dir)
        with _HELD_GUARD:
            if key in _HELD:
                _HELD[key][1] += 1
                self._key = key
                return
        if fcntl is None:
            fd = -1
        else:
            fd = self._lock(Path(key) / LOCK_NAME)
        with _HELD_GUARD:
            _HELD[key] = [fd, 1]
        self._key = key

    def _lock(self, path: Path) -> int:
        deadline = time.monotonic() + self.wait
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                pid = _read_pid(fd)
                os.close(fd)
                if time.monotonic() >= deadline:
                    raise DirectoryBusy(self.dir, pid) from None
                time.sleep(0.05)
                continue
            try:                     # the holder before us may have removed the file: lock the one at the path
                same = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                os.ftruncate(fd, 0)
                os.write(fd, str(os.getpid()).encode())
                return fd
            os.close(fd)

    def release(self) -> None:
        key, self._key = self._key, None
        if key is None:
            return
        with _HELD_GUARD:
            entry = _HELD[key]
            entry[1] -= 1
            if entry[1] > 0:
                return
            del _HELD[key]
        fd = entry[0]
        if fd >= 0:
            try:
                os.unlink(Path(key) / LOCK_NAME)
            except FileNotFoundError:
                pass
            os.close(fd)
        if self._created:
            try:
                self.dir.rmdir()      # only when empty
            except OSError:
                pass


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        return int(text) if text.isdigit() else None
    except (OSError, AttributeError):
        return None


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
        with DirectoryLock(self.dir, wait=COMMIT_WAIT_S):
            return self._commit()

    def _commit(self) -> list[Path]:
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
