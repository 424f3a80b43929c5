"""Checkpoints of zoo models: safetensors weights plus a JSON architecture file (never pickle).

A checkpoint is a directory::

    model.safetensors     state dict (parameters and persistent buffers: input normalization,
                          SPD reference points, filter bank)
    attnspec_zoo.json     {"format": "attnspec.zoo", "version": 1, "arch": ..., "config": {...},
                           "meta": {...}}

``meta`` is free-form; the examples store the simulation config (``meta["sim"]``), the epoch window
(``meta["tmin"]``, ``meta["tmax"]``), the split seed and test fraction, and the measured
accuracies, which lets :func:`checkpoint_inputs` regenerate the held-out trials the model never saw;
or cut epochs from an EEG file with the same window, classes and sampling rate.
The JSON file name differs from transformers' ``config.json`` so the two kinds of directory cannot
be confused (:func:`is_checkpoint`).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

__all__ = ["ARCHS", "save", "load", "is_checkpoint", "build", "checkpoint_inputs", "CONFIG_NAME", "WEIGHTS_NAME"]

CONFIG_NAME = "attnspec_zoo.json"
WEIGHTS_NAME = "model.safetensors"


def _archs() -> dict:
    from .anisotropic import AnisotropicAttentionNet
    from .diffuse import DiffuseCorrectionNet
    from .spd import SPDAttentionNet
    from .staged import StagedLocalTemporalNet

    return {c.arch: c for c in (AnisotropicAttentionNet, StagedLocalTemporalNet, SPDAttentionNet, DiffuseCorrectionNet)}


class _Archs(dict):
    def __missing__(self, key):
        self.update(_archs())
        if key not in self:
            raise KeyError(f"unknown zoo architecture {key!r}; known: {sorted(self)}")
        return self[key]


#: arch name -> model class
ARCHS = _Archs()


def build(arch: str, config: dict):
    """Instantiate architecture ``arch`` with constructor arguments ``config``.

    ``arch`` is one of ``"anisotropic"``, ``"staged"``, ``"spd"``, ``"diffuse"`` (:data:`ARCHS`);
    ``config`` is what ``model.config`` holds, so ``build(m.arch, m.config)`` rebuilds ``m``'s shape.

    Examples
    --------
    >>> m = build("staged", dict(n_channels=3, n_times=64, n_classes=2, scales=(7,), n_filters=2, pool=16,
    ...                          stride=16, d_model=8, n_heads=2, n_layers=1))
    >>> type(m).__name__, m.n_tokens
    ('StagedLocalTemporalNet', 4)
    >>> build("lstm", {})
    Traceback (most recent call last):
    KeyError: "unknown zoo architecture 'lstm'; known: ['anisotropic', 'diffuse', 'spd', 'staged']"
    """
    return ARCHS[arch](**config)


def is_checkpoint(path) -> bool:
    """True if ``path`` is a zoo checkpoint directory (or its JSON file).

    Examples
    --------
    >>> import tempfile
    >>> is_checkpoint(tempfile.gettempdir())
    False
    """
    p = Path(path)
    return (p.is_dir() and (p / CONFIG_NAME).is_file()) or (p.is_file() and p.name == CONFIG_NAME)


def save(model, path, meta: dict | None = None) -> Path:
    """Write ``model`` to directory ``path`` (created); returns the directory.

    Parameters
    ----------
    model : ZooModel
        Its ``arch``, ``config`` and state dict are stored.
    path : path-like
        The checkpoint directory.
    meta : dict, optional
        Free-form JSON metadata (simulation config, epoch window, accuracies).

    Examples
    --------
    >>> import tempfile, pathlib, shutil
    >>> m = build("staged", dict(n_channels=3, n_times=64, n_classes=2, scales=(7,), n_filters=2, pool=16,
    ...                          stride=16, d_model=8, n_heads=2, n_layers=1))
    >>> d = save(m, pathlib.Path(tempfile.mkdtemp(), "ckpt"), meta={"note": "untrained"})
    >>> sorted(p.name for p in d.iterdir()), is_checkpoint(d)
    (['attnspec_zoo.json', 'model.safetensors'], True)
    >>> shutil.rmtree(d.parent)
    """
    from safetensors.torch import save_file

    d = Path(path)
    d.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}
    save_file(state, str(d / WEIGHTS_NAME), metadata={"format": "attnspec.zoo", "arch": model.arch})
    doc = {"format": "attnspec.zoo", "version": 1, "arch": model.arch, "config": model.config, "meta": meta or {}}
    (d / CONFIG_NAME).write_text(json.dumps(doc, indent=1, default=_json_default))
    return d


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON-serializable: {type(o).__name__}")


def load(path):
    """Load a zoo checkpoint: the model in eval mode, with ``model.zoo_meta`` = the stored meta.

    Examples
    --------
    >>> import tempfile, pathlib, shutil, torch
    >>> m = build("staged", dict(n_channels=3, n_times=64, n_classes=2, scales=(7,), n_filters=2, pool=16,
    ...                          stride=16, d_model=8, n_heads=2, n_layers=1)).eval()
    >>> d = save(m, pathlib.Path(tempfile.mkdtemp(), "ckpt"), meta={"note": "untrained"})
    >>> m2 = load(d)
    >>> x = torch.randn(2, 3, 64)
    >>> bool(torch.equal(m(x), m2(x))), m2.training, m2.zoo_meta
    (True, False, {'note': 'untrained'})
    >>> shutil.rmtree(d.parent)
    """
    from safetensors.torch import load_file

    p = Path(path)
    d = p.parent if p.is_file() else p
    if not is_checkpoint(d):
        raise FileNotFoundError(f"{path} is not an attnspec.zoo checkpoint (no {CONFIG_NAME})")
    try:
        doc = json.loads((d / CONFIG_NAME).read_text())
    except (ValueError, RecursionError) as err:
        raise ValueError(f"{d / CONFIG_NAME}: not valid JSON ({err})") from None
    if not isinstance(doc, dict) or doc.get("format") != "attnspec.zoo":
        raise ValueError(f"{d / CONFIG_NAME}: not an attnspec.zoo checkpoint")
    known = _archs()
    if doc.get("arch") not in known:
        raise ValueError(f"{d / CONFIG_NAME}: unknown architecture {doc.get('arch')!r} (known: {sorted(known)})")
    try:
        model = build(doc["arch"], doc.get("config", {}))
    except TypeError as err:           # a configuration key the architecture does not take
        raise ValueError(f"{d / CONFIG_NAME}: its config does not fit architecture {doc['arch']!r} ({err})") from None
    model.load_state_dict(load_file(str(d / WEIGHTS_NAME)))
    model.eval()
    model.zoo_meta = doc.get("meta", {})
    return model


def _heldout_inputs(model, n: int | None = None) -> np.ndarray:
    """The held-out epochs X [n, C, T] (volts) of a loaded checkpoint (see :func:`_heldout_data`)."""
    X, _ = _heldout_data(model)
    return X if n is None else X[:n]


def _heldout_data(model) -> tuple[np.ndarray, np.ndarray]:
    """The held-out trials (X [n, C, T] volts, y [n]) of a loaded checkpoint, regenerated from its meta.

    Needs ``meta["sim"]``; uses ``meta["split_seed"]`` / ``meta["test_fraction"]`` (default 0, 0.25)
    and the epoch window ``meta["tmin"]``/``meta["tmax"]`` (default 0.5, 2.5)."""
    from .eeg_sim import SimConfig, make_dataset
    from .train import split

    meta = getattr(model, "zoo_meta", {}) or {}
    if "sim" not in meta:
        raise ValueError("checkpoint has no meta['sim']: pass inputs explicitly")
    cfg = SimConfig.from_dict(meta["sim"])
    X, y, _ = make_dataset(cfg, meta.get("tmin", 0.5), meta.get("tmax", 2.5))
    _, te = split(y, meta.get("test_fraction", 0.25), meta.get("split_seed", 0))
    return X[te], y[te]


def _file_inputs(model, path, n: int | None = None) -> np.ndarray:
    """Epochs X [n, C, T] (volts) of the EEG file ``path`` (GDF/EDF/FIF, read by
    :func:`attnspec.zoo.eeg_io.read_mi_epochs`) for a loaded checkpoint: the epoch window
    ``meta["tmin"]``/``meta["tmax"]`` (default 0.5, 2.5), the classes of ``meta["sim"]`` (default left and
    right hand) and the model's sampling rate (resampled when the file's differs)."""
    from .eeg_io import read_mi_epochs

    meta = getattr(model, "zoo_meta", {}) or {}
    sim = meta.get("sim", {})
    ep = read_mi_epochs(path, meta.get("tmin", 0.5), meta.get("tmax", 2.5),
                        classes=tuple(sim.get("classes", ("left_hand", "right_hand"))),
                        resample=model.config.get("sfreq") or sim.get("sfreq"))
    return ep.X if n is None else ep.X[:n]


def checkpoint_inputs(model, n: int | None = None, inputs=None) -> np.ndarray:
    """Epochs X [n, C, T] (volts) a loaded checkpoint is diagnosed on; the first ``n`` trials (all when None).

    With ``inputs`` (a GDF/EDF/FIF path): the file's epochs with the checkpoint's window, classes and
    sampling rate (:func:`_file_inputs`). Without: the held-out simulated trials the model never saw,
    regenerated from ``meta["sim"]`` and the stored split (:func:`_heldout_data`).

    Examples
    --------
    >>> import tempfile, pathlib, shutil
    >>> from attnspec.zoo.eeg_sim import SimConfig
    >>> sim = SimConfig(n_subjects=1, trials_per_class=4, channels=("C3", "Cz", "C4"))
    >>> m = build("staged", dict(n_channels=3, n_times=64, n_classes=2, scales=(7,), n_filters=2, pool=16,
    ...                          stride=16, d_model=8, n_heads=2, n_layers=1))
    >>> d = save(m, pathlib.Path(tempfile.mkdtemp(), "ckpt"), meta=dict(sim=sim.to_dict(), tmin=0.5, tmax=1.0))
    >>> checkpoint_inputs(load(d)).shape               # 1 of 4 trials per class held out (test_fraction 0.25)
    (2, 3, 64)
    >>> shutil.rmtree(d.parent)
    """
    return _heldout_inputs(model, n) if inputs is None else _file_inputs(model, inputs, n)
