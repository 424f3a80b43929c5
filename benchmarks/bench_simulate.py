"""Benchmark: one l = d = 2000 draw, and the spectrum routine against numpy.linalg.svd.

Prints times and ratios; asserts nothing. Run: ``python benchmarks/bench_simulate.py``.
"""
import time

import numpy as np

from attnspec import MHSAConfig
from attnspec.simulation import draw_blocks, simulate, simulate_outputs, stack_blocks
from attnspec.spectra import gram_eigenvalues


def best_of(f, repeat=3):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return min(times)


def main():
    print("simulation, one draw, both models (softmax + surrogate), l = d = 2000:")
    for name, cfg in [
        ("attention matrix", MHSAConfig.uniform(2000, 2000, 1, 2000, target="attention")),
        ("output H=4, d_qk=d_v=500", MHSAConfig.uniform(2000, 2000, heads=4, d_qk=500)),
    ]:
        t = best_of(lambda cfg=cfg: simulate(cfg, seed=0), repeat=2)
        print(f"  {name:28s} {t:6.2f} s")
    cfg = MHSAConfig.uniform(2000, 2000, heads=4, d_qk=500)
    blocks = stack_blocks([draw_blocks(cfg, np.random.default_rng(0))])
    for d_out in (2000, 500):
        Y = simulate_outputs(cfg.replace(d_out=d_out), stack_blocks([draw_blocks(cfg.replace(d_out=d_out),
                                                                                 np.random.default_rng(0))]),
                             [np.random.default_rng(1)], models=("surrogate",))["surrogate"][0]
        t_ours = best_of(lambda Y=Y: gram_eigenvalues(Y))
        t_svd = best_of(lambda Y=Y: np.linalg.svd(Y, compute_uv=False))
        print(f"spectrum of Y ({Y.shape[0]} x {Y.shape[1]}): gram_eigenvalues {t_ours:.3f} s, "
              f"numpy.linalg.svd {t_svd:.3f} s, ratio ours/svd = {t_ours / t_svd:.2f}")
    del blocks


if __name__ == "__main__":
    main()
