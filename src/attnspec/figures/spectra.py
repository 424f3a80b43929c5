"""Histograms of eigenvalue samples on one axis (the frame a law is drawn over, see :mod:`.law`).

Each sample's continuous part (eigenvalues above its atom at zero) is drawn as a density normalized to the
*whole* sample, ``count / (n * bin width)``, so that bars and a law's density (whose integral is
``1 - atom``) share a scale; the atom at zero goes into the legend.
"""
from __future__ import annotations

import numpy as np

from ..spectra import pooled, zero_fraction

__all__ = ["plot_spectra", "spectra_top", "COLORS"]

#: colour of each kind of curve
COLORS = {"softmax": "tab:blue", "surrogate": "tab:orange", "law": "black"}


def spectra_top(samples: dict[str, np.ndarray], edge: float = 0.0) -> float:
    """Right end of the x axis: ``1.05 max(q_99.9%, edge)``, ``q`` the 99.9 % quantile of the pooled samples.

    Examples
    --------
    >>> round(spectra_top({"a": np.arange(1001.0)}, edge=2000.0), 6)
    2100.0
    """
    pools = [pooled(v) for v in samples.values()]
    allx = np.concatenate(pools) if pools else np.zeros(1)
    return float(max(np.quantile(allx, 0.999), edge) * 1.05)


def plot_spectra(ax, samples: dict[str, np.ndarray], bins: int | None = None, log_y: bool | None = None,
                 title: str | None = None, x_max: float | None = None):
    """Overlay eigenvalue histograms (``samples``: label -> eigenvalues, any shape, pooled) on ``ax``.

    Parameters
    ----------
    ax : matplotlib Axes or None
        ``None``: a new 7 x 4.2 inch figure.
    samples : dict of str to array
        Label -> eigenvalues. Known labels (``softmax``, ``surrogate``) get their colour of :data:`COLORS`.
    bins : int, optional
        Equal bins on ``[0, x_max]``; default ``clip(1.5 sqrt(n_max), 30, 150)``.
    log_y : bool, optional
        Log density axis; default: when the tallest bar exceeds 50 times the median bar.
    title : str, optional
    x_max : float, optional
        Right end of the x axis; default :func:`spectra_top`. Eigenvalues beyond it are counted in the legend.

    Returns
    -------
    Axes
        ``ax``, with the y range set from the bars (so a curve drawn later does not rescale it).

    Examples
    --------
    >>> ax = plot_spectra(None, {"softmax": np.random.default_rng(0).exponential(size=500)})
    >>> ax.get_legend().get_texts()[0].get_text()
    'softmax (n=500, 1 beyond plot)'
    """
    if ax is None:
        from .base import pyplot

        ax = pyplot().subplots(figsize=(7, 4.2))[1]
    pools = {k: pooled(v) for k, v in samples.items()}
    top = x_max if x_max is not None else spectra_top(samples)
    if bins is None:  # about sqrt(n) bins, enough to resolve a law without drowning in noise
        bins = int(np.clip(1.5 * np.sqrt(max(v.size for v in pools.values()) if pools else 1), 30, 150))
    edges = np.linspace(0.0, top, bins + 1)
    heavy, dens_max, dens_min = False, 0.0, np.inf
    for label, x in pools.items():
        atom = zero_fraction(x)
        pos = x[x > 1e-9 * max(x.max(), 1e-300)]
        dens = np.histogram(pos, bins=edges)[0] / (x.size * np.diff(edges))
        beyond = int(np.sum(pos > top))
        extra = (f", atom {atom:.3f}" if atom > 1e-3 else "") + (f", {beyond} beyond plot" if beyond else "")
        ax.stairs(dens, edges, label=f"{label} (n={x.size}{extra})", color=COLORS.get(label),
                  fill=len(pools) == 1, alpha=0.9, linewidth=1.2)
        nz = dens[dens > 0]
        if nz.size:
            heavy |= nz.max() / np.median(nz) > 50
            dens_max, dens_min = max(dens_max, nz.max()), min(dens_min, nz.min())
    log = log_y if log_y is not None else heavy
    if log:
        ax.set_yscale("log")
    if dens_max > 0:  # a law's lambda^{-a} singularity at 0 must not squash the histograms
        ax.set_ylim((dens_min / 3, dens_max * 3) if log else (0, dens_max * 1.15))
    ax.set_xlabel("eigenvalue of $Y Y^T$")
    ax.set_ylabel("density")
    ax.set_xlim(0, top)
    if title:
        ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    return ax
