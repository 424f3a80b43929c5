"""What the first forward pass recorded, kept on disk for the second pass instead of running the model again.

The fit (step 2) must see the whole corpus before the spectra (step 3) can use it, so a diagnosis
reads every batch twice. On a CPU the second forward pass costs as much as the first; writing the
recorded attention inputs (queries, keys after the position encoding, values and the allowed set, in
the model's own dtype) to a temporary directory and reading them back costs a fraction of that, and
gives bit-identical inputs. Nothing of it stays in memory: RAM does not grow with the corpus, and a batch is
read back memory-mapped, so a layer's queries and keys are paged in only when that layer is processed and
released with it (the spectra step holds a few layers' inputs, not the whole model's). The
directory is removed when the cache is closed (also on error); a batch that would exceed the byte
budget (default :data:`MAX_BYTES`, at most half the free disk space) is simply not kept and is
recomputed by a forward pass.

A batch is one file of raw bytes: each tensor's storage span (strides kept, so the recomputed attention
rows are bit-identical, whatever the layout the model gave its queries and keys), no serialization
format and no checksum. The file is written by a background thread while the layers of that batch
are processed; :meth:`ForwardCache.get` waits for it (a failed write is a batch not kept).

On an accelerator the forward pass is cheap next to the transfer, so :func:`wanted` turns the cache
off there unless asked for.

Debris: the directory holds an ``owner`` file (host name and process id). The command line removes the
directory on SIGINT and SIGTERM (the exception unwinds through :meth:`ForwardCache.close`); after a
SIGKILL or the OOM killer it stays, so the first cache a process creates removes the stale caches of
the same parent directory (:func:`remove_stale`): those whose owner is a process of this host that no
longer runs, and those older than :data:`STALE_AGE_S` whose owner cannot be checked (another host, or
no owner file).
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from ...models.attention_calls import AttentionCall

__all__ = ["remove_stale_beside", "ForwardCache", "MAX_BYTES", "wanted", "remove_stale", "STALE_AGE_S"]

#: Default byte budget of one diagnosis' cache on disk.
MAX_BYTES = 8 * 2 ** 30
#: Prefix of a cache directory; the owner file inside it.
PREFIX = "attnspec-forward-"
OWNER = "owner"
#: A cache whose owner cannot be checked is stale after this many seconds (longer than any diagnosis' run).
STALE_AGE_S = 7 * 24 * 3600
_CLEANED: set = set()          # parent directories already cleaned by this process


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:      # another user's live process
        return True
    return True


def remove_stale(parent: str | None = None, max_age_s: float = STALE_AGE_S) -> list[str]:
    """Remove the stale forward caches under ``parent`` (default: the temporary directory); the removed paths.

    A cache is stale when its ``owner`` file names a process of this host that no longer runs, or when its
    owner cannot be checked (another host, an unreadable or missing owner file) and it was last modified more
    than ``max_age_s`` seconds ago. The caches of running processes are never touched.

    Examples
    --------
    >>> import tempfile, os, pathlib
    >>> parent = tempfile.mkdtemp()
    >>> live = ForwardCache(directory=parent)                                 # this process' cache
    >>> dead = pathlib.Path(parent, PREFIX + "dead"); dead.mkdir()
    >>> _ = (dead / OWNER).write_text(f"{socket.gethostname()} 999999999")      # no such process
    >>> remove_stale(parent) == [str(dead)], os.path.isdir(live.dir)
    (True, True)
    >>> live.close()
    """
    parent = parent or tempfile.gettempdir()
    host, removed = socket.gethostname(), []
    try:
        entries = [e for e in os.scandir(parent) if e.name.startswith(PREFIX)]
    except OSError:
        return removed
    now = time.time()
    for e in entries:
        try:
            if not e.is_dir(follow_symlinks=False):
                continue
            try:
                with open(os.path.join(e.path, OWNER), encoding="utf-8") as f:
                    owner_host, pid = f.read().split()
                checkable = owner_host == host
                stale = checkable and not _alive(int(pid))
            except (OSError, ValueError):
                checkable, stale = False, False
            if not checkable:
                stale = now - e.stat(follow_symlinks=False).st_mtime > max_age_s
            if stale:
                shutil.rmtree(e.path, ignore_errors=True)
                removed.append(e.path)
        except OSError:
            continue
    return removed


def remove_stale_beside(directory: str, max_age_s: float = STALE_AGE_S) -> list[str]:
    """:func:`remove_stale` in every folder beside ``directory`` (a Dask worker's scratch folder: its siblings are
    the other workers' folders, where a worker killed by SIGKILL or the OOM killer left its cache).

    Examples
    --------
    >>> import tempfile, os, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> mine, dead_worker = root / "worker-a", root / "worker-b"
    >>> mine.mkdir(); dead_worker.mkdir()
    >>> left = dead_worker / (PREFIX + "x"); left.mkdir()
    >>> _ = (left / OWNER).write_text(f"{socket.gethostname()} 999999999")      # its process is gone
    >>> remove_stale_beside(str(mine)) == [str(left)]
    True
    """
    removed: list[str] = []
    try:
        siblings = [e.path for e in os.scandir(os.path.dirname(os.path.abspath(directory))) if e.is_dir()]
    except OSError:
        return removed
    for s in siblings:
        removed += remove_stale(s, max_age_s)
    return removed


def wanted(adapter, reuse_forward: bool | None) -> bool:
    """Whether to keep the first forward pass on disk: ``reuse_forward`` when given, else True for a model
    whose parameters are on the CPU.

    Parameters
    ----------
    adapter : ModelAdapter
    reuse_forward : bool or None
        The caller's choice (``None``: decide by the model's device).

    Returns
    -------
    bool

    Examples
    --------
    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> ad, _ = tiny_causal_lm()
    >>> wanted(ad, None), wanted(ad, False)
    (True, False)
    """
    if reuse_forward is not None:
        return bool(reuse_forward)
    p = next(adapter.model.parameters(), None)
    return p is None or p.device.type == "cpu"


_ALIGN = 64     # byte alignment of each tensor in a batch file


def _span(t: torch.Tensor) -> tuple[int, int]:
    """``(first, count)``: the elements of ``t``'s storage that ``t`` reaches (its strides kept)."""
    if t.numel() == 0:
        return t.storage_offset(), 0
    last = t.storage_offset() + sum((n - 1) * st for n, st in zip(t.shape, t.stride()))
    return t.storage_offset(), last - t.storage_offset() + 1


def _to_plain(r) -> dict:
    if isinstance(r, AttentionCall):
        d = {f.name: getattr(r, f.name) for f in dataclasses.fields(r) if f.name != "module"}
        d["kind"] = "call"
    else:
        d = dict(r, kind="weights")
    return {k: v.detach().cpu() if isinstance(v, torch.Tensor) else v for k, v in d.items()}


def _layout(plain: list[dict]) -> tuple[list, int]:
    """Where each tensor goes in the batch file: per record ``{name: (offset, count, dtype, shape, stride)}``
    (``count`` storage elements from ``offset`` bytes, :func:`_span`) and the file size. Tensors that are the
    same view of the same storage (e.g. a mask shared by every layer) share one place, written once."""
    out, pos, seen = [], 0, {}
    for d in plain:
        where = {}
        for k, v in d.items():
            if isinstance(v, torch.Tensor):
                first, n = _span(v)
                key = (v.untyped_storage().data_ptr(), first, n, v.dtype, tuple(v.shape), tuple(v.stride()))
                if key not in seen:
                    seen[key] = pos
                    pos += -(-n * v.element_size() // _ALIGN) * _ALIGN
                where[k] = (seen[key], n, v.dtype, tuple(v.shape), tuple(v.stride()))
        out.append(where)
    return out, pos


def _write(path: str, plain: list[dict], layout: list) -> None:
    """The storage span of every tensor, as raw bytes at its offset (no serialization, no checksum)."""
    done = set()
    with open(path, "wb") as f:
        for d, where in zip(plain, layout):
            for k, (pos, n, _, _, _) in where.items():
                if pos in done:
                    continue
                done.add(pos)
                v = d[k]
                flat = torch.empty(0, dtype=v.dtype).set_(v.untyped_storage(), _span(v)[0], (n,), (1,))
                f.seek(pos)
                f.write(memoryview(flat.view(torch.uint8).numpy()))


def _read(path: str, meta: list[dict], layout: list) -> list:
    """The records of a batch file, each tensor a view of its own memory map of the file (so a layer's pages
    are unmapped when its record is freed) with its original strides; shared places map once."""
    out, maps = [], {}
    for d, where in zip(meta, layout):
        r = dict(d)
        for k, (pos, n, dtype, shape, stride) in where.items():
            if pos not in maps:
                nb = n * torch.empty(0, dtype=dtype).element_size()
                maps[pos] = (torch.from_numpy(np.memmap(path, mode="c", dtype=np.uint8, offset=pos, shape=(nb,)))
                             .view(dtype) if n else torch.empty(0, dtype=dtype))
            r[k] = maps[pos].as_strided(shape, stride)
        out.append(_from_plain(r))
    return out


def _from_plain(d: dict):
    kind = d.pop("kind")
    return AttentionCall(module=None, **d) if kind == "call" else d


class ForwardCache:
    """Records of :func:`.collect.record` per batch key, on disk.

    Parameters
    ----------
    max_bytes : int
        Budget; batches beyond it are not kept (:meth:`get` then returns ``None``).
    directory : str, optional
        Parent of the temporary directory (default: the system's temporary directory).

    Use as a context manager, or call :meth:`close`.

    Examples
    --------
    The records read back give the same attention weights as the forward pass:

    >>> import torch
    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> ad, batch = tiny_causal_lm()                               # 2 layers, 2 heads, 2 texts of 6 tokens
    >>> from attnspec.diagnostics.pipeline.collect import layer_batches, record
    >>> recs = record(ad, batch)
    >>> with ForwardCache() as cache:
    ...     kept = cache.put(tuple(batch["order"]), recs)
    ...     back = layer_batches(ad, batch, cache.get((0, 1)))
    ...     missing = cache.get((2, 3))
    >>> kept, missing, torch.equal(back[1].weights_of(slice(0, 6)), layer_batches(ad, batch, recs)[1].weights_of(slice(0, 6)))
    (True, None, True)
    >>> with ForwardCache(max_bytes=0) as cache:                  # over budget: not kept, recomputed later
    ...     cache.put((0, 1), recs)
    False
    """

    def __init__(self, max_bytes: int = MAX_BYTES, directory: str | None = None):
        parent = directory or tempfile.gettempdir()
        if parent not in _CLEANED:         # once per process and parent: caches left by killed runs
            _CLEANED.add(parent)
            remove_stale(parent)
        self.dir = tempfile.mkdtemp(prefix=PREFIX, dir=directory)
        with open(os.path.join(self.dir, OWNER), "w", encoding="utf-8") as f:
            f.write(f"{socket.gethostname()} {os.getpid()}")
        self.max_bytes = min(int(max_bytes), shutil.disk_usage(self.dir).free // 2)
        self.used = 0
        self.paths: dict = {}            # key -> (path, non-tensor entries per record, layout, write)
        self._writer: ThreadPoolExecutor | None = None

    def put(self, key, records: list) -> bool:
        """Keep ``records`` under ``key`` if the budget allows (written in the background); returns whether
        they are kept."""
        plain = [_to_plain(r) for r in records]
        layout, size = _layout(plain)
        if self.used + size > self.max_bytes:
            return False
        path = os.path.join(self.dir, f"{len(self.paths)}.bin")
        if self._writer is None:
            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="attnspec-cache")
        meta = [{k: v for k, v in d.items() if not isinstance(v, torch.Tensor)} for d in plain]
        self.paths[key] = (path, meta, layout, self._writer.submit(_write, path, plain, layout))
        self.used += size
        return True

    def get(self, key) -> list | None:
        """The records kept under ``key`` (tensors on the CPU, memory-mapped), or ``None``."""
        entry = self.paths.get(key)
        if entry is None:
            return None
        path, meta, layout, written = entry
        if written.exception() is not None:      # waits for the write; a failed one: recompute the batch
            return None
        return _read(path, meta, layout)

    def close(self) -> None:
        """Wait for pending writes, then remove the directory."""
        if self._writer is not None:
            self._writer.shutdown(wait=True, cancel_futures=True)
            self._writer = None
        shutil.rmtree(self.dir, ignore_errors=True)
        self.paths.clear()

    def __enter__(self) -> "ForwardCache":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
