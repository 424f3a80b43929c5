"""Training time and held-out accuracy of the four zoo models on simulated MI-EEG (prints, asserts nothing).

The acceptance budget is <= 3 minutes of training on 2 CPU cores. Training runs a fixed number of
epochs (``--epochs``, default ``DEFAULT_EPOCHS`` = 20 of :mod:`attnspec.zoo.experiment`), so the
accuracy does not depend on the load; wall-clock time does, so the load average and the process
CPU time are printed with it.

    python benchmarks/bench_zoo.py                 # default: the README setting, 2 threads
    python benchmarks/bench_zoo.py --quick         # smaller data, 3 epochs
    python benchmarks/bench_zoo.py --arch spd --classes 4
"""
from __future__ import annotations

import argparse
import os
import time

import torch

from attnspec.zoo.experiment import DEFAULT_EPOCHS, default_sim, run_experiment

ARCHS = ("anisotropic", "staged", "spd", "diffuse")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--arch", nargs="*", default=list(ARCHS))
    p.add_argument("--classes", type=int, default=2, choices=(2, 4))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--epochs", type=int, default=DEFAULT_EPOCHS, help="training epochs of every model")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    print(f"torch threads {a.threads}, cpu count {os.cpu_count()}, load average {os.getloadavg()}")
    for arch in a.arch:
        sim = default_sim(a.classes, quick=a.quick)
        t0 = time.perf_counter()
        epochs = 3 if a.quick else a.epochs
        exp = run_experiment(arch, sim, fit_kwargs=dict(epochs=epochs, lr=3e-3, progress=False), diagnose=False)
        r = exp.result
        print(f"{arch:12s} classes={a.classes} train={r.n_train} test={r.n_test} epochs={r.epochs} "
              f"train_wall={r.seconds:.1f}s train_cpu={r.cpu_seconds:.1f}s acc={r.test_accuracy:.3f} "
              f"chance={r.chance:.3f} total={time.perf_counter() - t0:.1f}s load={os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
