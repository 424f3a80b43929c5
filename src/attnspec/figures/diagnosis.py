"""Figures of a :class:`attnspec.Diagnosis` (the HTML report's two images).

:func:`interval_figure`: one point per head (layer by layer) with its 95 % bootstrap interval, for the
selection score against the verdict threshold and for ``beta_hat`` beside the score scale and the random-head
``beta_null`` (log axis); colours are the head's ``selection`` label.

:func:`layer_spectra_figure`: per layer, the centered output spectrum (``actual``) against its Gaussian-equivalent reference and against the
free sum of its heads: histograms of the positive eigenvalues on 40 logarithmic bins from the 0.5 % quantile to
the maximum of the layer's pooled eigenvalues, each normalized as a density (``density=True``), log-log axes.
"""
from __future__ import annotations

import numpy as np

from .base import pyplot

__all__ = ["layer_spectra_figure", "interval_figure", "plot_diagnosis", "SPECTRA_STYLE", "SELECTION_COLORS"]

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


#: ``selection`` label -> colour of the head's point in :func:`interval_figure`
SELECTION_COLORS = {"selective": "tab:red", "diffuse": "tab:blue", "sparse": "tab:purple", "undetermined": "0.55"}


def _errorbars(ax, x, y, lo, hi, colors) -> None:
    """Points ``y`` at ``x`` with bars from ``lo`` to ``hi`` (NaN bounds: point only)."""
    lo = np.where(np.isfinite(lo), lo, y)
    hi = np.where(np.isfinite(hi), hi, y)
    ax.vlines(x, lo, hi, colors=colors, lw=1.0)
    ax.scatter(x, y, c=colors, s=9, zorder=3)


def _layer_ticks(axes, layer: np.ndarray) -> None:
    """A light vertical line between layers and one tick ``L<layer>`` at each layer's first head."""
    starts = np.flatnonzero(np.r_[True, layer[1:] != layer[:-1]])
    for ax in axes:
        for s in starts[1:]:
            ax.axvline(s - 0.5, color="0.85", lw=0.6)
        ax.tick_params(labelsize=7)
    axes[-1].set_xticks(starts)
    axes[-1].set_xticklabels([f"L{layer[s]}" for s in starts])
    axes[-1].set_xlabel("heads, layer by layer", fontsize=8)


def interval_figure(heads, threshold: float):
    """Per-head intervals: the selection score (top) and ``beta_hat`` (bottom, log axis), laid out.

    Parameters
    ----------
    heads : pandas.DataFrame
        The heads table in layer-major order, with ``layer``, ``selection``, ``selection_score``,
        ``selection_score_lo/_hi``, ``beta_hat``, ``beta_hat_lo/_hi``, ``score_scale`` and optionally ``beta_null``
        (NaN bounds: the point alone).
    threshold : float
        The verdict threshold on the selection score (dashed): *selective* when the whole interval is above it,
        *diffuse*/*sparse* when below.

    Returns
    -------
    matplotlib.figure.Figure or None
        ``None`` when the table has no interval columns.

    Examples
    --------
    >>> import pandas as pd
    >>> h = pd.DataFrame({"layer": [0, 0, 1], "selection": ["selective", "diffuse", "undetermined"],
    ...                   "selection_score": [1.2, -0.1, 0.3], "selection_score_lo": [0.9, -0.3, np.nan],
    ...                   "selection_score_hi": [1.5, 0.1, np.nan], "beta_hat": [1.5, 0.4, 0.8],
    ...                   "beta_hat_lo": [1.3, 0.3, 0.6], "beta_hat_hi": [1.7, 0.5, 1.0], "score_scale": [1.0, 1.0, 1.0]})
    >>> fig = interval_figure(h, float(np.log(2)))
    >>> [t.get_text() for t in fig.axes[1].get_xticklabels()]
    ['L0', 'L1']
    >>> interval_figure(h.drop(columns="selection_score_lo"), 0.7) is None
    True
    """
    if "selection_score_lo" not in heads:
        return None
    x = np.arange(len(heads))
    colors = [SELECTION_COLORS.get(v, "0.55") for v in heads["selection"]]
    fig, (a1, a2) = pyplot().subplots(2, 1, figsize=(min(14.0, 4 + 0.08 * len(x)), 5.2), sharex=True)

    def col(c):
        return heads[c].to_numpy(dtype=float)

    _errorbars(a1, x, col("selection_score"), col("selection_score_lo"), col("selection_score_hi"), colors)
    a1.axhline(threshold, color="k", lw=0.8, ls="--")
    a1.axhline(0.0, color="0.7", lw=0.6)
    a1.set_ylabel("selection score", fontsize=8)
    a1.set_title("95 % bootstrap intervals; dashed: threshold (selective: whole interval above; "
                 "diffuse/sparse: below)", fontsize=8)
    _errorbars(a2, x, col("beta_hat"), col("beta_hat_lo"), col("beta_hat_hi"), colors)
    a2.scatter(x, col("score_scale"), marker="_", color="k", s=30, label="score scale", zorder=4)
    if "beta_null" in heads:
        a2.scatter(x, col("beta_null"), marker="x", color="tab:orange", s=12, label="random head (beta_null)", zorder=4)
    a2.set_yscale("log")
    a2.set_ylabel("beta_hat", fontsize=8)
    a2.legend(fontsize=7, loc="upper left")
    _layer_ticks((a1, a2), heads["layer"].to_numpy())
    fig.tight_layout()
    return fig


def plot_diagnosis(diag, kind: str = "intervals"):
    """A matplotlib figure of a diagnosis, for notebooks: ``'intervals'`` (every head's selection score and
    ``beta_hat`` with their 95 % intervals, :func:`interval_figure`) or ``'spectra'`` (each layer's output spectrum
    against its Gaussian equivalent and the free sum of its heads, :func:`layer_spectra_figure`).

    Raises
    ------
    ValueError
        ``kind`` is neither, or the diagnosis has no such data (no intervals, no layer spectra).

    Examples
    --------
    >>> import pandas as pd
    >>> from attnspec.diagnostics import Diagnosis
    >>> plot_diagnosis(Diagnosis(pd.DataFrame({"layer": [0], "head": [0]}), pd.DataFrame()), "spectra")
    Traceback (most recent call last):
    ValueError: kind='spectra': this diagnosis has no layer spectra
    """
    if kind == "intervals":
        fig = interval_figure(diag.heads, float(diag.summary.get("selection_threshold", np.log(2))))
        if fig is None:
            raise ValueError("kind='intervals': this diagnosis has no intervals (n_boot=0 or fewer than 8 texts)")
        return fig
    if kind == "spectra":
        if not diag.spectra:
            raise ValueError("kind='spectra': this diagnosis has no layer spectra")
        return layer_spectra_figure(diag.spectra)
    raise ValueError(f"kind must be 'intervals' or 'spectra', got {kind!r}")
