"""Benchmark: a MiniLM diagnosis on a 1-worker and a 2-worker LocalCluster (one thread each; prints only).

The diagnosis: ``diagnose_on_cluster('minilm', builtin_texts(N))`` with the library's defaults
(exact removal and gradient importance for MiniLM). Both clusters are started first (not timed);
each gets one **cold** call (its workers load the model during the call), then **warm** calls
(models loaded) alternate between the two sizes ``--repeat`` times, so that a change of the
machine's load hits both alike. Printed per call: wall time, the steps' times, the CPU share of a
task (CPU seconds of the worker processes over the tasks' wall seconds; 1 when every worker has a
core to itself) and the load average; then the speed-up of 2 workers over 1, cold and warm (best
and median of the warm calls). The tables of the two sizes are compared (they must agree to 1e-9).
On a shared box the speed-up is bounded by the cores actually free: read it beside the load average
and the CPU shares.

Usage: python benchmarks/bench_cluster.py [--n-texts 128] [--repeat 2]
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
import statistics
import time

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

SIZES = (1, 2)


def _call(client, n_workers: int, texts: list, label: str):
    """One timed diagnosis on ``client``; prints a line, returns ``(wall seconds, diagnosis)``."""
    from attnspec.diagnostics.distributed import diagnose_on_cluster

    t0 = time.perf_counter()
    d = diagnose_on_cluster("minilm", texts, client)
    wall = time.perf_counter() - t0
    steps = {k: v for k, v in d.summary["timings_s"].items() if k != "total"}
    tt = [v for k, v in d.summary["cluster"]["task_times"].items() if k != "load"]
    share = sum(v["cpu_s"] for v in tt) / max(sum(v["wall_s"] for v in tt), 1e-9)
    print(f"  {n_workers} worker(s), {label}: {wall:7.1f} s   steps {steps}   CPU share of a task {share:.2f}   "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
    return wall, d


def _same_tables(a, b) -> bool:
    import numpy as np
    return all(np.allclose(getattr(a, t).select_dtypes("number").to_numpy(float),
                           getattr(b, t).select_dtypes("number").to_numpy(float), rtol=1e-9, atol=1e-12,
                           equal_nan=True) for t in ("heads", "layers", "pairs"))


def main(argv=None) -> int:
    from distributed import Client, LocalCluster

    from attnspec.data import builtin_texts

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n-texts", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=2, help="warm calls per cluster size, alternating (0: none)")
    a = ap.parse_args(argv)
    texts = builtin_texts(a.n_texts)
    print(f"MiniLM diagnosis of {len(texts)} built-in texts on LocalClusters of {list(SIZES)} workers x 1 thread; "
          f"{os.cpu_count()} CPUs, load average before {os.getloadavg()}", flush=True)
    with contextlib.ExitStack() as stack:
        clients = {}
        for n in SIZES:
            cluster = stack.enter_context(LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                                       dashboard_address=None, silence_logs=logging.ERROR))
            clients[n] = stack.enter_context(Client(cluster))
        cold = {n: _call(clients[n], n, texts, "cold") for n in SIZES}
        warm: dict = {n: [] for n in SIZES}
        for r in range(a.repeat):
            for n in (SIZES if r % 2 == 0 else SIZES[::-1]):
                warm[n].append(_call(clients[n], n, texts, f"warm {r + 1}")[0])
    one, two = SIZES
    line = f"speed-up {two} over {one} worker: cold {cold[one][0] / cold[two][0]:.2f}x"
    if a.repeat:
        line += (f"   warm best {min(warm[one]) / min(warm[two]):.2f}x   "
                 f"warm median {statistics.median(warm[one]) / statistics.median(warm[two]):.2f}x")
    print(f"{line}   (tables equal to 1e-9: {_same_tables(cold[one][1], cold[two][1])})")
    print(f"load average after {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
