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

# bound here, not through a module __getattr__: a library that gives every object a ``save`` method (nnsight does)
# would shadow a lazily resolved ``zoo.save``; the checkpoint module imports no torch at import time
from .checkpoint import checkpoint_inputs, is_checkpoint, load, save

__all__ = ["load", "save", "is_checkpoint", "checkpoint_inputs"]
