"""Running a sweep on Dask, storing each finished point at once.

:func:`run_sweep`:

1. de-duplicates the points by key and drops those already in the store (a re-run recomputes
   nothing; if everything is done no cluster is started at all);
2. starts a :class:`distributed.LocalCluster` (``n_workers`` processes with one thread each: the work
   is CPU-bound NumPy, and Dask's nanny pins BLAS/OpenMP to one thread per worker) or connects to an
   existing scheduler (``scheduler='tcp://host:port'``), or uses a given ``client``;
3. *claims* each point in the store before submitting it (:meth:`.store.ResultStore.claim`), keeping
   at most ``2 x workers`` points in flight, so that several runners on one database share the work
   instead of each computing every point; a background thread refreshes this runner's claims'
   heartbeat. Each result is written to the SQLite store by the client process in its own
   transaction as it arrives (``as_completed``); workers never touch the database. A failing point
   is logged in ``failures`` and retried by the next run;
4. when only points held by other live runners are left, polls until they are stored (counted as
   *computed by another runner*), failed there, or free again (a dead runner's claim: then this
   runner computes them), for at most ``wait_for_others`` seconds (default: no limit);
5. always releases its remaining claims and closes the client and the cluster it started
   (``finally``).

``n_workers=0`` evaluates in the calling process (no Dask), for debugging and tiny sweeps.

The :class:`SweepReport`'s counts add up: ``total == already_stored + computed +
computed_elsewhere + len(failed) + len(failed_elsewhere) + len(left_to_others)``.
"""
from __future__ import annotations

import logging
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from tqdm.auto import tqdm

from .evaluate import run_point
from .spec import SweepPoint
from .store import (CLAIMED, DEFAULT_STALE_AFTER_S, FAILED_ELSEWHERE, HELD, STORED, ResultStore, code_version,
                    new_owner_id)

__all__ = ["SweepReport", "run_sweep", "pending_points"]

log = logging.getLogger(__name__)


@dataclass
class SweepReport:
    """What a call to :func:`run_sweep` did; every point of the sweep is in exactly one count.

    ``total`` (distinct points) ``= already_stored + computed + computed_elsewhere + len(failed) +
    len(failed_elsewhere) + len(left_to_others)``:

    * ``already_stored``: in the store when the run began;
    * ``computed``: evaluated and stored by this runner;
    * ``computed_elsewhere``: stored by another runner on the same database while this one ran;
    * ``failed``: ``(key, error)`` of points whose evaluation failed here;
    * ``failed_elsewhere``: keys of points another runner failed on during this run (not retried);
    * ``left_to_others``: keys still being computed by another live runner when ``wait_for_others``
      ran out (empty when waiting without limit).

    Examples
    --------
    >>> from pathlib import Path
    >>> rep = SweepReport(name="demo", db=Path("s.sqlite"), total=5, already_stored=2, computed=2,
    ...                   failed=[("k", "ValueError")])
    >>> rep.accounted == rep.total, str(rep).split(":")[1].strip()
    (True, '5 points')
    """

    name: str
    db: Path
    total: int
    already_stored: int
    computed: int = 0
    computed_elsewhere: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    failed_elsewhere: list[str] = field(default_factory=list)
    left_to_others: list[str] = field(default_factory=list)
    reclaimed: int = 0
    elapsed_s: float = 0.0
    workers: int = 0
    scheduler: str | None = None
    code_version: str = ""
    owner: str = ""

    @property
    def accounted(self) -> int:
        """The sum of the counts (equals :attr:`total`)."""
        return (self.already_stored + self.computed + self.computed_elsewhere + len(self.failed)
                + len(self.failed_elsewhere) + len(self.left_to_others))

    def __str__(self) -> str:
        parts = [f"{self.already_stored} already stored", f"{self.computed} computed here",
                 f"{self.computed_elsewhere} computed by another runner", f"{len(self.failed)} failed"]
        if self.failed_elsewhere:
            parts.append(f"{len(self.failed_elsewhere)} failed in another runner")
        if self.left_to_others:
            parts.append(f"{len(self.left_to_others)} still running in another runner")
        return (f"sweep {self.name!r}: {self.total} points: {', '.join(parts)}; "
                f"{self.elapsed_s:.1f} s on {self.workers} worker(s) -> {self.db}")


def _unique(points: Sequence[SweepPoint]) -> list[SweepPoint]:
    seen, out = set(), []
    for p in points:
        if p.key not in seen:
            seen.add(p.key)
            out.append(p)
    return out


def pending_points(points: Sequence[SweepPoint], db: str | Path) -> list[SweepPoint]:
    """Points (de-duplicated) whose key is not yet in the store at ``db``.

    Examples
    --------
    >>> import tempfile
    >>> from attnspec.config import MHSAConfig
    >>> from attnspec.sweeps.spec import expand_grid
    >>> db = tempfile.mkdtemp() + "/s.sqlite"
    >>> _ = run_sweep(expand_grid(MHSAConfig.uniform(16, 16), {"beta": [1.0]}), db, n_workers=0, progress=False)
    >>> more = expand_grid(MHSAConfig.uniform(16, 16), {"beta": [1.0, 1.5]})
    >>> [p.config.beta for p in pending_points(more + more, db)]           # de-duplicated, stored ones left out
    [1.5]
    """
    points = _unique(points)
    with ResultStore(db) as store:
        done = store.finished_keys(p.key for p in points)
    return [p for p in points if p.key not in done]


class _Heartbeat:
    """Background thread refreshing the heartbeat of ``owner``'s claims every ``interval`` seconds
    (its own connection: SQLite connections are not shared across threads)."""

    def __init__(self, db: Path, owner: str, interval: float):
        self.db, self.owner, self.interval = db, owner, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"attnspec-heartbeat-{owner}", daemon=True)

    def _run(self) -> None:
        store = None
        try:
            store = ResultStore(self.db)
            while not self._stop.wait(self.interval):
                try:
                    store.heartbeat(self.owner)
                except Exception as exc:  # noqa: BLE001 (a busy database must not kill the sweep)
                    log.warning("sweep heartbeat failed: %s", exc)
        except Exception as exc:  # noqa: BLE001
            log.warning("sweep heartbeat thread stopped: %s", exc)
        finally:
            if store is not None:
                store.close()

    def __enter__(self) -> "_Heartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


class _Queue:
    """The points this runner has yet to settle, claimed one at a time, and what becomes of each."""

    def __init__(self, store: ResultStore, todo: list[SweepPoint], report: SweepReport, run_started_at: float,
                 stale_after: float, poll_s: float, progress: bool):
        self.store, self.report, self.owner = store, report, report.owner
        self.run_started_at, self.stale_after, self.poll_s = run_started_at, stale_after, poll_s
        self.pending: deque[SweepPoint] = deque(todo)
        self.held: list[SweepPoint] = []          # claimed by live other runners at the last look
        self.seen_held: set[str] = set()
        self.bar = tqdm(total=len(todo), desc=f"sweep {report.name}", unit="pt", disable=not progress, leave=False)

    def take(self) -> SweepPoint | None:
        """The next point this runner has claimed, or ``None`` if no pending point can be claimed now."""
        while self.pending:
            p = self.pending.popleft()
            outcome = self.store.claim(p.key, self.owner, run_started_at=self.run_started_at,
                                       stale_after=self.stale_after)
            if outcome == CLAIMED:
                if p.key in self.seen_held:
                    self.report.reclaimed += 1
                return p
            if outcome == STORED:
                self.report.computed_elsewhere += 1
            elif outcome == FAILED_ELSEWHERE:
                self.report.failed_elsewhere.append(p.key)
            elif outcome == HELD:
                self.held.append(p)
                self.seen_held.add(p.key)
            else:  # pragma: no cover
                raise RuntimeError(f"unknown claim outcome {outcome!r}")
        return None

    def store_result(self, p: SweepPoint, out: dict) -> None:
        """Write a finished point (one transaction)."""
        r = self.report
        if self.store.put(p, out["results"], sweep=r.name, started_at=out["started_at"], finished_at=out["finished_at"],
                          worker=out["worker"], version=r.code_version):
            r.computed += 1
        else:   # stored meanwhile by a runner that took over our claim (it thought us dead)
            r.computed_elsewhere += 1
        self.bar.update(1)

    def fail(self, p: SweepPoint, err: str) -> None:
        """Record a failed point (retried by the next run)."""
        self.store.record_failure(p.key, err, sweep=self.report.name, owner=self.owner)
        self.report.failed.append((p.key, err))
        log.warning("sweep point %s failed: %s", p.key[:12], err.strip().splitlines()[-1] if err.strip() else err)
        self.bar.update(1)

    def wait_for_held(self, deadline: float | None) -> bool:
        """Sleep, then put the points held elsewhere back in the queue; False when none or out of time."""
        if not self.held:
            return False
        if deadline is not None and time.monotonic() >= deadline:
            self.report.left_to_others.extend(p.key for p in self.held)
            self.held = []
            return False
        time.sleep(self.poll_s if deadline is None else max(0.0, min(self.poll_s, deadline - time.monotonic())))
        self.pending.extend(self.held)
        self.held = []
        return True

    def close(self) -> None:
        """Release this runner's remaining claims and close the progress bar."""
        try:
            self.store.release(self.owner)
        finally:
            self.bar.update(self.bar.total - self.bar.n if self.bar.total > self.bar.n else 0)
            self.bar.close()


def run_sweep(points: Sequence[SweepPoint], db: str | Path, *, name: str = "sweep", scheduler: str | None = None,
              n_workers: int = 2, client=None, evaluator: Callable | None = None, progress: bool = True,
              cluster_kwargs: dict | None = None, wait_for_others: float | None = None, poll_s: float = 0.5,
              heartbeat_s: float = 10.0, stale_after: float = DEFAULT_STALE_AFTER_S) -> SweepReport:
    """Evaluate the points not yet stored in ``db`` on Dask; store each result as it finishes.

    Several calls (processes, hosts) may run on one database at once: points are claimed in the
    store before they are computed, so each is computed by one runner (see the module docstring).

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
    wait_for_others : at most this many seconds spent waiting, after this runner's own work, for
        points that other live runners hold (``None``: until they are settled; ``0``: do not wait).
        Points still held then are reported in ``left_to_others``.
    poll_s : seconds between looks at points held by other runners
    heartbeat_s : seconds between heartbeats of this runner's claims
    stale_after : a claim whose heartbeat is older than this (seconds) is taken over; claims of dead
        processes on this host are taken over at once

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from attnspec.config import MHSAConfig
    >>> from attnspec.sweeps.spec import expand_grid
    >>> pts = expand_grid(MHSAConfig.uniform(16, 16), {"beta": [0.5, 1.0]}, evaluations=("surrogate",))
    >>> db = pathlib.Path(tempfile.mkdtemp()) / "sweep.sqlite"
    >>> rep = run_sweep(pts, db, n_workers=0, progress=False)
    >>> rep.computed, run_sweep(pts, db, n_workers=0, progress=False).already_stored
    (2, 2)
    """
    t_start, run_started_at = time.perf_counter(), time.time()
    points = _unique(points)
    with ResultStore(db) as store:
        done = store.finished_keys(p.key for p in points)
        todo = [p for p in points if p.key not in done]
        report = SweepReport(name=name, db=Path(db), total=len(points), already_stored=len(points) - len(todo),
                             scheduler=scheduler, code_version=code_version(), owner=new_owner_id())
        if todo:
            queue = _Queue(store, todo, report, run_started_at, stale_after, poll_s, progress)
            try:
                with _Heartbeat(Path(db), report.owner, heartbeat_s):
                    if n_workers == 0 and scheduler is None and client is None:
                        _run_serial(queue, evaluator, wait_for_others)
                    else:
                        _run_dask(queue, scheduler, n_workers, client, evaluator, cluster_kwargs or {},
                                  wait_for_others)
            finally:
                queue.close()
    report.elapsed_s = time.perf_counter() - t_start
    if report.accounted != report.total:  # pragma: no cover (a bug, not a runtime condition)
        log.error("sweep report counts do not add up: %s", report)
    return report


def _deadline(wait_for_others: float | None) -> float | None:
    return None if wait_for_others is None else time.monotonic() + max(0.0, wait_for_others)


def _run_serial(queue: _Queue, evaluator, wait_for_others) -> None:
    deadline = None
    while True:
        p = queue.take()
        if p is not None:
            try:
                out = run_point(p.to_dict(), evaluator)
            except Exception:  # noqa: BLE001 (a failing point must not stop the sweep)
                queue.fail(p, traceback.format_exc())
            else:
                queue.store_result(p, out)
            continue
        if deadline is None and queue.held:
            deadline = _deadline(wait_for_others)
        if not queue.wait_for_held(deadline):
            return


def _run_dask(queue: _Queue, scheduler, n_workers, client, evaluator, cluster_kwargs, wait_for_others) -> None:
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
        queue.report.workers = len(client.scheduler_info(n_workers=-1)["workers"])
        capacity = max(2, 2 * queue.report.workers)
        inflight: dict = {}
        ac = as_completed()

        def fill() -> None:
            while len(inflight) < capacity:
                p = queue.take()
                if p is None:
                    return
                fut = client.submit(run_point, p.to_dict(), evaluator, key=f"attnspec-point-{p.key}", pure=False)
                inflight[fut] = p
                ac.add(fut)

        deadline = None
        while True:
            fill()
            if inflight:
                fut = next(ac)
                p = inflight.pop(fut)
                try:
                    out = fut.result()
                except Exception as exc:  # noqa: BLE001
                    queue.fail(p, "".join(traceback.format_exception_only(type(exc), exc)))
                else:
                    queue.store_result(p, out)
                fut.release()
                continue
            if deadline is None and queue.held:
                deadline = _deadline(wait_for_others)
            if not queue.wait_for_held(deadline):
                return
    finally:
        if own_client is not None:
            own_client.close()
        if cluster is not None:
            cluster.close()
