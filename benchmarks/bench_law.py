"""Time ``solve_law`` (one core) against one Monte-Carlo draw at d = 2000 of the same configuration.

Targets (issue 3): single head <= 0.3 s, H = 4 <= 1 s, H = 8 <= 2 s. Issue 16: convention B (iid Gaussian
inputs, every head reads the same X, so identical heads cannot be merged into one block) as fast as convention A,
<= 0.5 s for H <= 8; the second table prints H = 1, 2, 4, 8 in both conventions beside that goal, and convention B
solved without the exchange symmetry of identical heads (``--no-baseline`` skips it; the grid's warm starts stay).
Before issue 16 convention B took 0.48, 0.73, 2.6 and 15.0 s here for H = 1, 2, 4, 8 (2-core box under load).
Prints times and ratios; asserts nothing.
Run with OMP_NUM_THREADS=1 (set below before numpy loads). ``--no-mc`` skips the Monte-Carlo draws.
"""
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse  # noqa: E402
import time  # noqa: E402

from attnspec.config import MHSAConfig  # noqa: E402
from attnspec.theory import build_pencil, solve_law  # noqa: E402


def cases(d: int):
    return {
        "attention matrix (1 head)": MHSAConfig(seq_len=d, d_model=d, d_qk=(d,), d_v=(d,), d_out=d, beta=1.0, target="attention"),
        "output H=1": MHSAConfig.uniform(d, d, heads=1, beta=1.0),
        "output H=4": MHSAConfig.uniform(d, d, heads=4, beta=1.0),
        "output H=8": MHSAConfig.uniform(d, d, heads=8, beta=1.0),
        "output H=4 tied V=K": MHSAConfig.uniform(d, d, heads=4, beta=1.0, values="tied-to-keys"),
        "output H=4 MQA": MHSAConfig.uniform(d, d, heads=4, beta=1.0, key_groups=1, value_groups=1),
        "output H=4 distinct widths": MHSAConfig(seq_len=d, d_model=d, d_qk=(d // 8, d // 8, d // 4, d // 2),
                                                 d_v=(d // 4, d // 8, d // 4, d // 8), d_out=d, beta=1.0),
        "output H=8 distinct widths": MHSAConfig(seq_len=d, d_model=d, d_qk=tuple(d // 16 * (1 + h % 4) for h in range(8)),
                                                 d_v=tuple(d // 16 * (1 + (h + 1) % 3) for h in range(8)), d_out=d, beta=1.0),
    }


def convention_cases(d: int):
    """Uniform heads, gamma = omega = 1, d_qk = d_v = d/H, beta = 1, in both input conventions."""
    return {(inputs, H): MHSAConfig.uniform(d, d, heads=H, d_qk=d // H, d_v=d // H, d_out=d, beta=1.0, inputs=inputs)
            for inputs in ("orthonormal", "gaussian") for H in (1, 2, 4, 8)}


def best_of(fn, reps):
    times = []
    for _ in range(reps):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return min(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--d", type=int, default=2000, help="width of the Monte-Carlo draw")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-mc", action="store_true")
    ap.add_argument("--no-baseline", action="store_true", help="skip the convention-B times without the symmetry")
    args = ap.parse_args()
    from attnspec.simulation import simulate

    print(f"{'configuration':30s} {'pencil':>7s} {'law [s]':>8s} {'MC d=' + str(args.d) + ' [s]':>13s} {'MC/law':>7s}")
    for name, cfg in cases(args.d).items():
        solve_law(cfg)  # warm-up (imports, caches)
        t_law = best_of(lambda c=cfg: solve_law(c), args.reps)
        size = f"{build_pencil(cfg).size}/{build_pencil(cfg, reduce=False).size}"
        if args.no_mc:
            print(f"{name:30s} {size:>7s} {t_law:8.3f}")
            continue
        t0 = time.process_time()
        simulate(cfg, seed=0)
        t_mc = time.process_time() - t0
        print(f"{name:30s} {size:>7s} {t_law:8.3f} {t_mc:13.2f} {t_mc / t_law:7.1f}")
    print("times are CPU seconds of this process (time.process_time), best of --reps; pencil = blocks reduced/full")
    print()
    print("convention A (orthonormal rows) vs B (iid Gaussian inputs), d_qk = d_v = d/H, beta = 1; goal B <= 0.5 s")
    print(f"{'H':>3s} {'A [s]':>7s} {'B [s]':>7s} {'B/A':>5s} {'goal':>6s} {'B no sym [s]':>12s} {'B unknowns':>10s}")
    from attnspec.theory.dyson import DysonSolver
    for H in (1, 2, 4, 8):
        a_cfg, b_cfg = (convention_cases(args.d)[inputs, H] for inputs in ("orthonormal", "gaussian"))
        a, b = (best_of(lambda c=c: solve_law(c), args.reps) for c in (a_cfg, b_cfg))
        before = "" if args.no_baseline else f"{best_of(lambda c=b_cfg: solve_law(c, symmetric=False), 1):12.3f}"
        nu = f"{DysonSolver(build_pencil(b_cfg)).nu}/{DysonSolver(build_pencil(b_cfg), symmetric=False).nu}"
        print(f"{H:3d} {a:7.3f} {b:7.3f} {b / a:5.2f} {'ok' if b <= 0.5 else 'MISSED':>6s} {before:>12s} {nu:>10s}")
    print("B no sym: the same law without the exchange symmetry of identical heads (one run); "
          "B unknowns: Newton unknowns with / without it")


if __name__ == "__main__":
    main()
