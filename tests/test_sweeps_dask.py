"""Sweeps on real Dask clusters: a 2-worker LocalCluster, an existing scheduler, and kill-and-resume."""
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from attnspec import MHSAConfig
from attnspec.sweeps import ResultStore, expand_grid, run_sweep, to_frame

distributed = pytest.importorskip("distributed")

BASE = MHSAConfig.uniform(64, 64, heads=4)


@pytest.mark.timeout(180)
def test_two_worker_local_cluster(tmp_path):
    db = tmp_path / "r.sqlite"
    pts = expand_grid(BASE, {"heads": [1, 2, 4, 8], "beta": [0.5, 1.0]})
    report = run_sweep(pts, db, n_workers=2, progress=False)
    assert report.workers == 2 and report.computed == 8 and not report.failed
    df = to_frame(db)
    assert len(df) == 8 and df["worker"].str.startswith("tcp://").all()
    assert (df["law.source"].isin(["solver", "closed-form"])).all()
    again = run_sweep(pts, db, n_workers=2, progress=False)     # resumes: no cluster, nothing recomputed
    assert (again.computed, again.already_stored, again.workers) == (0, 8, 0)


@pytest.mark.timeout(180)
def test_existing_scheduler(tmp_path):
    from distributed import LocalCluster

    db = tmp_path / "r.sqlite"
    pts = expand_grid(BASE, {"beta": [0.5, 1.0]}, evaluations=("surrogate",))
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        report = run_sweep(pts, db, scheduler=cluster.scheduler_address, progress=False)
        assert report.computed == 2 and report.workers == 1
        assert cluster.scheduler_address in str(report.scheduler)
        assert len(cluster.workers) == 1     # the cluster we did not start is left running


SLOW_EVALUATOR = """
import time

def slow(point):
    time.sleep(0.4)
    return {"seed": point.seed, "payload": list(range(200))}
"""


@pytest.mark.timeout(240)
def test_sigkill_mid_sweep_loses_nothing_and_resumes(tmp_path):
    """A real `attnspec sweep` subprocess (LocalCluster, 2 workers) killed with SIGKILL in the middle."""
    (tmp_path / "slow_eval.py").write_text(textwrap.dedent(SLOW_EVALUATOR))
    db = tmp_path / "r.sqlite"
    n = 16
    argv = ["sweep", "--db", str(db), "--seq-len", "16", "--d-model", "16", "--seeds", ",".join(map(str, range(n))),
            "--workers", "2", "--evaluator", "slow_eval:slow", "--no-progress"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from attnspec.cli import main; sys.exit(main(sys.argv[1:]))",
                             *argv], env=env, cwd=tmp_path, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.time() + 120
    stored = 0
    try:
        while time.time() < deadline and proc.poll() is None:
            if db.exists():
                try:
                    with sqlite3.connect(db, timeout=5) as c:
                        stored = c.execute("SELECT COUNT(*) FROM points").fetchone()[0]
                except sqlite3.OperationalError:   # schema not created yet
                    stored = 0
                if stored >= 4:
                    break
            time.sleep(0.05)
        assert proc.poll() is None, f"sweep ended before it could be killed:\n{proc.stdout.read().decode()}"
        os.killpg(proc.pid, signal.SIGKILL)      # the client, its nannies and workers: all at once, no cleanup
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    with ResultStore(db) as store:
        assert store.integrity_check() == "ok"
        rows = list(store.rows())
        k = len(rows)
        assert 4 <= k < n, f"kill was not in the middle of the sweep ({k} of {n} stored)"
        for r in rows:                       # every stored row is complete
            assert r.results["payload"] == list(range(200)) and r.finished_at >= r.started_at
        before = {r.key: r.stored_at for r in rows}
        left = store.claims()             # the killed runner's claims on its points in flight stay behind ...
        assert left and all(c["owner"].split(":")[1] == str(proc.pid) for c in left)

    points = expand_grid(MHSAConfig.uniform(16, 16), seeds=range(n))   # what the command line built
    sys.path.insert(0, str(tmp_path))
    try:
        import slow_eval
        report = run_sweep(points, db, n_workers=0, evaluator=slow_eval.slow, progress=False)
    finally:
        sys.path.remove(str(tmp_path))
    assert (report.already_stored, report.computed) == (k, n - k)     # finished points are not recomputed
    assert report.accounted == n
    with ResultStore(db) as store:
        assert len(store) == n and store.claims() == []     # ... and are taken over: a dead owner holds nothing
        assert all(store.get(key).stored_at == t for key, t in before.items())   # old rows untouched
        assert sorted(r.results["seed"] for r in store.rows()) == list(range(n))


def counting_sleeper(point):
    """Evaluator for the shared-database test: one log line per evaluation (workers and client)."""
    time.sleep(0.2)
    with open(os.environ["ATTNSPEC_COUNT_LOG"], "a") as f:
        f.write(f"{point.seed} {os.getpid()}\n")
    return {"seed": point.seed}


@pytest.mark.timeout(180)
def test_dask_runner_and_serial_runner_share_one_database(tmp_path, monkeypatch):
    """A LocalCluster runner (in a thread) and an in-process runner on one store: each point once."""
    import threading

    log = tmp_path / "evals.log"
    monkeypatch.setenv("ATTNSPEC_COUNT_LOG", str(log))
    db, n = tmp_path / "r.sqlite", 16
    pts = expand_grid(BASE, seeds=range(n), evaluations=("surrogate",))
    reports = {}
    t = threading.Thread(target=lambda: reports.setdefault("dask", run_sweep(
        pts, db, n_workers=1, evaluator=counting_sleeper, progress=False, poll_s=0.05)))
    t.start()
    deadline = time.time() + 120
    while not (log.exists() and log.read_text()) and time.time() < deadline:   # the cluster is up and computing
        time.sleep(0.02)
    reports["serial"] = run_sweep(pts, db, n_workers=0, evaluator=counting_sleeper, progress=False, poll_s=0.05)
    t.join(timeout=150)
    seeds = sorted(int(line.split()[0]) for line in log.read_text().splitlines())
    assert seeds == list(range(n)), seeds                          # every point evaluated exactly once
    for r in reports.values():
        assert r.accounted == r.total == n and not r.failed, str(r)
        assert r.already_stored + r.computed + r.computed_elsewhere == n
    assert reports["dask"].computed + reports["serial"].computed == n
    assert reports["dask"].computed > 0 and reports["serial"].computed > 0, [str(r) for r in reports.values()]
    with ResultStore(db) as store:
        assert len(store) == n and store.claims() == []
