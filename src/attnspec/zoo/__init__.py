"""attnspec.zoo: reference attention models for neural signals, simulated EEG, training, checkpoints.

A user of the public API: every model implements :class:`attnspec.CustomAttention`, so
``attnspec.diagnose(model, X)`` (or ``attnspec diagnose --model CHECKPOINT_DIR [--inputs FILE.fif]``)
diagnoses it with its structure masks. Nothing in the rest of the package imports this one, except
the command line's model registry (:func:`attnspec.cli.diagnose`).

Modules (each states its architecture or format in its docstring):

* :mod:`.eeg_sim` — simulated motor-imagery EEG (10-10 montage, 1/f background, mu/beta rhythms,
  contralateral ERD, subject and trial variability), deterministic by seed;
* :mod:`.eeg_io` — MNE write (FIF, EDF) and the BCI IV 2a-compatible epoch reader;
* :mod:`.attention` — :class:`~.attention.MHA`, the structure-masked attention block every model uses;
* models: :mod:`.anisotropic` (temporal + spatial paths, adaptive gate), :mod:`.staged`
  (multi-scale convolutions, then attention over time), :mod:`.spd` (tangent-space covariance
  tokens), :mod:`.diffuse` (flat-attention detection and correction);
* :mod:`.entropy_gap` — the in-model entropy gap to the null; :mod:`.train` — seeded training loop;
* :mod:`.checkpoint` — safetensors + JSON checkpoints and the inputs a checkpoint is diagnosed on.
"""
from __future__ import annotations

__all__ = ["load", "save", "is_checkpoint", "checkpoint_inputs"]


def load(path):
    """Load a zoo checkpoint directory (safetensors + ``attnspec_zoo.json``); model in eval mode.

    Examples
    --------
    >>> import tempfile, pathlib, shutil
    >>> from attnspec.zoo.staged import StagedLocalTemporalNet
    >>> d = save(StagedLocalTemporalNet(3, 64, 2, scales=(7,), n_filters=2, pool=16, stride=16, d_model=8,
    ...                                 n_heads=2, n_layers=1), pathlib.Path(tempfile.mkdtemp(), "ckpt"))
    >>> load(d).arch
    'staged'
    >>> shutil.rmtree(d.parent)
    """
    from .checkpoint import load as _load
    return _load(path)


def save(model, path, meta: dict | None = None):
    """Save a zoo model to a checkpoint directory (see :mod:`attnspec.zoo.checkpoint`); returns the directory.

    Examples
    --------
    >>> import tempfile, pathlib, shutil
    >>> from attnspec.zoo.staged import StagedLocalTemporalNet
    >>> d = save(StagedLocalTemporalNet(3, 64, 2, scales=(7,), n_filters=2, pool=16, stride=16, d_model=8,
    ...                                 n_heads=2, n_layers=1), pathlib.Path(tempfile.mkdtemp(), "ckpt"), {"run": 1})
    >>> is_checkpoint(d), load(d).zoo_meta
    (True, {'run': 1})
    >>> shutil.rmtree(d.parent)
    """
    from .checkpoint import save as _save
    return _save(model, path, meta)


def is_checkpoint(path) -> bool:
    """True if ``path`` is a zoo checkpoint directory (holding ``attnspec_zoo.json``) or that JSON file.

    Examples
    --------
    >>> import tempfile
    >>> is_checkpoint(tempfile.gettempdir())
    False
    """
    from .checkpoint import is_checkpoint as _is
    return _is(path)


def checkpoint_inputs(model, n_trials: int | None = None, inputs=None):
    """Epochs X [n, C, T] (volts) a loaded checkpoint is diagnosed on: read from the EEG file ``inputs``
    (GDF/EDF/FIF) with the checkpoint's epoch window, classes and sampling rate, or by default its
    held-out simulated trials; the first ``n_trials`` (all when None).

    Examples
    --------
    >>> import tempfile, pathlib, shutil
    >>> from attnspec.zoo.eeg_sim import SimConfig
    >>> from attnspec.zoo.staged import StagedLocalTemporalNet
    >>> sim = SimConfig(n_subjects=1, trials_per_class=4, channels=("C3", "Cz", "C4"))
    >>> m = StagedLocalTemporalNet(3, 64, 2, scales=(7,), n_filters=2, pool=16, stride=16, d_model=8, n_heads=2,
    ...                            n_layers=1)
    >>> d = save(m, pathlib.Path(tempfile.mkdtemp(), "ckpt"), dict(sim=sim.to_dict(), tmin=0.5, tmax=1.0))
    >>> checkpoint_inputs(load(d), n_trials=1).shape
    (1, 3, 64)
    >>> shutil.rmtree(d.parent)
    """
    from .checkpoint import checkpoint_inputs as _ci
    return _ci(model, n_trials, inputs)
