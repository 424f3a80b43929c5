"""Benchmark: identification on softmax spectra (prints figures; asserts nothing).

A. Accuracy on surrogate spectra (no bootstrap): for beta in {0.5, 0.8, 1.0, 1.2}, ``--reps-accuracy``
   surrogate spectra of the single-head attention matrix at l = d = ``--d``; relative error of the fit.
B. Coverage on **softmax** spectra: for every l = d in ``--sizes``, beta in ``--betas`` and target in
   ``--targets`` (``attention``: single-head attention matrix; ``output``: four-head output,
   d_qk = d_v = d/4), up to ``--reps`` softmax spectra, each identified (beta free) with a
   ``--boot``-draw parametric bootstrap of ``--model`` (default softmax); how many 95% intervals
   cover the true beta, and how often the goodness-of-fit test rejects at 5% (p <= 0.05) a spectrum of
   the fitted family. Repetitions are interleaved across the cases and stop when ``--budget-min``
   minutes have passed, so every case gets about the same count (printed).
C. Goodness of fit against another family: ``--mp-reps`` Marchenko-Pastur spectra (ratio 1, same
   first moment as beta = 1, l = d = ``--d``), each identified against the attention and the
   four-head output family (beta free) with ``--mp-boot`` draws; the rejection rate at 5% (and at 1%
   when ``--mp-boot`` >= 99).
D. Timing: a joint (beta, psi) fit with a 29-draw softmax bootstrap at l = d = 1000, attention and
   four-head output, in this process (one BLAS thread), wall and CPU seconds (the CPU figure is the one
   to compare on a shared machine); printed beside the time the previous version (commit e75f7bc,
   surrogate bootstrap, exact laws) took. With ``--joint-heads 1`` (default) also beta, psi and scale
   with the head count profiled over {2, 4, 8}.

Usage (full): python benchmarks/bench_identify.py --reps 100 --budget-min 600
Reduced (~12-15 min on 2 cores): python benchmarks/bench_identify.py --budget-min 6 --boot 19 --reps-accuracy 2 \
    --mp-reps 3 --joint-heads 0
Repetitions run in ``--jobs`` processes (one BLAS thread each).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402

#: Seconds the previous version (commit e75f7bc: surrogate bootstrap, refits on exact laws) took for part D's
#: joint (beta, psi) fit with B = 29 at l = d = 1000, measured on this machine (2 shared cores, one BLAS thread).
OLD_JOINT_SECONDS = {"attention": 162.1, "output": None}
OLD_JOINT_NOTE = {"attention": "", "output": "over 10 min (issue 16; not re-measured)"}


def _config(d: int, beta: float, target: str, gamma: float = 1.0):
    from attnspec import MHSAConfig

    l = int(round(gamma * d))
    if target == "attention":
        return MHSAConfig.uniform(l, d, target="attention", beta=beta)
    return MHSAConfig.uniform(l, d, heads=4, beta=beta)


def _accuracy(job):
    from attnspec.identify import identify
    from attnspec.simulation import simulate

    d, beta, seed = job
    cfg = _config(d, beta, "attention")
    eigs = simulate(cfg, seed=10_000 + seed, models=("surrogate",)).surrogate
    res = identify(eigs, cfg.replace(beta=1.0), n_boot=0, model="surrogate")
    return {"beta": beta, "seed": seed, "estimate": res.estimates["beta"]["estimate"]}


def _coverage(job):
    from attnspec.identify import identify
    from attnspec.simulation import simulate

    d, beta, target, rep, boot, model = job
    cfg = _config(d, beta, target)
    seed = 1_000_003 * rep + 7919 * d + int(1000 * beta) + (0 if target == "attention" else 500_000)
    eigs = simulate(cfg, seed=seed, models=("softmax",)).softmax
    t = time.perf_counter()
    res = identify(eigs, cfg.replace(beta=1.0), n_boot=boot, seed=rep, model=model)
    e = res.estimates["beta"]
    return {"d": d, "beta": beta, "target": target, "rep": rep, "estimate": e["estimate"], "best_fit": e["best_fit"],
            "ci_low": e["ci_low"], "ci_high": e["ci_high"], "bias": e["bias"], "sd": e["sd"],
            "p_value": res.gof["p_value"], "seconds": time.perf_counter() - t}


def _mp(job):
    from attnspec.identify import identify

    d, target, rep, boot = job
    rng = np.random.default_rng(123 + rep)
    W = rng.standard_normal((d, d))
    mp = np.expm1(1.0) * np.linalg.eigvalsh(W @ W.T / d)
    res = identify(mp, _config(d, 1.0, target), n_boot=boot, seed=5 + rep, model="softmax")
    return {"target": target, "rep": rep, "p_value": res.gof["p_value"], "statistic": res.gof["statistic"],
            "null_q99": res.gof["null_q99"], "beta_fit": res.fit.theta["beta"]}


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(s) for s in text.split(","))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--d", type=int, default=1000, help="size for parts A and C")
    ap.add_argument("--sizes", default="800,1000", help="l = d values of part B")
    ap.add_argument("--betas", default="0.5,1.0,1.3", help="true betas of part B")
    ap.add_argument("--targets", default="attention,output", help="targets of part B")
    ap.add_argument("--reps", type=int, default=100, help="most repetitions per case in part B")
    ap.add_argument("--budget-min", type=float, default=600.0, help="part B stops starting repetitions after this")
    ap.add_argument("--boot", type=int, default=39, help="bootstrap draws per repetition in part B")
    ap.add_argument("--model", choices=("softmax", "surrogate"), default="softmax", help="bootstrap model, part B")
    ap.add_argument("--reps-accuracy", type=int, default=10)
    ap.add_argument("--mp-reps", type=int, default=10)
    ap.add_argument("--mp-boot", type=int, default=19)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--joint-heads", type=int, default=1, help="part D: also time beta, psi, scale with heads 2,4,8 "
                                                                  "(0: skip)")
    ap.add_argument("--skip", default="", help="comma-separated parts to skip among A,B,C,D")
    ap.add_argument("--out", type=Path, default=Path("out/bench_identify.json"))
    a = ap.parse_args(argv)
    skip = set(a.skip.upper().split(","))
    sizes = tuple(int(x) for x in _floats(a.sizes))
    betas = _floats(a.betas)
    targets = tuple(a.targets.split(","))
    report: dict = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()},
                    "load_before": os.getloadavg()}
    a.out.parent.mkdir(parents=True, exist_ok=True)

    def save():
        a.out.write_text(json.dumps(report, indent=1))

    print(f"identification benchmark: jobs={a.jobs}, load {os.getloadavg()[0]:.2f}", flush=True)
    with ProcessPoolExecutor(a.jobs) as pool:
        if "A" not in skip:
            t0 = time.perf_counter()
            bs = (0.5, 0.8, 1.0, 1.2)
            rows = list(pool.map(_accuracy, [(a.d, b, s) for b in bs for s in range(a.reps_accuracy)]))
            report["accuracy"] = rows
            print(f"A. accuracy on surrogate spectra, attention, l = d = {a.d} (no bootstrap):")
            for b in bs:
                err = np.array([abs(r["estimate"] / b - 1) for r in rows if r["beta"] == b])
                print(f"   beta={b:.1f}: {len(err)} spectra, max |rel. error| = {err.max():.2e}, "
                      f"mean = {err.mean():.2e}")
            print(f"   ({time.perf_counter() - t0:.0f} s)", flush=True)
            save()
        if "B" not in skip:
            t0 = time.perf_counter()
            cases = [(d, b, t) for t in targets for d in sizes for b in betas]
            jobs = [(d, b, t, rep, a.boot, a.model) for rep in range(a.reps) for (d, b, t) in cases]
            print(f"B. coverage on softmax spectra ({a.model} bootstrap, B = {a.boot}), {len(cases)} cases, up to "
                  f"{a.reps} repetitions each, budget {a.budget_min:g} min", flush=True)
            it = iter(jobs)
            running = set()
            rows = []
            for _ in range(2 * a.jobs):
                j = next(it, None)
                if j is not None:
                    running.add(pool.submit(_coverage, j))
            while running:
                done, running = wait(running, return_when=FIRST_COMPLETED)
                for f in done:
                    rows.append(f.result())
                    if time.perf_counter() - t0 < 60 * a.budget_min:
                        j = next(it, None)
                        if j is not None:
                            running.add(pool.submit(_coverage, j))
                if len(rows) % 12 == 0:
                    cov = sum(r["ci_low"] <= r["beta"] <= r["ci_high"] for r in rows)
                    print(f"   .. {len(rows)} done, covered {cov}, {time.perf_counter() - t0:.0f} s", flush=True)
                    report["coverage"] = rows
                    save()
            report["coverage"] = rows
            summary = []
            print(f"   {'target':9s} {'l=d':>5s} {'beta':>5s} {'reps':>5s} {'covered':>8s} {'cover%':>7s} "
                  f"{'GOF rej@5%':>10s} {'mean est':>9s} {'mean width':>10s} {'s/rep':>6s}")
            for (d, b, t) in cases:
                rs = [r for r in rows if (r["d"], r["beta"], r["target"]) == (d, b, t)]
                if not rs:
                    continue
                cov = sum(r["ci_low"] <= b <= r["ci_high"] for r in rs)
                rej = sum(r["p_value"] <= 0.05 for r in rs)
                row = {"target": t, "d": d, "beta": b, "reps": len(rs), "covered": cov, "gof_rejected_5pct": rej,
                       "mean_estimate": float(np.mean([r["estimate"] for r in rs])),
                       "mean_width": float(np.mean([r["ci_high"] - r["ci_low"] for r in rs])),
                       "seconds_per_rep": float(np.mean([r["seconds"] for r in rs]))}
                summary.append(row)
                print(f"   {t:9s} {d:5d} {b:5.2f} {len(rs):5d} {cov:8d} {100 * cov / len(rs):6.1f}% "
                      f"{100 * rej / len(rs):9.1f}% {row['mean_estimate']:9.4f} {row['mean_width']:10.4f} "
                      f"{row['seconds_per_rep']:6.1f}")
            n = len(rows)
            cov = sum(r["ci_low"] <= r["beta"] <= r["ci_high"] for r in rows)
            rej = sum(r["p_value"] <= 0.05 for r in rows)
            report["coverage_summary"] = summary
            print(f"   all: {cov}/{n} intervals cover ({100 * cov / max(n, 1):.1f}%), GOF rejects {rej}/{n} "
                  f"({100 * rej / max(n, 1):.1f}%) at 5%; {time.perf_counter() - t0:.0f} s", flush=True)
            save()
        if "C" not in skip and a.mp_reps > 0:
            t0 = time.perf_counter()
            rows = list(pool.map(_mp, [(a.d, t, r, a.mp_boot) for t in ("attention", "output")
                                       for r in range(a.mp_reps)]))
            report["mp_gof"] = rows
            print(f"C. Marchenko-Pastur spectra (l = d = {a.d}) against the beta-free families, softmax bootstrap "
                  f"B = {a.mp_boot}:")
            for t in ("attention", "output"):
                ps = np.array([r["p_value"] for r in rows if r["target"] == t])
                line = f"   {t:9s}: rejected at 5% in {int(np.sum(ps <= 0.05))}/{ps.size}"
                if a.mp_boot >= 99:
                    line += f", at 1% in {int(np.sum(ps <= 0.01))}/{ps.size}"
                print(line + f" (largest p {ps.max():.3g})")
            print(f"   ({time.perf_counter() - t0:.0f} s)", flush=True)
            save()
    if "D" not in skip:
        from attnspec.identify import identify
        from attnspec.simulation import simulate

        print("D. joint fits, softmax spectrum, l = d = 1000, B = 29, this process (wall and CPU seconds):")
        report["joint"] = {}
        cases = [("attention", ("beta", "psi"), None), ("output", ("beta", "psi"), None)]
        if a.joint_heads:
            cases.append(("output", ("beta", "psi", "scale"), (2, 4, 8)))
        for t, free, heads in cases:
            cfg = _config(1000, 1.0, t)
            eigs = simulate(cfg, seed=7, models=("softmax",)).softmax
            t0, c0 = time.perf_counter(), time.process_time()
            res = identify(eigs, cfg, free=free, heads=heads, n_boot=29, seed=1, model="softmax")
            sec, cpu = time.perf_counter() - t0, time.process_time() - c0
            est = res.estimates
            name = f"{t}:{','.join(free)}" + (f":heads{','.join(map(str, heads))}" if heads else "")
            old = OLD_JOINT_SECONDS.get(t) if not heads else None
            report["joint"][name] = {"seconds": sec, "cpu_seconds": cpu, "old_seconds": old, "estimates": est,
                                     "heads": res.heads, "timing": res.timing, "load": os.getloadavg()}
            old_txt = (f"{old:.1f} s" if old else OLD_JOINT_NOTE[t]) if not heads else "not measured"
            parts = []
            for k, e in est.items():
                parts.append(f"{k} {e['estimate']:.4f} [{e['ci_low']:.4f}, {e['ci_high']:.4f}]" if e["identified"]
                             else f"{k} not identified")
            if heads:
                parts.append(f"heads {res.heads['selected']} set {res.heads['confidence_set']}")
            print(f"   {name}: {sec:6.1f} s wall, {cpu:6.1f} s CPU (previous version: {old_txt}); "
                  f"{'; '.join(parts)} (true beta 1, psi {cfg.d_qk[0] / 1000:g}, heads {cfg.n_heads}); "
                  f"{res.timing['law_solves']} law solves, load {os.getloadavg()[0]:.1f}", flush=True)
            save()
    report["load_after"] = os.getloadavg()
    save()
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
