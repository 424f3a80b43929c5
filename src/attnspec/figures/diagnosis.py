"""Figures of a :class:`attnspec.Diagnosis` (the HTML report's spectra panel).

Per layer, the centered output spectrum (``actual``) against its Gaussian-equivalent reference and against the
free sum of its heads: histograms of the positive eigenvalues on 40 logarithmic bins from the 0.5 % quantile to
the maximum of the layer's pooled eigenvalues, each normalized as a density (``density=True``), log-log axes.
"""
from __future__ import annotations

import numpy as np

from .base import pyplot

__all__ = ["layer_spectra_figure", "SPECTRA_STYLE"]

#: spectrum name -> (colour, histogram keywords), in drawing order
SPECTRA_STYLE = {"gaussian_equivalent": ("tab:orange", {"histtype": "stepfilled", "alpha": 0.35}),
                 "free_sum": ("tab:green", {"histtype": "step", "lw": 1.2, "ls": "--"}),
                 "actual": ("tab:blue", {"histtype": "step", "lw": 1.5})}


def _layer_panel(ax, spectra: dict[str, np.ndarray], layer: int) -> None:
    from matplotlib.ticker import NullLocator

    allv = np.concatenate([v for v in spectra.values() if len(v)])
    pos = allv[allv > 0]
    if not pos.size:
        return
    bins = np.logspace(np.log10(np.quantile(pos, 0.005)), np.log10(pos.max()), 40)
    for name, (color, kw) in SPECTRA_STYLE.items():
        v = spectra.get(name, np.array([]))
        v = v[v > 0]
        if v.size:
            ax.hist(v, bins=bins, density=True, color=color, label=name.replace("_", " "), **kw)
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):   # no minor ticks: hundreds of tick artists, seconds of layout
        axis.set_minor_locator(NullLocator())
    ax.set_title(f"layer {layer}", fontsize=9)
    ax.tick_params(labelsize=7)
    ax.set_xlabel("eigenvalue of Y Y^T", fontsize=8)


def layer_spectra_figure(spectra: dict[int, dict[str, np.ndarray]]):
    """One panel per layer (three per row), laid out; ``None`` when there is no layer.

    Parameters
    ----------
    spectra : dict
        Layer -> spectrum name (``actual``, ``gaussian_equivalent``, ``free_sum``) -> eigenvalues
        (``Diagnosis.spectra``).

    Returns
    -------
    matplotlib.figure.Figure or None
        Pass it to :func:`attnspec.figures.base.png_data_uri` to inline it.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> fig = layer_spectra_figure({0: {"actual": rng.exponential(size=200), "free_sum": rng.exponential(size=200)}})
    >>> [ax.get_title() for ax in fig.axes]
    ['layer 0']
    >>> layer_spectra_figure({}) is None
    True
    """
    layers = sorted(spectra)
    if not layers:
        return None
    ncol = min(3, len(layers))
    nrow = -(-len(layers) // ncol)
    fig, axes = pyplot().subplots(nrow, ncol, figsize=(4.2 * ncol, 2.6 * nrow), squeeze=False)
    for ax, i in zip(axes.ravel(), layers):
        _layer_panel(ax, spectra[i], i)
    axes.ravel()[0].legend(fontsize=7)
    for ax in axes.ravel()[len(layers):]:
        ax.axis("off")
    fig.tight_layout()
    return fig
