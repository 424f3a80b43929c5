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
    assert (again.computed, again.skipped, again.workers) == (0, 8, 0)


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

    points = expand_grid(MHSAConfig.uniform(16, 16), seeds=range(n))   # what the command line built
    sys.path.insert(0, str(tmp_path))
    try:
        import slow_eval
        report = run_sweep(points, db, n_workers=0, evaluator=slow_eval.slow, progress=False)
    finally:
        sys.path.remove(str(tmp_path))
    assert (report.skipped, report.computed) == (k, n - k)     # finished points are not recomputed
    with ResultStore(db) as store:
        assert len(store) == n
        assert all(store.get(key).stored_at == t for key, t in before.items())   # old rows untouched
        assert sorted(r.results["seed"] for r in store.rows()) == list(range(n))
