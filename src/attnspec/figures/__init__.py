"""Every figure attnspec draws, grouped by what it shows (matplotlib, Agg backend, imported only when drawing).

* :mod:`.base` — the Agg backend, atomic saving (:func:`save_figure`), inline PNG for HTML (:func:`png_data_uri`);
* :mod:`.spectra` — histograms of eigenvalue samples (:func:`plot_spectra`);
* :mod:`.law` — :func:`plot_law`, the one way to draw a limiting law: alone, over histograms, or as a line;
* :mod:`.claims` — the theory figure set (``attnspec figures``): law vs Monte-Carlo, edge vs beta, sharing, tying;
* :mod:`.structure` — the structure figure set from sweeps (``attnspec figures --set structure``);
* :mod:`.sweeps` — columns of a sweep against an axis (``attnspec sweep --plot``);
* :mod:`.demo` — the demo's law-vs-simulation figures (``attnspec demo``);
* :mod:`.reproduce` — figures of published studies (``attnspec reproduce``);
* :mod:`.diagnosis` — a diagnosis's intervals and per-layer spectra (the HTML report; :func:`plot_diagnosis` in
  notebooks);
* :mod:`.compare` — a comparison's paired differences (:func:`difference_figure`) and a tracking's trajectories
  (:func:`trajectories_figure`).

Densities are those of docs/theory.md ("Model and normalization"): eigenvalues of ``Y Y^T``, each histogram
normalized to its whole sample and a law's continuous density integrating to ``1 - atom``. Importing this
package does not import matplotlib; :mod:`.claims`, :mod:`.structure`, :mod:`.demo` and :mod:`.reproduce` are
imported on their own (they pull in the simulator, the solver or the sweep runner).
"""
from .base import png_data_uri, pyplot, save_figure
from .compare import difference_figure, trajectories_figure
from .diagnosis import plot_diagnosis
from .law import law_label, plot_law
from .spectra import plot_spectra

__all__ = ["plot_law", "law_label", "plot_spectra", "plot_diagnosis", "difference_figure", "trajectories_figure",
           "save_figure", "png_data_uri", "pyplot"]
