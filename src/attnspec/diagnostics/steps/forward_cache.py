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

On an accelerator the forward pass is cheap next to the transfer, so :func:`wanted` turns the cache
off there unless asked for.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile

import torch

from ...models.attention_calls import AttentionCall

__all__ = ["ForwardCache", "MAX_BYTES", "wanted"]

#: Default byte budget of one diagnosis' cache on disk.
MAX_BYTES = 8 * 2 ** 30


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


def _nbytes(rec: dict) -> int:
    return sum(v.numel() * v.element_size() for v in rec.values() if isinstance(v, torch.Tensor))


def _to_plain(r) -> dict:
    if isinstance(r, AttentionCall):
        d = {f.name: getattr(r, f.name) for f in dataclasses.fields(r) if f.name != "module"}
        d["kind"] = "call"
    else:
        d = dict(r, kind="weights")
    return {k: v.detach().cpu() if isinstance(v, torch.Tensor) else v for k, v in d.items()}


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
    >>> from attnspec.diagnostics.steps.collect import layer_batches, record
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
        self.dir = tempfile.mkdtemp(prefix="attnspec-forward-", dir=directory)
        self.max_bytes = min(int(max_bytes), shutil.disk_usage(self.dir).free // 2)
        self.used = 0
        self.paths: dict = {}

    def put(self, key, records: list) -> bool:
        """Keep ``records`` under ``key`` if the budget allows; returns whether they were kept."""
        plain = [_to_plain(r) for r in records]
        size = sum(_nbytes(d) for d in plain)
        if self.used + size > self.max_bytes:
            return False
        path = os.path.join(self.dir, f"{len(self.paths)}.pt")
        torch.save(plain, path)
        self.paths[key] = path
        self.used += size
        return True

    def get(self, key) -> list | None:
        """The records kept under ``key`` (tensors on the CPU), or ``None``."""
        path = self.paths.get(key)
        if path is None:
            return None
        return [_from_plain(d) for d in torch.load(path, weights_only=True, mmap=True)]

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        self.paths.clear()

    def __enter__(self) -> "ForwardCache":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
