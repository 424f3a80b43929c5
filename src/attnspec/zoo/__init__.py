"""attnspec.zoo: reference attention models for neural signals, simulated EEG, training, checkpoints.

Modules (each states its architecture or format in its docstring):

* :mod:`.eeg_sim` — simulated motor-imagery EEG (10-10 montage, 1/f background, mu/beta rhythms,
  contralateral ERD, subject and trial variability), deterministic by seed;
* :mod:`.eeg_io` — MNE write (FIF, EDF) and the BCI IV 2a-compatible epoch reader;
* :mod:`.attention` — :class:`~.attention.MHA`, the recording attention block every model uses;
* models: :mod:`.anisotropic` (temporal + spatial paths, adaptive gate), :mod:`.staged`
  (multi-scale convolutions, then attention over time), :mod:`.spd` (tangent-space covariance
  tokens), :mod:`.diffuse` (diffuse-attention detection and correction);
* :mod:`.selection` — the entropy-vs-null diffuseness score; :mod:`.train` — seeded training loop;
* :mod:`.checkpoint` — safetensors + JSON checkpoints; :mod:`.adapter` — glue to
  :func:`attnspec.diagnose`.

Entry points for the command line: :func:`is_checkpoint`, :func:`load`,
:func:`diagnose_checkpoint`.
"""
from __future__ import annotations

__all__ = ["load", "save", "is_checkpoint", "diagnose_checkpoint", "diagnose_model", "ARCH_NAMES"]

ARCH_NAMES = ("anisotropic", "staged", "spd", "diffuse")


def load(path):
    """Load a zoo checkpoint directory (safetensors + ``attnspec_zoo.json``); model in eval mode."""
    from .checkpoint import load as _load
    return _load(path)


def save(model, path, meta: dict | None = None):
    """Save a zoo model to a checkpoint directory (see :mod:`attnspec.zoo.checkpoint`)."""
    from .checkpoint import save as _save
    return _save(model, path, meta)


def is_checkpoint(path) -> bool:
    """True if ``path`` is a zoo checkpoint directory."""
    from .checkpoint import is_checkpoint as _is
    return _is(path)


def diagnose_model(model, X, **kwargs):
    """:func:`attnspec.diagnose` on a zoo model and epochs X [B, C, T]; tables carry
    ``block`` and ``path`` columns."""
    from .adapter import diagnose_model as _dm
    return _dm(model, X, **kwargs)


def diagnose_checkpoint(path, n_trials: int = 32, inputs=None, **kwargs):
    """Load a checkpoint and diagnose it on ``inputs`` (epochs [B, C, T], volts) or, by default, on
    the first ``n_trials`` held-out simulated trials regenerated from the checkpoint's metadata.
    Returns ``(model, diagnosis)``."""
    from .checkpoint import heldout_inputs
    model = load(path)
    X = heldout_inputs(model, n_trials) if inputs is None else inputs
    return model, diagnose_model(model, X, **kwargs)
