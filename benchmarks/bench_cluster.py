"""Benchmark: a MiniLM diagnosis on a 1-worker and a 2-worker LocalCluster (one thread each; prints only).

The diagnosis: ``diagnose_on_cluster('minilm', builtin_texts(N))`` with the library's defaults
(exact removal and gradient importance for MiniLM). For each cluster size a fresh LocalCluster is
started (not timed), then the call is timed twice: **cold** (the workers load the model in it) and
**warm** (models already loaded). Printed per size: wall time of each call and the steps' times from
``summary['timings_s']``; then the speed-up of 2 workers over 1 (cold and warm). The tables of
the two sizes are compared (they must agree to 1e-9). The load average of the machine is printed
before and after, and per call the CPU share of a task (CPU seconds of the worker processes over
the tasks' wall seconds; 1 when every worker has a core to itself): on a shared box the speed-up is
bounded by the cores actually free.

Usage: python benchmarks/bench_cluster.py [--n-texts 128] [--workers 1,2] [--no-warm]
"""
from __future__ import annotations

import argparse
import logging
import os
import time

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")


def _run(n_workers: int, texts: list, warm: bool) -> tuple[list[float], object]:
    """Wall times of the cold (and warm) call on a fresh ``n_workers`` cluster, and the last diagnosis."""
    from distributed import Client, LocalCluster

    from attnspec.diagnostics.distributed import diagnose_on_cluster

    walls, d = [], None
    with LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
        for label in ("cold", "warm")[:2 if warm else 1]:
            t0 = time.perf_counter()
            d = diagnose_on_cluster("minilm", texts, client)
            walls.append(time.perf_counter() - t0)
            steps = {k: v for k, v in d.summary["timings_s"].items() if k != "total"}
            tt = [v for k, v in d.summary["cluster"]["task_times"].items() if k != "load"]
            share = sum(v["cpu_s"] for v in tt) / max(sum(v["wall_s"] for v in tt), 1e-9)
            print(f"  {n_workers} worker(s), {label}: {walls[-1]:7.1f} s   steps {steps}   "
                  f"tasks {d.summary['cluster']['tasks']}   CPU share of a task {share:.2f}   "
                  f"load average {os.getloadavg()[0]:.2f}", flush=True)
    return walls, d


def main(argv=None) -> int:
    import numpy as np

    from attnspec.data import builtin_texts

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n-texts", type=int, default=128)
    ap.add_argument("--workers", default="1,2", help="cluster sizes, comma-separated (the first is the baseline)")
    ap.add_argument("--no-warm", action="store_true", help="time only the cold call")
    a = ap.parse_args(argv)
    sizes = [int(s) for s in a.workers.split(",")]
    texts = builtin_texts(a.n_texts)
    print(f"MiniLM diagnosis of {len(texts)} built-in texts on LocalClusters of {sizes} workers x 1 thread; "
          f"{os.cpu_count()} CPUs, load average before {os.getloadavg()}", flush=True)
    results = {n: _run(n, texts, not a.no_warm) for n in sizes}
    base_walls, base = results[sizes[0]]
    for n in sizes[1:]:
        walls, d = results[n]
        ratios = "   ".join(f"{lab} {b / w:.2f}x" for lab, b, w in zip(("cold", "warm"), base_walls, walls))
        same = all(np.allclose(getattr(d, t).select_dtypes("number").to_numpy(float),
                               getattr(base, t).select_dtypes("number").to_numpy(float), rtol=1e-9, atol=1e-12,
                               equal_nan=True) for t in ("heads", "layers", "pairs"))
        print(f"speed-up {n} over {sizes[0]} worker(s): {ratios}   (tables equal to 1e-9: {same})")
    print(f"load average after {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
