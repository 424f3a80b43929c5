"""How :mod:`.distributed` deals batches and heads out to tasks (contiguous groups of about equal cost) and
submits them (:class:`_Run`: keys, priorities, task accounts).

Helpers of the cluster diagnosis only (nothing public): the parts keep the batches' order, so merging the
tasks' accumulators in task order gives the one-process sums. Tasks are *run* costliest first (ranked by
:func:`priority`, submitted in that order with Dask priorities in that order, :meth:`_Run.submit_all`),
so that the long tail of a step (the longest texts) starts at once rather than last, while they are
*merged* in task order.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from . import workers as wk
from .workers import ModelSpec

__all__: list[str] = []


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


def priority(batches: Sequence[dict], n_heads: int = 1) -> int:
    """The work of a task on ``batches`` that ranks it (higher runs first): ``n_heads x sum B L^2``, the
    per-token cost of attention and of the per-head statistics growing with the length ``L``."""
    return int(max(1, n_heads) * sum(int(b["attention_mask"].numel()) * int(b["attention_mask"].shape[-1])
                                     for b in batches))


def removal_jobs(rm_batches: list, n_heads: list, heads_of: dict | None, n: int, max_tokens: int,
                 n_fine: int | None = None) -> list:
    """``(batches, heads_of)`` of the exact-removal tasks: about ``n`` of them, or up to ``n_fine``.

    With at least ``n`` removal batches: up to ``n_fine`` (default ``n``) groups of batches, every chosen
    head (a batch's heads share its prefix forward pass, so batches are never split). With fewer (a large model
    on few texts): one batch per task and the batch's chosen heads split into ``(layer, head block)``
    units, a block being the ``K`` heads that one suffix forward pass removes together (so every pass
    is the one-process pass), units grouped by cost (suffix depth x heads)."""
    if len(rm_batches) >= n:
        return [(g, heads_of) for g in groups(rm_batches, max(n, n_fine or n))]
    per, jobs = -(-n // len(rm_batches)), []
    for b in rm_batches:
        B, L = b["attention_mask"].shape
        units = []
        for i, H in enumerate(n_heads):
            chosen = list(range(H)) if heads_of is None else sorted(heads_of.get(i, ()))
            K = max(1, min(H, max_tokens // max(1, int(B) * int(L))))
            units += [(i, chosen[h:h + K]) for h in range(0, len(chosen), K)]
        for part in split_by_cost(units, [len(hs) * (len(n_heads) - i) for i, hs in units], per):
            ho: dict = {}
            for i, hs in part:
                ho.setdefault(i, []).extend(hs)
            jobs.append(([b], ho))
    return jobs


@dataclass
class _Run:
    """One diagnosis on a client: its id, model, options and the task bookkeeping."""

    client: Any
    spec: ModelSpec
    opts: dict
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:10])
    counts: dict = field(default_factory=dict)

    def submit(self, step: str, fn: Callable, *args, torch_threads: int | None = None, **kw):
        """Submit ``fn`` as the next task of ``step``; its key numbers the step's tasks in submission order
        over all the step's stages (an adaptive removal submits more removal tasks later), so keys stay
        unique. ``torch_threads`` overrides the run's for this task."""
        n = self.counts.get(step, 0)
        self.counts[step] = n + 1
        threads = torch_threads or self.opts["torch_threads"]
        return self.client.submit(wk.in_task, self.spec, threads, (self.run_id, step), fn, *args,
                                  key=f"attnspec-{step}-{n}-{self.run_id}", pure=False, **kw)

    def submit_all(self, step: str, fn: Callable, calls: list, urgency: int = 0) -> list:
        """``fn(*args, **kw)`` for each ``(cost, args, kw)`` of ``calls`` as tasks of ``step``, the costliest
        first: submitted in that order (a worker starts a task as soon as it arrives) with Dask priorities
        in that order, above every task of a lower ``urgency`` (those wait in the queue, behind). The
        futures in the order of ``calls``."""
        order = sorted(range(len(calls)), key=lambda k: -calls[k][0])
        futs: list = [None] * len(calls)
        for rank, k in enumerate(order):
            _, args, kw = calls[k]
            futs[k] = self.submit(step, fn, *args, priority=urgency * 10 ** 9 + len(calls) - rank, **kw)
        return futs

    def task_times(self) -> dict:
        """``step -> {'tasks', 'wall_s', 'cpu_s'}`` summed over the workers that are still there (CPU
        over wall below 1: the tasks' threads did not get a whole core)."""
        out: dict = {}
        for per_worker in self.client.run(wk.pop_times, self.run_id, on_error="ignore").values():
            if not isinstance(per_worker, dict):
                continue
            for step, (n, wall, cpu) in per_worker.items():
                o = out.setdefault(step, {"tasks": 0, "wall_s": 0.0, "cpu_s": 0.0})
                o["tasks"], o["wall_s"], o["cpu_s"] = o["tasks"] + n, o["wall_s"] + wall, o["cpu_s"] + cpu
        return {k: {"tasks": v["tasks"], "wall_s": round(v["wall_s"], 3), "cpu_s": round(v["cpu_s"], 3)}
                for k, v in out.items()}

    def gather(self, futures: list, desc: str) -> list:
        """Results in submission order (a progress bar over completions when asked)."""
        if self.opts["progress"]:
            from distributed import as_completed
            from tqdm.auto import tqdm
            for _ in tqdm(as_completed(futures), total=len(futures), desc=desc, leave=False):
                pass
        return self.client.gather(futures)


def _threads(client) -> int:
    """Worker threads of the cluster now."""
    info = client.scheduler_info(n_workers=-1)["workers"]
    return max(1, sum(int(w.get("nthreads", 1)) for w in info.values()))
