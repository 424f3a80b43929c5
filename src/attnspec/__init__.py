"""attnspec: random-matrix diagnostics of multi-head self-attention.

Layers, each depending only on those above it:

* :mod:`attnspec.config` — :class:`MHSAConfig`, the one configuration type;
* :mod:`attnspec.spectra` — empirical spectra, moments, distances;
* :mod:`attnspec.simulate` — softmax MHSA and its Gaussian-equivalent surrogate;
* :mod:`attnspec.theory` — the limiting spectral law (free probability);
* :mod:`attnspec.models` — adapters that expose attention heads of real models;
* :mod:`attnspec.diagnose` — per-head diagnosis of trained models;
* :mod:`attnspec.report`, :mod:`attnspec.cli` — reports and the command line.
"""
from .config import ConfigError, MHSAConfig

__version__ = "0.1.0"
__all__ = ["ConfigError", "MHSAConfig", "__version__"]
