"""``python -m attnspec.zoo``: simulate, train and diagnose zoo models from the shell.

    python -m attnspec.zoo simulate OUT.fif [--subjects 1 --trials 40 --classes 2 --seed 0]
    python -m attnspec.zoo train ARCH OUT_DIR [--classes 2 --epochs 20 --threads 2]
    python -m attnspec.zoo diagnose CHECKPOINT_DIR [--out DIR --trials 32 --inputs FILE.fif]

``diagnose`` is what ``attnspec diagnose --model CHECKPOINT_DIR`` does for a zoo checkpoint: it
loads the model (:func:`attnspec.zoo.load`), takes the held-out simulated trials recorded in the
checkpoint (or epochs read from an EEG file with the BCI IV 2a-compatible reader), runs
:func:`attnspec.diagnose` and writes the tables (CSV, summary JSON) and the HTML report.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _simulate(a) -> int:
    from .eeg_io import write_recording
    from .eeg_sim import SimConfig, simulate
    from .experiment import CLASSES

    recs = simulate(SimConfig(n_subjects=a.subjects, trials_per_class=a.trials, classes=CLASSES[a.classes], seed=a.seed))
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


def _diagnose(a) -> int:
    from . import diagnose_checkpoint
    from .experiment import write_diagnosis

    inputs = None
    if a.inputs:
        from .checkpoint import load
        from .eeg_io import read_mi_epochs

        model = load(a.checkpoint)
        meta = model.zoo_meta
        ep = read_mi_epochs(a.inputs, meta.get("tmin", 0.5), meta.get("tmax", 2.5),
                            classes=tuple(meta.get("sim", {}).get("classes", ("left_hand", "right_hand"))),
                            resample=model.config.get("sfreq") or meta.get("sim", {}).get("sfreq"))
        inputs = ep.X[:a.trials]
    model, diag = diagnose_checkpoint(a.checkpoint, n_trials=a.trials, inputs=inputs, removal=not a.no_removal,
                                      gradient=not a.no_gradient, seed=a.seed)
    cols = [c for c in ("block", "path", "head", "beta_hat", "r2", "selection_score", "selection", "entropy_ratio",
                        "removal_effect", "michel_importance") if c in diag.heads]
    print(diag.heads[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(repr(diag))
    if a.out:
        for p in write_diagnosis(diag, Path(a.out), report=not a.no_report):
            print(p)
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
    d = sub.add_parser("diagnose", help="diagnose a zoo checkpoint")
    d.add_argument("checkpoint")
    d.add_argument("--out", default=None, help="directory for tables and report")
    d.add_argument("--trials", type=int, default=32)
    d.add_argument("--inputs", default=None, help="EEG file (GDF/EDF/FIF) to take epochs from")
    d.add_argument("--no-removal", action="store_true")
    d.add_argument("--no-gradient", action="store_true")
    d.add_argument("--no-report", action="store_true", help="tables only, no HTML report")
    d.add_argument("--seed", type=int, default=0)
    d.set_defaults(func=_diagnose)
    a = p.parse_args(argv)
    return int(a.func(a) or 0)


if __name__ == "__main__":
    sys.exit(main())
