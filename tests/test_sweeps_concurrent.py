"""Several sweep runners on one database: claims share the work, every point is computed once, and
each runner's report adds up. Real processes, in-process evaluation (``n_workers=0``), no Dask."""
import json
import os
import re
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from attnspec import MHSAConfig
from attnspec.sweeps import ResultStore, expand_grid, run_sweep
from attnspec.sweeps.store import CLAIMED, FAILED_ELSEWHERE, HELD, STORED, new_owner_id, owner_alive

BASE = MHSAConfig.uniform(32, 32, heads=2)

# Evaluates a real (cheap) point, then appends "seed pid" to a shared log: one line per evaluation.
COUNTING_EVALUATOR = """
import os
import time

from attnspec.sweeps.evaluate import evaluate_point


def counting(point):
    out = evaluate_point(point)
    time.sleep(float(os.environ.get("COUNT_SLEEP", "0.15")))
    with open(os.environ["COUNT_LOG"], "a") as f:     # O_APPEND: one short write per line, atomic
        f.write(f"{point.seed} {os.getpid()}\\n")
    return out
"""

# Builds the points, waits for the GO file (so both runners start together), runs, prints the report.
RUNNER = """
import json, os, sys, time
import torch
torch.set_num_threads(1)
from attnspec import MHSAConfig
from attnspec.sweeps import expand_grid, run_sweep
from counting_eval import counting

db, go, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
points = expand_grid(MHSAConfig.uniform(32, 32, heads=2), seeds=range(n), evaluations=("law", "surrogate"))
open(go + "." + str(os.getpid()), "w").close()          # ready
while not os.path.exists(go):
    time.sleep(0.005)
r = run_sweep(points, db, n_workers=0, evaluator=counting, progress=False, poll_s=0.1)
print(json.dumps(dict(total=r.total, already_stored=r.already_stored, computed=r.computed,
                      computed_elsewhere=r.computed_elsewhere, failed=len(r.failed),
                      failed_elsewhere=len(r.failed_elsewhere), left=len(r.left_to_others),
                      accounted=r.accounted, text=str(r))))
"""


def _env(tmp_path, log):
    return dict(os.environ, COUNT_LOG=str(log), OMP_NUM_THREADS="1",
                PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))


def _log_lines(log):
    return [tuple(map(int, ln.split())) for ln in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.timeout(180)
def test_two_runner_processes_share_the_work(tmp_path):
    (tmp_path / "counting_eval.py").write_text(textwrap.dedent(COUNTING_EVALUATOR))
    (tmp_path / "runner.py").write_text(textwrap.dedent(RUNNER))
    db, go, log, n = tmp_path / "r.sqlite", tmp_path / "go", tmp_path / "evals.log", 12
    ResultStore(db).close()                       # schema exists before the race
    env = _env(tmp_path, log)
    procs = [subprocess.Popen([sys.executable, str(tmp_path / "runner.py"), str(db), str(go), str(n)], env=env,
                              cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    deadline = time.time() + 120
    while sum(1 for f in tmp_path.iterdir() if f.name.startswith("go.")) < 2:
        assert time.time() < deadline and all(p.poll() is None for p in procs), \
            [p.communicate() for p in procs if p.poll() is not None]
        time.sleep(0.01)
    go.touch()                                    # both runners start now
    reports = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        reports.append(json.loads(out.strip().splitlines()[-1]))

    evals = _log_lines(log)
    print("\n".join(r["text"] for r in reports))
    seeds = [s for s, _ in evals]
    assert sorted(seeds) == list(range(n)), f"duplicates or missing points: {sorted(seeds)}"   # once each
    for r in reports:
        assert r["total"] == r["accounted"] == n, r
        assert r["failed"] == r["failed_elsewhere"] == r["left"] == 0, r
        assert r["already_stored"] + r["computed"] + r["computed_elsewhere"] == n, r
        assert f"{r['computed']} computed here" in r["text"]
    assert reports[0]["computed"] + reports[1]["computed"] == n
    assert all(r["computed"] > 0 for r in reports), reports           # they really ran side by side
    pids = {pid for _, pid in evals}
    assert len(pids) == 2
    with ResultStore(db) as store:
        assert len(store) == n and store.claims() == [] and store.integrity_check() == "ok"


@pytest.mark.timeout(180)
def test_two_cli_sweeps_on_one_database(tmp_path):
    """Two `attnspec sweep` commands at once: each point evaluated once, both printed reports add up."""
    (tmp_path / "counting_eval.py").write_text(textwrap.dedent(COUNTING_EVALUATOR))
    db, log, n = tmp_path / "r.sqlite", tmp_path / "evals.log", 10
    argv = ["sweep", "--db", str(db), "--seq-len", "32", "--d-model", "32", "--seeds", ",".join(map(str, range(n))),
            "--evaluations", "surrogate", "--workers", "0", "--evaluator", "counting_eval:counting", "--no-progress"]
    env = dict(_env(tmp_path, log), COUNT_SLEEP="0.3")
    cmd = [sys.executable, "-c", "import sys; from attnspec.cli import main; sys.exit(main(sys.argv[1:]))", *argv]
    procs = [subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=150)
        assert p.returncode == 0, err
        outs.append(out)
    assert sorted(s for s, _ in _log_lines(log)) == list(range(n))     # no point evaluated twice
    computed = 0
    print("".join(outs))
    for out in outs:
        m = re.search(r"(\d+) points: (\d+) already stored, (\d+) computed here, (\d+) computed by another runner, "
                      r"(\d+) failed", out)
        assert m, out
        total, stored, here, other, failed = map(int, m.groups())
        assert total == n and stored + here + other + failed == n, out
        computed += here
    assert computed == n
    with ResultStore(db) as store:
        assert len(store) == n and store.claims() == []


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_claim_protocol(tmp_path):
    host = socket.gethostname()
    key = "k" * 64
    with ResultStore(tmp_path / "r.sqlite") as s:
        me, other_live = new_owner_id(), f"{host}:{os.getpid()}:other"
        assert owner_alive(me) is True and owner_alive(f"{host}:{_dead_pid()}:x") is False
        assert owner_alive("elsewhere.example:1:x") is None
        assert s.claim(key, other_live) == CLAIMED
        assert s.claim(key, me) == HELD                                  # a live runner holds it
        assert s.claim(key, me, stale_after=-1.0) == CLAIMED             # its heartbeat is too old: taken over
        assert s.claims()[0]["owner"] == me
        # a runner killed with SIGKILL on this host: its claim is free at once
        dead = f"{host}:{_dead_pid()}:dead"
        s._conn.execute("UPDATE claims SET owner = ?", (dead,))
        assert s.claim(key, me) == CLAIMED
        # another host: only the heartbeat tells
        s._conn.execute("UPDATE claims SET owner = 'elsewhere.example:1:x', heartbeat = ?", (time.time(),))
        assert s.claim(key, me) == HELD
        s._conn.execute("UPDATE claims SET heartbeat = ?", (time.time() - 1000,))
        assert s.claim(key, me, stale_after=100) == CLAIMED
        # a failure by another runner during this run is not retried; one from before this run is
        s.record_failure(key, "boom", owner=me)
        t_fail = s.claims()[0]["heartbeat"]
        assert s.claim(key, other_live, run_started_at=t_fail - 1) == FAILED_ELSEWHERE
        assert s.claim(key, other_live, run_started_at=t_fail + 1) == CLAIMED
        assert s.heartbeat(other_live) == 1 and s.release(other_live) == 1 and s.claims() == []
        # storing deletes the claim in the same transaction
        p = expand_grid(BASE, seeds=[0])[0]
        assert s.claim(p.key, me) == CLAIMED
        assert s.put(p, {"x": 1}, started_at=0.0, finished_at=1.0)
        assert s.claims() == [] and s.claim(p.key, other_live) == STORED


def _quick(point):
    return {"seed": point.seed}


def test_runner_waits_for_a_point_held_by_a_live_runner(tmp_path):
    db = tmp_path / "r.sqlite"
    pts = expand_grid(BASE, seeds=range(4), evaluations=("surrogate",))
    other = f"{socket.gethostname()}:{os.getpid()}:other-runner"          # alive: this very process
    with ResultStore(db) as s:
        assert s.claim(pts[0].key, other) == CLAIMED
        assert s.claim(pts[1].key, other) == CLAIMED

    def finish_later():                     # the "other runner" stores one point and drops the other claim
        time.sleep(0.6)
        with ResultStore(db) as s:
            s.put(pts[0], {"seed": 0}, started_at=0.0, finished_at=1.0)
            s.release(other)

    t = threading.Thread(target=finish_later)
    t.start()
    r = run_sweep(pts, db, n_workers=0, evaluator=_quick, progress=False, poll_s=0.05)
    t.join()
    assert (r.total, r.already_stored, r.computed, r.computed_elsewhere, r.reclaimed) == (4, 0, 3, 1, 1)
    assert r.accounted == r.total and not r.left_to_others
    assert "1 computed by another runner" in str(r)

    # a point held by a runner that never finishes: reported, not waited for beyond wait_for_others
    pts2 = expand_grid(BASE, seeds=range(10, 13), evaluations=("surrogate",))
    with ResultStore(db) as s:
        s.claim(pts2[0].key, other)
    t0 = time.perf_counter()
    r = run_sweep(pts + pts2, db, n_workers=0, evaluator=_quick, progress=False, poll_s=0.05, wait_for_others=0.3)
    assert time.perf_counter() - t0 < 10
    assert (r.total, r.already_stored, r.computed, len(r.left_to_others)) == (7, 4, 2, 1)
    assert r.accounted == r.total and "1 still running in another runner" in str(r)
