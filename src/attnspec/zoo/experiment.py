"""One experiment = simulate MI-EEG, split, train a zoo model, evaluate, save, diagnose.

The diagnosis is the public one, ``attnspec.diagnose(model, X_test)`` (the model implements
:class:`attnspec.CustomAttention`). Used by the scripts in ``examples/`` and by ``benchmarks/bench_zoo.py``. The held-out split is by
trial (stratified, all subjects in both sets). Chance level = 1 / n_classes.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from .checkpoint import build, save
from .eeg_sim import SimConfig, make_dataset
from .train import TrainResult, split, train_and_evaluate

__all__ = ["Experiment", "default_sim", "DEFAULT_EPOCHS", "QUICK_EPOCHS", "run_experiment"]

CLASSES = {2: ("left_hand", "right_hand"), 4: ("left_hand", "right_hand", "feet", "tongue")}

#: Training epochs of the examples, ``python -m attnspec.zoo train`` and the benchmark, for every
#: model and class count on :func:`default_sim` data: a fixed count, not a time budget, so that the
#: same seed (and torch thread count) gives the same model on a busy or an idle machine.
DEFAULT_EPOCHS = 20

#: Epochs of the ``quick`` smoke setting (small easy data).
QUICK_EPOCHS = 8


def default_sim(n_classes: int = 2, quick: bool = False, seed: int = 0) -> SimConfig:
    """The simulation used for the results table (quick: a smaller, easier set for smoke runs).

    Full: 3 subjects x 60 trials per class; quick: 1 subject x 40 trials per class with a deeper, less
    variable ERD and a stronger mu rhythm. ``n_classes`` is 2 (hands) or 4 (hands, feet, tongue).

    Examples
    --------
    >>> cfg = default_sim(4, quick=True)
    >>> cfg.n_subjects, cfg.trials_per_class, cfg.classes
    (1, 40, ('left_hand', 'right_hand', 'feet', 'tongue'))
    """
    if quick:
        return SimConfig(n_subjects=1, trials_per_class=40, classes=CLASSES[n_classes], erd_depth=0.85,
                         erd_depth_sd=0.05, mu_uv=14.0, background_uv=5.0, seed=seed)
    return SimConfig(n_subjects=3, trials_per_class=60, classes=CLASSES[n_classes], seed=seed)


@dataclass
class Experiment:
    """What :func:`run_experiment` returns: the trained model, its held-out trials, accuracies, the
    checkpoint metadata and (unless skipped) the diagnosis.

    Examples
    --------
    >>> import numpy as np, torch
    >>> from attnspec.zoo.train import TrainResult
    >>> res = TrainResult(train_accuracy=1.0, test_accuracy=0.5, chance=0.5, seconds=1.0, cpu_seconds=1.0, epochs=1,
    ...                   n_train=2, n_test=2, threads=1)
    >>> exp = Experiment("staged", res, torch.nn.Identity(), np.zeros((2, 3, 64)), np.array([0, 1]), meta={})
    >>> exp.diagnosis, exp.extra, exp.result.test_accuracy
    (None, {}, 0.5)
    """

    arch: str
    result: TrainResult
    model: torch.nn.Module
    X_test: np.ndarray
    y_test: np.ndarray
    meta: dict
    diagnosis: object = None
    extra: dict = field(default_factory=dict)


def run_experiment(arch: str, sim: SimConfig, model_kwargs: dict | None = None, fit_kwargs: dict | None = None,
                   out: str | Path | None = None, diagnose_trials: int = 16, split_seed: int = 0,
                   test_fraction: float = 0.25, tmin: float = 0.5, tmax: float = 2.5, progress: bool = True,
                   diagnose: bool = True) -> Experiment:
    """Simulate -> train -> evaluate -> (save to ``out``) -> (diagnose on held-out trials).

    Parameters
    ----------
    arch : str
        A zoo architecture (:data:`attnspec.zoo.checkpoint.ARCHS`).
    sim : SimConfig
        The simulated data; epochs ``[tmin, tmax)`` seconds after each cue.
    model_kwargs, fit_kwargs : dict, optional
        Constructor arguments of the model, keyword arguments of :func:`~attnspec.zoo.train.train_model`.
    out : path-like, optional
        Writes ``out/checkpoint`` and (when diagnosing) ``out/diagnosis`` (CSV tables, report).
    diagnose_trials : int
        Held-out trials given to :func:`attnspec.diagnose`.
    split_seed, test_fraction : the stratified split (also seeds the model's initialization).
    diagnose : bool
        Run the diagnosis.

    Examples
    --------
    >>> from attnspec.zoo.eeg_sim import SimConfig
    >>> exp = run_experiment("staged", SimConfig(n_subjects=1, trials_per_class=2, channels=("C3", "Cz", "C4")),
    ...                      dict(scales=(7,), n_filters=2, d_model=8, n_heads=2, n_layers=1), dict(epochs=1),
    ...                      test_fraction=0.5, tmax=1.0, progress=False, diagnose=False)
    >>> exp.arch, exp.result.n_train, exp.result.n_test, exp.result.chance, exp.diagnosis
    ('staged', 2, 2, 0.5, None)
    """
    X, y, _ = make_dataset(sim, tmin, tmax)
    tr, te = split(y, test_fraction, split_seed)
    kw = dict(model_kwargs or {})
    if arch == "spd":
        kw.setdefault("sfreq", sim.sfreq)
    torch.manual_seed(split_seed)
    model = build(arch, dict(n_channels=X.shape[1], n_times=X.shape[2], n_classes=len(sim.classes), **kw))
    fk = dict(fit_kwargs or {})
    fk.setdefault("progress", progress)
    res = train_and_evaluate(model, X[tr], y[tr], X[te], y[te], **fk)
    meta = dict(sim=sim.to_dict(), tmin=tmin, tmax=tmax, split_seed=split_seed, test_fraction=test_fraction,
                result={k: v for k, v in res.to_dict().items() if k != "history"})
    exp = Experiment(arch, res, model, X[te], y[te], meta)
    if out is not None:
        out = Path(out)
        save(model, out / "checkpoint", meta)
    if diagnose:
        from ..diagnostics import diagnose as _diagnose

        t0 = time.perf_counter()
        exp.diagnosis = _diagnose(model, X[te][:diagnose_trials], model_name=f"{type(model).__name__} ({arch})")
        exp.extra["diagnose_seconds"] = time.perf_counter() - t0
        if out is not None:
            _write_diagnosis(exp.diagnosis, out / "diagnosis")
    return exp


def _write_diagnosis(diag, directory: Path, report: bool = True) -> list[Path]:
    """CSV tables + summary, and the HTML report (unless ``report`` is False)."""
    directory = Path(directory)
    paths = diag.to_csv(directory)
    if report:
        from ..report import write_report
        paths.append(write_report(diag, directory / "report.html"))
    return paths
