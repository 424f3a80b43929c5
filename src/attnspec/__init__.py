"""attnspec: random-matrix diagnostics of multi-head self-attention.

Layers, each depending only on those above it:

* :mod:`attnspec.config` — :class:`MHSAConfig`, the one configuration type;
* :mod:`attnspec.spectra` — empirical spectra, moments, distances;
* :mod:`attnspec.simulation` — softmax MHSA and its Gaussian-equivalent surrogate;
* :mod:`attnspec.theory` — the limiting spectral law (operator-valued free probability);
* :mod:`attnspec.models` — adapters exposing the attention heads of real models;
* :mod:`attnspec.diagnostics` — per-head diagnosis of trained models against the Gaussian-equivalent null;
* :mod:`attnspec.report`, :mod:`attnspec.cli` — reports and the command line.

The most used entry points are importable from here: ``MHSAConfig``, ``simulate``, ``solve_law``, ``Law``,
``diagnose``, ``DiagnoseOptions``, ``Diagnosis``, ``compare`` and ``track`` (functions of
:mod:`attnspec.comparing`: ``attnspec.compare(a, b)``) and ``CustomAttention`` (the protocol a custom model
implements to be diagnosed; loaded lazily, so ``import attnspec`` does not import torch).
"""
from importlib import import_module

from .config import ConfigError, MHSAConfig

__version__ = "0.1.0"

_LAZY = {
    "simulate": "attnspec.simulation",
    "SimulationResult": "attnspec.simulation",
    "solve_law": "attnspec.theory",
    "Law": "attnspec.theory",
    "diagnose": "attnspec.diagnostics",
    "Diagnosis": "attnspec.diagnostics",
    "DiagnoseOptions": "attnspec.diagnostics",
    "CustomAttention": "attnspec.models.custom",
    "compare": "attnspec.comparing",
    "track": "attnspec.comparing",
}
__all__ = ["ConfigError", "MHSAConfig", "__version__", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        module = import_module(_LAZY[name])
        return module if module.__name__ == f"{__name__}.{name}" else getattr(module, name)
    raise AttributeError(f"module 'attnspec' has no attribute {name!r}")
