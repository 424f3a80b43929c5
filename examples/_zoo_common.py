"""Shared command line of the EEG zoo examples (train, evaluate, save, diagnose, print a result line)."""
from __future__ import annotations

import argparse

import torch


def parser(description: str, arch: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--classes", type=int, choices=(2, 4), default=2, help="2: left/right hand; 4: + feet, tongue")
    p.add_argument("--epochs", type=int, default=20,
                   help="training epochs: a count, not a time budget, so that the same seed gives the same model on "
                        "a busy or an idle machine")
    p.add_argument("--threads", type=int, default=2, help="torch threads (the weights depend on the thread count)")
    p.add_argument("--seed", type=int, default=0, help="simulation seed")
    p.add_argument("--quick", action="store_true", help="small easy data set, 8 epochs (smoke run)")
    p.add_argument("--no-diagnose", action="store_true")
    p.add_argument("--diagnose-trials", type=int, default=16)
    p.add_argument("--out", default=f"out/eeg_{arch}", help="checkpoint and diagnosis directory")
    return p


def run(arch: str, args, model_kwargs: dict | None = None, lr: float = 3e-3):
    from attnspec.zoo.experiment import QUICK_EPOCHS, default_sim, run_experiment

    torch.set_num_threads(args.threads)
    sim = default_sim(args.classes, quick=args.quick, seed=args.seed)
    epochs = QUICK_EPOCHS if args.quick else args.epochs
    exp = run_experiment(arch, sim, model_kwargs, dict(epochs=epochs, lr=lr),
                         out=args.out, diagnose=not args.no_diagnose, diagnose_trials=args.diagnose_trials)
    return exp


def print_diagnosis(exp) -> None:
    d = exp.diagnosis
    if d is None:
        return
    cols = [c for c in ("block", "path", "head", "beta_hat", "r2", "selection_score", "selection", "entropy_ratio",
                        "removal_effect", "michel_importance") if c in d.heads]
    print(d.heads[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"diagnosis: {d.summary.get('n_selective')} selective / {d.summary.get('n_diffuse')} diffuse heads, "
          f"{exp.extra.get('diagnose_seconds', float('nan')):.1f} s")
