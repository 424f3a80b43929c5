"""What the first forward pass recorded, kept on disk for the second pass instead of running the model again.

The fit (step 2) must see the whole corpus before the spectra (step 3) can use it, so a diagnosis
reads every batch twice. On a CPU the second forward pass costs as much as the first; writing the
recorded attention inputs (queries, keys after the position encoding, values and the allowed set, in
the model's own dtype) to a temporary directory and reading them back costs a fraction of that, and
gives bit-identical inputs. Nothing of it stays in memory: RAM does not grow with the corpus, and a batch is
read back memory-mapped, so a layer's queries and keys are paged in only when that layer is processed and
released with it (the spectra step holds a few layers' inputs, not the whole model's). The
directory is removed when the cache is closed (also on error); once the cache holds its byte budget
(default :data:`MAX_BYTES`, at most half the free disk space) further batches are not kept and are
recomputed by a forward pass.

A batch is one file of raw bytes: each tensor's storage span (strides kept, so the recomputed attention
rows are bit-identical, whatever the layout the model gave its queries and keys), no serialization
format and no checksum. The file is written during the first forward pass itself, one layer's record at a
time as the model makes it (:class:`BatchWriter`), and the fit step reads the batch back memory-mapped like the
spectra step: the first pass, too, holds one layer's recorded inputs at a time instead of every layer's
(for SmolLM2 at 4,096 tokens, 15 MB instead of 450 MB). A failed write (a full disk) keeps the rest of the
batch in memory and the batch is not kept.

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


#: Record entries that layers may share (the same mask or bias tensor for every layer): written once a batch.
_SHARED = ("allowed", "position_bias")


class BatchWriter:
    """One batch's records written to its file one record at a time, as the forward pass makes them
    (:meth:`ForwardCache.writer`, :func:`.collect.record`'s ``sink``), so that the recorded inputs of one layer
    are in memory at a time.

    Each tensor's storage span goes to the next aligned place of the file. Entries that layers share
    (:data:`_SHARED`: the allowed set and a position bias, the same tensor for many layers) are written once and
    referenced after (the writer holds those few tensors, so that their storage stays theirs); queries, keys
    and values are written every time. A failed write (a full disk) keeps that record and the later ones in
    memory instead, and the batch is not kept (:meth:`ForwardCache.finish`).
    """

    def __init__(self, path: str):
        self.path, self.size = path, 0
        self.meta: dict[int, dict] = {}        # site index -> the record's non-tensor entries
        self.layout: dict[int, dict] = {}      # site index -> {name: (offset, count, dtype, shape, stride)}
        self.memory: dict[int, object] = {}    # site index -> record kept in memory after a failed write
        self._shared: dict = {}                # storage key -> (offset, the tensor)
        self._file = open(path, "wb")

    def add(self, i: int, record) -> None:
        """Write the record of site ``i`` (an :class:`AttentionCall` or a dict of tensors)."""
        if self._file is None:
            self.memory[i] = record
            return
        plain = _to_plain(record)
        try:
            where = {k: self._place(k, v) for k, v in plain.items() if isinstance(v, torch.Tensor)}
        except OSError:                        # e.g. the disk is full: this record and the later ones stay in memory
            self._file.close()
            self._file = None
            self.memory[i] = record
            return
        self.meta[i] = {k: v for k, v in plain.items() if not isinstance(v, torch.Tensor)}
        self.layout[i] = where

    def _place(self, name: str, v: torch.Tensor) -> tuple:
        first, n = _span(v)
        key = (v.untyped_storage().data_ptr(), first, n, v.dtype, tuple(v.shape), tuple(v.stride()))
        if name in _SHARED and key in self._shared:
            pos = self._shared[key][0]
        else:
            pos = self.size
            if n:
                flat = torch.empty(0, dtype=v.dtype).set_(v.untyped_storage(), first, (n,), (1,))
                self._file.seek(pos)
                self._file.write(memoryview(flat.view(torch.uint8).numpy()))
            self.size += -(-n * v.element_size() // _ALIGN) * _ALIGN
            if name in _SHARED:
                self._shared[key] = (pos, v)
        return (pos, n, v.dtype, tuple(v.shape), tuple(v.stride()))

    def close(self) -> bool:
        """Flush and close the file; whether every record was written."""
        ok = self._file is not None
        if ok:
            self._file.close()
            self._file = None
        self._shared.clear()
        return ok and not self.memory

    def records(self, n: int) -> list:
        """The records of sites ``0..n-1``, written ones memory-mapped from the file, the others from memory."""
        idx = range(n)
        written = [i for i in idx if i in self.layout]
        back = dict(zip(written, _read(self.path, [self.meta[i] for i in written], [self.layout[i] for i in written])))
        return [back[i] if i in back else self.memory[i] for i in idx]


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
        self.paths: dict = {}            # key -> (path, non-tensor entries per record, layout)
        self._files = 0

    def writer(self, key) -> BatchWriter | None:
        """A :class:`BatchWriter` for the batch ``key`` while the cache holds less than its budget (the batch may
        take it past the budget), else ``None``."""
        if self.used >= self.max_bytes or key in self.paths:
            return None
        self._files += 1
        return BatchWriter(os.path.join(self.dir, f"{self._files}.bin"))

    def finish(self, key, writer: BatchWriter, n: int) -> list:
        """Close ``writer`` and return its ``n`` records (sites ``0..n-1``, memory-mapped); the batch is kept under
        ``key`` when every record was written."""
        if writer.close():
            self.paths[key] = (writer.path, [writer.meta[i] for i in range(n)], [writer.layout[i] for i in range(n)])
            self.used += writer.size
        return writer.records(n)

    def put(self, key, records: list) -> bool:
        """Keep ``records`` (a batch's, in site order) under ``key`` if the budget allows; returns whether they
        are kept."""
        size = sum(-(-_span(v)[1] * v.element_size() // _ALIGN) * _ALIGN
                   for r in records for v in _to_plain(r).values() if isinstance(v, torch.Tensor))
        w = self.writer(key) if self.used + size <= self.max_bytes else None   # upper bound: shared entries once
        if w is None:
            return False
        for i, r in enumerate(records):
            w.add(i, r)
        self.finish(key, w, len(records))
        return key in self.paths

    def get(self, key) -> list | None:
        """The records kept under ``key`` (tensors on the CPU, memory-mapped), or ``None``."""
        entry = self.paths.get(key)
        return None if entry is None else _read(*entry)

    def close(self) -> None:
        """Remove the directory."""
        shutil.rmtree(self.dir, ignore_errors=True)
        self.paths.clear()

    def __enter__(self) -> "ForwardCache":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
