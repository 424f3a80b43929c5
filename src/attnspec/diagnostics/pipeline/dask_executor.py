"""The Dask executor (:class:`DaskExecutor`, the interface of :mod:`.executor`): the tasks of the step sequence
(:mod:`.run`) as Dask tasks on the workers, each worker running them on its own copy of the model
(:class:`.dask_worker.ModelSpec`: the model is named, not shipped).

How batches and heads are dealt out: contiguous groups of about equal cost (:func:`.executor.groups`,
:func:`removal_jobs`), so that merging the tasks' accumulators in task order gives the one-process sums.
Tasks are *run* costliest first (ranked by :func:`.executor.priority`, submitted in that order with Dask
priorities in that order, :meth:`DaskExecutor.map`), so that the long tail of a step (the longest texts)
starts at once rather than last, while they are *merged* in task order. A step's tasks prefer the worker
that holds their inputs (the spectra: where the group was fitted, its forward records on that disk) and
are allowed elsewhere; a worker that dies costs only the tasks it ran or held (the scheduler reruns them).
"""
from __future__ import annotations

import uuid
from typing import Any, Callable

from . import dask_worker as wk
from .dask_worker import ModelSpec
from .executor import groups, split_by_cost

__all__: list[str] = []        # internal: the pipeline's parts (the public API is attnspec.diagnose)

#: Groups of batches per worker thread (more groups: finer load balance and a smaller loss when a
#: worker dies; each group costs one task and one accumulator transfer).
GROUPS_PER_THREAD = 4
#: Exact-removal tasks per worker thread, at most (removal is most of a diagnosis' work: finer tasks,
#: run longest first, leave less idle tail; a task's result is only a few numbers per head).
REMOVAL_JOBS_PER_THREAD = 16


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


class DaskExecutor:
    """The tasks of one diagnosis on the cluster of ``client``, each worker on its own copy of the model ``spec``.

    ``n_shards``: groups of batches per step and exact-removal tasks (default :data:`GROUPS_PER_THREAD` and
    :data:`REMOVAL_JOBS_PER_THREAD` per worker thread); ``torch_threads``: ``torch.set_num_threads`` in every
    task; ``progress``: a bar over each step's completed tasks. Task keys are
    ``attnspec-<step>-<n>-<run id>`` (the dashboard groups them by step)."""

    concurrent = True
    task_progress = False

    def __init__(self, client: Any, spec: ModelSpec, n_shards: int | None = None, torch_threads: int | None = None,
                 progress: bool = False):
        self.client, self.spec, self.n_shards, self.torch_threads = client, spec, n_shards, torch_threads
        self.progress = progress
        self.run_id = uuid.uuid4().hex[:10]
        self.counts: dict = {}
        self.n_threads = _threads(client)
        self._closed = False

    # --- dealing out
    def groups(self, batches: list) -> list[list]:
        return groups(batches, self.n_shards or GROUPS_PER_THREAD * self.n_threads)

    def removal_jobs(self, rm_batches: list, n_heads: list, heads_of: dict | None, max_tokens: int) -> list:
        n = self.n_shards or GROUPS_PER_THREAD * self.n_threads
        return removal_jobs(rm_batches, n_heads, heads_of, n, max_tokens,
                            self.n_shards or REMOVAL_JOBS_PER_THREAD * self.n_threads)

    # --- submitting
    def submit(self, step: str, fn: Callable, *args, torch_threads: int | None = None, **kw):
        """Submit ``fn`` as the next task of ``step``; its key numbers the step's tasks in submission order
        over all the step's stages (an adaptive removal submits more removal tasks later), so keys stay
        unique. ``torch_threads`` overrides the run's for this task."""
        n = self.counts.get(step, 0)
        self.counts[step] = n + 1
        threads = torch_threads or self.torch_threads
        return self.client.submit(wk.in_task, self.spec, threads, (self.run_id, step), fn, *args,
                                  key=f"attnspec-{step}-{n}-{self.run_id}", pure=False, **kw)

    def map(self, step: str, fn: Callable, calls: list, urgency: int = 0, strict: bool = False) -> list:
        """``fn(adapter, *args)`` for each ``(cost, args, where)`` of ``calls`` as tasks of ``step``, the costliest
        first: submitted in that order (a worker starts a task as soon as it arrives) with Dask priorities
        in that order, above every task of a lower ``urgency`` (those wait in the queue, behind); each on
        the worker ``where`` when given and still there, else anywhere (``strict``: only there). The futures
        in the order of ``calls``."""
        order = sorted(range(len(calls)), key=lambda k: -calls[k][0])
        futs: list = [None] * len(calls)
        for rank, k in enumerate(order):
            _, args, where = calls[k]
            kw = dict(workers=[where], allow_other_workers=not strict) if where else {}
            futs[k] = self.submit(step, fn, *args, priority=urgency * 10 ** 9 + len(calls) - rank, **kw)
        return futs

    def reduce(self, step: str, fn: Callable, handles: list):
        """``fn(results)`` on the cluster (the results are not brought to the client)."""
        return self.client.submit(fn, handles, key=f"attnspec-{step}-0-{self.run_id}", pure=False)

    def gather(self, futures: list, desc: str) -> list:
        """Results in submission order (a progress bar over completions when asked)."""
        if self.progress:
            from distributed import as_completed
            from tqdm.auto import tqdm
            for _ in tqdm(as_completed(futures), total=len(futures), desc=desc, leave=False):
                pass
        return self.client.gather(futures)

    # --- the run
    def warm_up(self) -> list:
        """One model-loading task per worker now (preferred there, allowed elsewhere: never stuck on a worker
        that leaves), so that the model loads everywhere at once rather than in the first tasks."""
        workers = sorted(self.client.scheduler_info(n_workers=-1)["workers"])
        return [self.client.submit(wk.in_task, self.spec, None, (self.run_id, "load"), wk.load_only, pure=False,
                                   key=f"attnspec-load-{k}-{self.run_id}", workers=[w], allow_other_workers=True)
                for k, w in enumerate(workers)]

    def prepare(self, texts, opts):
        """Step 1 on a worker (:func:`.dask_worker.prepare_task`), the run's first task: inputs it refuses (texts
        longer than the model's positions, :func:`..checks.check_positions`) raise here the ``ValueError`` of a
        diagnosis in this process, with its message, before any other task is submitted."""
        out = self.client.submit(wk.prepare_task, self.spec, texts, opts, key=f"attnspec-prepare-0-{self.run_id}",
                                 pure=False).result()
        if isinstance(out, wk.Refusal):
            raise ValueError(out.message)
        return out

    def close(self) -> None:
        """Remove every worker's forward cache of this run (once)."""
        from .tasks import drop_run_cache
        if self._closed:
            return
        self._closed = True
        self.client.run(drop_run_cache, self.run_id, on_error="ignore")

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


def _threads(client) -> int:
    """Worker threads of the cluster now."""
    info = client.scheduler_info(n_workers=-1)["workers"]
    return max(1, sum(int(w.get("nthreads", 1)) for w in info.values()))
