"""Figures of comparisons and tracking (:mod:`attnspec.compare`): paired differences with their intervals, the
layer spectra of two diagnoses side by side, and trajectories of heads over training steps."""
from __future__ import annotations

import numpy as np

from .base import pyplot
from .diagnosis import _layer_panel

__all__ = ["difference_figure", "spectra_pair_figure", "trajectories_figure", "choose_heads"]


def difference_figure(heads, columns=("score_scale", "selection_score", "removal_effect"), top: int = 12):
    """The ``top`` most changed heads: for each diagnostic, ``X_diff`` with its paired interval, one row per head.

    Parameters
    ----------
    heads : pandas.DataFrame
        :attr:`attnspec.compare.Comparison.heads`.
    columns : sequence of str
        Diagnostics to draw (those with ``X_diff`` columns).
    top : int
        Heads drawn: the largest ``change_size`` first.

    Returns
    -------
    matplotlib.figure.Figure or None
        None when no column is present.

    Examples
    --------
    >>> import pandas as pd
    >>> h = pd.DataFrame({"layer": [0, 0], "head": [0, 1], "change_size": [0.0, 2.0], "score_scale_diff": [0, .5],
    ...                   "score_scale_diff_lo": [0, .4], "score_scale_diff_hi": [0, .6]})
    >>> [ax.get_title() for ax in difference_figure(h).axes]
    ['score_scale']
    """
    cols = [c for c in columns if f"{c}_diff" in heads]
    if not cols:
        return None
    order = heads.sort_values("change_size", ascending=False, kind="stable").head(top) if "change_size" in heads \
        else heads.head(top)
    labels = [f"L{int(r.layer)} H{int(r.head)}" for r in order.itertuples()]
    fig, axes = pyplot().subplots(1, len(cols), figsize=(3.2 * len(cols), 0.32 * len(order) + 1.2), squeeze=False)
    y = np.arange(len(order))[::-1]
    for ax, c in zip(axes[0], cols):
        d, lo, hi = (order[f"{c}_diff{s}"].to_numpy(float) for s in ("", "_lo", "_hi"))
        err = np.vstack([np.where(np.isfinite(lo), d - lo, 0), np.where(np.isfinite(hi), hi - d, 0)])
        ax.errorbar(d, y, xerr=np.abs(err), fmt="o", ms=3, color="tab:red", ecolor="0.4", capsize=2)
        ax.axvline(0, color="0.6", lw=0.8)
        ax.set_title(c, fontsize=9)
        ax.set_yticks(y, labels if ax is axes[0][0] else [""] * len(y), fontsize=7)
        ax.tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    return fig


def spectra_pair_figure(spectra_a: dict, spectra_b: dict, layer: int, labels=("a", "b")):
    """The pooled spectra of one layer in two diagnoses, side by side (:func:`.diagnosis.layer_spectra_figure`'s
    panel).

    Parameters
    ----------
    spectra_a, spectra_b : dict
        ``Diagnosis.spectra`` of the two diagnoses.
    layer : int
    labels : tuple of str
        Panel titles' prefixes.

    Returns
    -------
    matplotlib.figure.Figure or None
        None when neither diagnosis has that layer's spectra.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> s = {0: {"actual": rng.exponential(size=200), "gaussian_equivalent": rng.exponential(size=200)}}
    >>> [ax.get_title() for ax in spectra_pair_figure(s, s, 0).axes]
    ['a: layer 0', 'b: layer 0']
    """
    if layer not in spectra_a and layer not in spectra_b:
        return None
    fig, axes = pyplot().subplots(1, 2, figsize=(8.4, 2.8), sharex=True)
    for ax, sp, lab in zip(axes, (spectra_a, spectra_b), labels):
        if layer in sp:
            _layer_panel(ax, sp[layer], layer)
        ax.set_title(f"{lab}: layer {layer}", fontsize=9)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def choose_heads(table, column: str = "selection_score", n: int = 6) -> list[tuple[int, int]]:
    """The ``n`` heads whose ``column`` moves most over the steps of a long table (range of the values).

    Parameters
    ----------
    table : pandas.DataFrame
        The long table of :func:`attnspec.compare.track`.
    column : str
    n : int

    Returns
    -------
    list of (layer, head)

    Examples
    --------
    >>> import pandas as pd
    >>> t = pd.DataFrame({"step": [0, 0, 1, 1], "layer": [0, 0, 0, 0], "head": [0, 1, 0, 1],
    ...                   "selection_score": [0.1, 0.1, 0.1, 0.9]})
    >>> choose_heads(t, n=1)
    [(0, 1)]
    """
    if column not in table:
        column = "score_scale"
    g = table.groupby(["layer", "head"])[column]
    span = (g.max() - g.min()).fillna(0).sort_values(ascending=False, kind="stable")
    return [(int(a), int(b)) for a, b in span.index[:n]]


def trajectories_figure(table, heads=None, columns=("score_scale", "selection_score", "query_selection_score",
                                                      "removal_effect")):
    """Trajectories of chosen heads over the steps of a long table, one panel per diagnostic, each with its 95 %
    interval as a band.

    Parameters
    ----------
    table : pandas.DataFrame
        ``step``, ``layer``, ``head`` and the diagnostics (with ``_lo`` / ``_hi`` when they have intervals).
    heads : list of (int, int), optional
        Heads drawn (default :func:`choose_heads`).
    columns : sequence of str
        Diagnostics drawn (those present).

    Returns
    -------
    matplotlib.figure.Figure or None
        None when no column is present.

    Examples
    --------
    >>> import pandas as pd
    >>> t = pd.DataFrame({"step": [0, 10, 20], "layer": 0, "head": 0, "score_scale": [1.0, 1.5, 2.0],
    ...                   "score_scale_lo": [0.9, 1.4, 1.9], "score_scale_hi": [1.1, 1.6, 2.1]})
    >>> [ax.get_title() for ax in trajectories_figure(t).axes]
    ['score_scale']
    """
    cols = [c for c in columns if c in table and np.isfinite(table[c].to_numpy(float)).any()]
    if not cols or not len(table):
        return None
    heads = heads if heads is not None else choose_heads(table)
    ncol = min(2, len(cols))
    nrow = -(-len(cols) // ncol)
    fig, axes = pyplot().subplots(nrow, ncol, figsize=(5.2 * ncol, 3.0 * nrow), squeeze=False)
    colors = pyplot().get_cmap("tab10")
    for ax, c in zip(axes.ravel(), cols):
        for k, (layer, head) in enumerate(heads):
            t = table[(table["layer"] == layer) & (table["head"] == head)].sort_values("step")
            x = t["step"].to_numpy(float)
            ax.plot(x, t[c].to_numpy(float), "o-", ms=3, lw=1.2, color=colors(k % 10), label=f"L{layer} H{head}")
            if f"{c}_lo" in t and f"{c}_hi" in t:
                ax.fill_between(x, t[f"{c}_lo"].to_numpy(float), t[f"{c}_hi"].to_numpy(float),
                                color=colors(k % 10), alpha=0.15, lw=0)
        ax.set_title(c, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
    axes.ravel()[0].legend(fontsize=7)
    for ax in axes.ravel()[len(cols):]:
        ax.axis("off")
    fig.tight_layout()
    return fig
