"""Executors: where the tasks of a diagnosis (:mod:`.tasks`) run. The step sequence (:mod:`.run`) is written
once against this small interface; :class:`LocalExecutor` runs it in this process and
:class:`.dask_executor.DaskExecutor` on a Dask cluster. Every task is a pure function of its arguments, so both
give the same tables (to the order of float64 sums: 1e-9), as Dask's schedulers compute the same graph.

The interface (a task is ``fn(adapter, *args)``; a *handle* is what ``submit`` returns, a result to come):

* ``groups(batches)``: the batches cut into the groups that tasks take (one group in this process);
* ``removal_jobs(rm_batches, n_heads, heads_of, max_tokens)``: ``(batches, heads_of)`` of the exact-removal tasks;
* ``map(step, fn, calls, urgency)``: one task per ``(cost, args, where)`` of ``calls``; the handles in order
  (``cost`` ranks tasks, costliest first; ``where``: the worker preferred, or ``None``; arguments may be
  handles of earlier tasks, passed on as their results);
* ``reduce(step, fn, handles)``: ``fn(results)`` without the model (e.g. the merged Gram sums);
* ``submit(step, fn, *args)``: one task;
* ``gather(handles, desc)``: the results, in order;
* ``concurrent``: whether submitted tasks run while the caller goes on (a cluster) or only when their
  results are asked for (this process);
* ``task_progress``: whether the tasks draw their own progress bars (this process) or ``gather`` draws one
  over completed tasks (a cluster);
* ``close()``: drop what the run kept (forward caches).
"""
from __future__ import annotations

import uuid
from typing import Any, Callable, Sequence

from . import tasks

__all__: list[str] = []        # internal: the pipeline's parts (the public API is attnspec.diagnose)


def priority(batches: Sequence[dict], n_heads: int = 1) -> int:
    """The work of a task on ``batches`` that ranks it (higher runs first): ``n_heads x sum B L^2``, the
    per-token cost of attention and of the per-head statistics growing with the length ``L``.

    Examples
    --------
    >>> import torch
    >>> priority([{"attention_mask": torch.ones(2, 8)}, {"attention_mask": torch.ones(4, 4)}], n_heads=3)
    576
    """
    return int(max(1, n_heads) * sum(int(b["attention_mask"].numel()) * int(b["attention_mask"].shape[-1])
                                     for b in batches))


def split_by_cost(items: Sequence, cost: Sequence[float], n: int) -> list[list]:
    """``items`` cut into ``min(n, len(items))`` contiguous non-empty parts, the ``k``-th cut where the
    running cost comes nearest to ``k / n`` of the total."""
    m = len(items)
    if m == 0:
        return []
    n = max(1, min(n, m))
    cum = [0.0]
    for c in cost:
        cum.append(cum[-1] + float(c))
    cuts = [0]
    for k in range(1, n):
        target = cum[-1] * k / n
        cuts.append(min(range(cuts[-1] + 1, m - (n - k) + 1), key=lambda j: abs(cum[j] - target)))
    cuts.append(m)
    return [list(items[a:b]) for a, b in zip(cuts[:-1], cuts[1:])]


def groups(batches: Sequence[dict], n: int) -> list[list[dict]]:
    """``batches`` in at most ``n`` contiguous groups of about equal padded size (``B x L``)."""
    return split_by_cost(batches, [int(b["attention_mask"].numel()) for b in batches], n)


class _Pending:
    """A task of :class:`LocalExecutor`, run when its result is first asked for (then kept)."""

    _UNSET = object()

    def __init__(self, fn: Callable, args: tuple):
        self.fn, self.args, self.value = fn, args, self._UNSET

    def result(self) -> Any:
        if self.value is self._UNSET:
            self.value = self.fn(*(_resolved(a) for a in self.args))
            self.fn = self.args = None
        return self.value


def _resolved(a: Any) -> Any:
    """``a`` with every handle (also inside a list or tuple) replaced by its result."""
    if isinstance(a, _Pending):
        return a.result()
    if isinstance(a, (list, tuple)) and any(isinstance(x, _Pending) for x in a):
        return type(a)(_resolved(x) for x in a)
    return a


class LocalExecutor:
    """The tasks in this process, on the caller's model: ``n_groups`` groups of batches (default one) and as
    many removal jobs, each task run when its result is first asked for (so a step's work happens in the order
    the sequence asks for it), with the passes' own progress bars when ``progress``.

    Examples
    --------
    >>> ex = LocalExecutor(adapter=None)
    >>> h = ex.submit("demo", lambda adapter, x: x + 1, 41)
    >>> ex.gather([h, ex.reduce("sum", sum, [h, h])], "demo")
    [42, 84]
    """

    concurrent = False

    def __init__(self, adapter: Any, progress: bool = False, n_groups: int = 1):
        self.adapter, self.task_progress, self.n_groups = adapter, progress, n_groups
        self.run_id = uuid.uuid4().hex[:10]
        self.counts: dict = {}

    def groups(self, batches: list) -> list[list]:
        return groups(batches, self.n_groups)

    def removal_jobs(self, rm_batches: list, n_heads: list, heads_of: dict | None, max_tokens: int) -> list:
        return [(g, heads_of) for g in groups(rm_batches, self.n_groups)]

    def submit(self, step: str, fn: Callable, *args) -> _Pending:
        self.counts[step] = self.counts.get(step, 0) + 1
        return _Pending(fn, (self.adapter,) + args)

    def map(self, step: str, fn: Callable, calls: list, urgency: int = 0) -> list[_Pending]:
        return [self.submit(step, fn, *args) for _, args, _ in calls]

    def reduce(self, step: str, fn: Callable, handles: list) -> _Pending:
        """``fn(results)`` at once (what it reduces is not kept past this call)."""
        done = _Pending(fn, ([h.result() for h in handles],))
        done.result()
        return done

    def gather(self, handles: list, desc: str) -> list:
        return [h.result() for h in handles]

    def close(self) -> None:
        tasks.drop_run_cache(self.run_id)
