"""``python -m attnspec.zoo``: simulate EEG and train zoo models from the shell.

    python -m attnspec.zoo simulate OUT.fif [--subjects 1 --trials 40 --classes 2 --seed 0]
    python -m attnspec.zoo train ARCH OUT_DIR [--classes 2 --epochs 20 --threads 2]

A trained checkpoint is diagnosed by the library's one command,
``attnspec diagnose --model OUT_DIR/checkpoint --out DIR [--inputs FILE.fif]``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _simulate(a) -> int:
    from .eeg_io import write_recording
    from .eeg_sim import SimConfig, simulate_recordings
    from .experiment import CLASSES

    recs = simulate_recordings(SimConfig(n_subjects=a.subjects, trials_per_class=a.trials, classes=CLASSES[a.classes], seed=a.seed))
    out = Path(a.out)
    for r in recs:
        p = out if len(recs) == 1 else out.with_name(f"{out.stem}_sub-{r.subject + 1:02d}{out.suffix}")
        write_recording(r, p, bci2a_layout=a.bci2a_layout)
        print(p)
    return 0


def _train(a) -> int:
    import torch

    from .experiment import default_sim, run_experiment

    torch.set_num_threads(a.threads)
    exp = run_experiment(a.arch, default_sim(a.classes, quick=a.quick, seed=a.seed), None,
                         dict(epochs=a.epochs, lr=3e-3), out=a.out, diagnose=False)
    print(exp.result.line(a.arch))
    print(f"checkpoint: {Path(a.out) / 'checkpoint'}")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m attnspec.zoo", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("simulate", help="write simulated MI-EEG to .fif/.edf")
    s.add_argument("out")
    s.add_argument("--subjects", type=int, default=1)
    s.add_argument("--trials", type=int, default=40, help="trials per class")
    s.add_argument("--classes", type=int, default=2, choices=(2, 4))
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--bci2a-layout", action="store_true", help="EEG-0.. labels and 3 EOG channels, as in BCI IV 2a")
    s.set_defaults(func=_simulate)
    t = sub.add_parser("train", help="train a zoo model on simulated data and save a checkpoint")
    t.add_argument("arch", choices=("anisotropic", "staged", "spd", "diffuse"))
    t.add_argument("out")
    t.add_argument("--classes", type=int, default=2, choices=(2, 4))
    t.add_argument("--epochs", type=int, default=20, help="training epochs (a count, never a time budget)")
    t.add_argument("--threads", type=int, default=2, help="torch threads (the weights depend on the thread count)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--quick", action="store_true")
    t.set_defaults(func=_train)
    a = p.parse_args(argv)
    return int(a.func(a) or 0)


if __name__ == "__main__":
    sys.exit(main())
