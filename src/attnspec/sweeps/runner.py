"""Running a sweep on Dask, storing each finished point at once.

:func:`run_sweep`:

1. de-duplicates the points by key and drops those already in the store (a re-run recomputes
   nothing; if everything is done no cluster is started at all);
2. starts a :class:`distributed.LocalCluster` (``n_workers`` processes with one thread each: the work
   is CPU-bound NumPy, and Dask's nanny pins BLAS/OpenMP to one thread per worker) or connects to an
   existing scheduler (``scheduler='tcp://host:port'``), or uses a given ``client``;
3. submits one task per point (:func:`.evaluate.run_point`) and, in the client process, writes each
   result to the SQLite store in its own transaction as it arrives (``as_completed``). Workers never
   touch the database. A failing point is logged in ``failures`` and retried by the next run;
4. always closes the client and the cluster it started (``finally``).

``n_workers=0`` evaluates in the calling process (no Dask), for debugging and tiny sweeps.
"""
from __future__ import annotations

import logging
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from tqdm.auto import tqdm

from .evaluate import run_point
from .spec import SweepPoint
from .store import ResultStore, code_version

__all__ = ["SweepReport", "run_sweep", "pending_points"]

log = logging.getLogger(__name__)


@dataclass
class SweepReport:
    """What a call to :func:`run_sweep` did."""

    name: str
    db: Path
    total: int
    skipped: int
    computed: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    elapsed_s: float = 0.0
    workers: int = 0
    scheduler: str | None = None
    code_version: str = ""

    def __str__(self) -> str:
        return (f"sweep {self.name!r}: {self.total} points, {self.skipped} already stored, {self.computed} computed, "
                f"{len(self.failed)} failed, {self.elapsed_s:.1f} s on {self.workers} worker(s) -> {self.db}")


def _unique(points: Sequence[SweepPoint]) -> list[SweepPoint]:
    seen, out = set(), []
    for p in points:
        if p.key not in seen:
            seen.add(p.key)
            out.append(p)
    return out


def pending_points(points: Sequence[SweepPoint], db: str | Path) -> list[SweepPoint]:
    """Points (de-duplicated) whose key is not yet in the store at ``db``."""
    points = _unique(points)
    with ResultStore(db) as store:
        done = store.finished_keys(p.key for p in points)
    return [p for p in points if p.key not in done]


def run_sweep(points: Sequence[SweepPoint], db: str | Path, *, name: str = "sweep", scheduler: str | None = None,
              n_workers: int = 2, client=None, evaluator: Callable | None = None, progress: bool = True,
              cluster_kwargs: dict | None = None) -> SweepReport:
    """Evaluate the points not yet stored in ``db`` on Dask; store each result as it finishes.

    Parameters
    ----------
    points : sweep points (duplicates are evaluated once)
    db : path of the SQLite store (created if missing)
    name : sweep name recorded with each new row
    scheduler : address of a running Dask scheduler; ``None`` starts a LocalCluster
    n_workers : LocalCluster size (``0``: evaluate in this process, without Dask)
    client : an existing :class:`distributed.Client` to use (not closed here)
    evaluator : ``SweepPoint -> dict`` run on the workers (default :func:`.evaluate.evaluate_point`);
        must be importable by the workers (a module-level function)
    progress : show a progress bar
    cluster_kwargs : extra keyword arguments for :class:`distributed.LocalCluster`
    """
    t_start = time.perf_counter()
    points = _unique(points)
    version = code_version()
    with ResultStore(db) as store:
        done = store.finished_keys(p.key for p in points)
        todo = [p for p in points if p.key not in done]
        report = SweepReport(name=name, db=Path(db), total=len(points), skipped=len(points) - len(todo),
                             scheduler=scheduler, code_version=version)
        if not todo:
            report.elapsed_s = time.perf_counter() - t_start
            return report
        by_key = {p.key: p for p in todo}
        bar = tqdm(total=len(todo), desc=f"sweep {name}", unit="pt", disable=not progress, leave=False)

        def store_one(out: dict) -> None:
            p = by_key[out["key"]]
            if store.put(p, out["results"], sweep=name, started_at=out["started_at"], finished_at=out["finished_at"],
                         worker=out["worker"], version=version):
                report.computed += 1
            bar.update(1)

        def fail_one(key: str, err: str) -> None:
            store.record_failure(key, err, sweep=name)
            report.failed.append((key, err))
            log.warning("sweep point %s failed: %s", key[:12], err.strip().splitlines()[-1] if err.strip() else err)
            bar.update(1)

        try:
            if n_workers == 0 and scheduler is None and client is None:
                report.workers = 0
                for p in todo:
                    try:
                        store_one(run_point(p.to_dict(), evaluator))
                    except Exception:  # noqa: BLE001 (a failing point must not stop the sweep)
                        fail_one(p.key, traceback.format_exc())
            else:
                _run_dask(todo, store_one, fail_one, report, scheduler, n_workers, client, evaluator,
                          cluster_kwargs or {})
        finally:
            bar.close()
            report.elapsed_s = time.perf_counter() - t_start
    return report


def _run_dask(todo, store_one, fail_one, report, scheduler, n_workers, client, evaluator, cluster_kwargs) -> None:
    from distributed import Client, LocalCluster, as_completed

    cluster = own_client = None
    try:
        if client is None:
            if scheduler is None:
                kw = dict(n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=None,
                          silence_logs=logging.ERROR)
                kw.update(cluster_kwargs)
                cluster = LocalCluster(**kw)
                own_client = client = Client(cluster)
            else:
                own_client = client = Client(scheduler)
        report.workers = len(client.scheduler_info(n_workers=-1)["workers"])
        futures = {client.submit(run_point, p.to_dict(), evaluator, key=f"attnspec-point-{p.key}", pure=False): p.key
                   for p in todo}
        for fut in as_completed(futures):
            key = futures[fut]
            try:
                out = fut.result()
            except Exception as exc:  # noqa: BLE001
                fail_one(key, "".join(traceback.format_exception_only(type(exc), exc)))
            else:
                store_one(out)
            fut.release()
    finally:
        if own_client is not None:
            own_client.close()
        if cluster is not None:
            cluster.close()
