"""Benchmark: speed-up of a 2-worker over a 1-worker LocalCluster on a 16-point sweep (prints only).

The sweep: 16 points (beta in {0.5, 0.75, 1.0, 1.25} x heads in {1, 2, 4, 8} at fixed total width),
each evaluated by softmax and surrogate Monte-Carlo (``--draws`` draws at ``l = d = --d``) and by the
law (``--with-law``). Each run uses a fresh store; times are wall-clock for :func:`run_sweep`
(cluster start included) and for the compute phase alone (sum of per-point times / wall).
The machine's load average is printed: on a shared 2-core box the speed-up is bounded by the
cores actually free.

Usage: python benchmarks/bench_sweep.py [--d 320] [--draws 2] [--with-law] [--repeat 1]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")


def main(argv=None) -> int:
    from attnspec import MHSAConfig
    from attnspec.sweeps import expand_grid, run_sweep, to_frame

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--d", type=int, default=320)
    ap.add_argument("--draws", type=int, default=2)
    ap.add_argument("--with-law", action="store_true")
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args(argv)
    base = MHSAConfig.uniform(a.d, a.d, heads=8)
    ev = ("law", "softmax", "surrogate") if a.with_law else ("softmax", "surrogate")
    pts = expand_grid(base, {"beta": [0.5, 0.75, 1.0, 1.25], "heads": [1, 2, 4, 8]}, draws=a.draws, evaluations=ev)
    assert len(pts) == 16
    print(f"16-point sweep, l = d = {a.d}, draws = {a.draws}, evaluations = {','.join(ev)}; "
          f"{os.cpu_count()} CPUs, load average before {os.getloadavg()[0]:.2f}", flush=True)
    res = {}
    for _ in range(a.repeat):
        for w in (1, 2):
            with tempfile.TemporaryDirectory() as tmp:
                db = Path(tmp) / "b.sqlite"
                t0 = time.perf_counter()
                r = run_sweep(pts, db, n_workers=w, progress=False)
                wall = time.perf_counter() - t0
                df = to_frame(db)
                span = df["finished_at"].max() - (df["finished_at"] - df["elapsed_s"]).min()
                busy = df["elapsed_s"].sum()
            assert r.computed == 16, r
            res.setdefault(w, []).append((wall, span, busy))
            print(f"  {w} worker(s): wall {wall:6.2f} s (cluster start included), compute span {span:6.2f} s, "
                  f"sum of point times {busy:6.2f} s, load {os.getloadavg()[0]:.2f}", flush=True)
    w1, w2 = min(x[0] for x in res[1]), min(x[0] for x in res[2])
    s1, s2 = min(x[1] for x in res[1]), min(x[1] for x in res[2])
    conc = max(x[2] / x[1] for x in res[2])
    print(f"speed-up of 2 workers over 1: {w1 / w2:.2f}x wall-clock, {s1 / s2:.2f}x compute span "
          f"(load average after {os.getloadavg()[0]:.2f}); with 2 workers the points overlapped "
          f"{conc:.2f}x (sum of point times / span): below 2x speed-up means the cores were not free")
    return 0


if __name__ == "__main__":
    sys.exit(main())
