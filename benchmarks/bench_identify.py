"""Benchmark: identification of beta from surrogate spectra at d = 1000 (prints; asserts nothing).

A. Accuracy: for beta in {0.5, 0.8, 1.0, 1.2}, ``--reps-accuracy`` surrogate spectra (single-head
   attention matrix, convention A, l = d = 1000 unless changed); relative error of the estimate.
B. Coverage: at ``--beta-coverage`` (default 1.0), ``--reps`` (default 100) repetitions of
   identify() with a ``--boot``-draw parametric bootstrap; how many 95 % intervals cover the truth.
C. Goodness of fit against another family: a Marchenko–Pastur spectrum (ratio 1, same first
   moment as beta = 1) with B = 99; the p-value and whether it rejects at 1 %.

Usage: python benchmarks/bench_identify.py [--d 1000] [--reps 100] [--boot 39] [--jobs 2] [--out out/bench_identify.json]
Repetitions run in ``--jobs`` processes (one BLAS thread each).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402


def _config(d: int, gamma: float, beta: float, target: str):
    from attnspec import MHSAConfig

    l = int(round(gamma * d))
    if target == "attention":
        return MHSAConfig.uniform(l, d, target="attention", beta=beta)
    return MHSAConfig.uniform(l, d, heads=4, beta=beta)


def _one(job):
    from attnspec.identify import identify
    from attnspec.simulation import simulate

    d, gamma, beta, target, seed, boot = job
    cfg = _config(d, gamma, beta, target)
    eigs = simulate(cfg, seed=10_000 + seed, models=("surrogate",)).surrogate
    t = time.perf_counter()
    res = identify(eigs, cfg.replace(beta=1.0), n_boot=boot, seed=seed)
    e = res.estimates["beta"]
    return {"beta": beta, "seed": seed, "estimate": e["estimate"], "best_fit": e["best_fit"], "ci_low": e["ci_low"],
            "ci_high": e["ci_high"], "p_value": res.gof["p_value"], "seconds": time.perf_counter() - t}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--d", type=int, default=1000)
    ap.add_argument("--gamma", type=float, default=1.0)
    ap.add_argument("--target", choices=("attention", "output"), default="attention")
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--reps-accuracy", type=int, default=10)
    ap.add_argument("--boot", type=int, default=39)
    ap.add_argument("--beta-coverage", type=float, default=1.0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--skip", default="", help="comma-separated parts to skip among A,B,C")
    ap.add_argument("--out", type=Path, default=Path("out/bench_identify.json"))
    a = ap.parse_args(argv)
    skip = set(a.skip.upper().split(","))
    report: dict = {"d": a.d, "gamma": a.gamma, "target": a.target, "boot": a.boot, "load_before": os.getloadavg()}
    a.out.parent.mkdir(parents=True, exist_ok=True)

    def save():
        a.out.write_text(json.dumps(report, indent=1))

    print(f"identification benchmark: target={a.target}, d={a.d}, l={int(round(a.gamma * a.d))}, jobs={a.jobs}, "
          f"load {os.getloadavg()[0]:.2f}", flush=True)
    with ProcessPoolExecutor(a.jobs) as pool:
        if "A" not in skip:
            t0 = time.perf_counter()
            jobs = [(a.d, a.gamma, b, a.target, s, 0) for b in (0.5, 0.8, 1.0, 1.2) for s in range(a.reps_accuracy)]
            rows = list(pool.map(_one, jobs))
            report["accuracy"] = rows
            print("A. accuracy (no bootstrap):")
            for b in (0.5, 0.8, 1.0, 1.2):
                err = np.array([abs(r["estimate"] / b - 1) for r in rows if r["beta"] == b])
                print(f"   beta={b:.1f}: {len(err)} spectra, max |rel. error| = {err.max():.2e}, mean = {err.mean():.2e}, "
                      f"within 5%: {int(np.sum(err < 0.05))}/{len(err)}")
            print(f"   ({time.perf_counter() - t0:.0f} s)", flush=True)
            save()
        if "B" not in skip:
            t0 = time.perf_counter()
            b = a.beta_coverage
            jobs = [(a.d, a.gamma, b, a.target, 1000 + s, a.boot) for s in range(a.reps)]
            rows = []
            for i, r in enumerate(pool.map(_one, jobs)):
                rows.append(r)
                if (i + 1) % 10 == 0:
                    cov = sum(x["ci_low"] <= b <= x["ci_high"] for x in rows)
                    print(f"   .. {i + 1} reps, covered {cov}", flush=True)
                    report["coverage"] = rows
                    save()
            report["coverage"] = rows
            cov = sum(r["ci_low"] <= b <= r["ci_high"] for r in rows)
            within = sum(abs(r["estimate"] / b - 1) < 0.05 for r in rows)
            width = np.mean([r["ci_high"] - r["ci_low"] for r in rows])
            print(f"B. coverage at beta={b}: 95% interval covers the truth in {cov}/{len(rows)} repetitions "
                  f"(B={a.boot} bootstrap draws each); estimate within 5% in {within}/{len(rows)}; mean width "
                  f"{width:.2e}; max |rel. error| {max(abs(r['estimate'] / b - 1) for r in rows):.2e}; "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)
            save()
    if "C" not in skip:
        from attnspec.identify import identify

        t0 = time.perf_counter()
        l = int(round(a.gamma * a.d))
        rng = np.random.default_rng(123)
        W = rng.standard_normal((l, a.d))
        mp = np.expm1(1.0) * np.linalg.eigvalsh(W @ W.T / a.d)
        res = identify(mp, _config(a.d, a.gamma, 1.0, a.target), n_boot=99, seed=5)
        report["mp_gof"] = {"p_value": res.gof["p_value"], "statistic": res.gof["statistic"],
                            "null_q99": res.gof["null_q99"], "beta_fit": res.fit.theta["beta"]}
        print(f"C. Marchenko-Pastur spectrum vs the {a.target} family: T = W1(bulk) = {res.gof['statistic']:.4g} "
              f"(null 99% quantile {res.gof['null_q99']:.3g}), p = {res.gof['p_value']:.3g} with B = 99 -> "
              f"{'rejects' if res.gof['p_value'] <= 0.01 else 'does not reject'} at 1% "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
        save()
    report["load_after"] = os.getloadavg()
    save()
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
