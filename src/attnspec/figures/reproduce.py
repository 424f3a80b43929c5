"""Figures of published studies recomputed by :mod:`attnspec.reproduce`.

``hayase2025_figure``: Hayase, Collins and Karakida (2025), the bulk of the squared singular values of
``sqrt(d) A`` (one softmax head) against the Gaussian-equivalent law and Marchenko–Pastur of the same variance
``sigma^2 = e^{beta^2} - 1`` (density ``sqrt((4 sigma^2 - x) x) / (2 pi sigma^2 x)`` on ``[0, 4 sigma^2]``).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..theory import closed_forms as cf
from .base import pyplot, save_figure
from .law import plot_law

__all__ = ["hayase2025_figure"]


def _density_panel(ax, result, hist: dict[str, np.ndarray]) -> None:
    s = result.summary
    law, s2 = result.law, s["sigma2"]
    edges = np.append(hist["bin_lo"], hist["bin_hi"][-1])
    for name, color in (("softmax", "tab:blue"), ("linear", "tab:orange")):
        r = s[name]
        ax.stairs(hist[name], edges, color=color, fill=name == "softmax", alpha=0.55 if name == "softmax" else 1.0,
                  label=f"{'sqrt(d) A' if name == 'softmax' else 'linear model'} (KS law {r['ks_to_law']:.3f}, "
                        f"MP {r['ks_to_mp']:.3f})")
    x = np.linspace(0.0, edges[-1], 1200)
    plot_law(law, ax, label=f"Gaussian-equivalent law (edge {law.right_edge:.4g})", frame=False)
    ax.plot(x, cf.marchenko_pastur_density(x, s2), color="tab:red", ls="--", lw=1.3,
            label=f"Marchenko-Pastur (edge {4 * s2:.4g})")
    # the density blows up at 0 (both laws): scale the axis to the bulk past the first bins, say so
    top = 1.3 * max(hist["softmax"][4:].max(), hist["linear"][4:].max())
    ax.set_ylim(0, top)
    ax.text(0.35, 0.97, "axis clipped: the densities blow up at 0", transform=ax.transAxes, fontsize=7, va="top")
    ax.set_xlabel("squared singular value of sqrt(d) A (top %d removed)" % s["n_remove"])
    ax.set_ylabel("density")
    ax.legend(fontsize=7)


def _rank_panel(bx, result) -> None:
    law, s2 = result.law, result.summary["sigma2"]
    first = result.bulk["softmax"][0][::-1]
    k = np.arange(1, first.size + 1)
    u = 1.0 - (k - 0.5) / first.size
    bx.plot(k, first, ".", ms=2, color="tab:blue", label="sqrt(d) A, draw 1")
    bx.plot(k, result.bulk["linear"][0][::-1], ".", ms=2, color="tab:orange", label="linear model, draw 1")
    bx.plot(k, law.quantile(u), color="black", lw=1.2, label="law quantiles")
    bx.plot(k, cf.marchenko_pastur_quantile(u, s2), color="tab:red", ls="--", lw=1.2, label="MP quantiles")
    bx.set_xlabel("rank k")
    bx.set_ylabel("k-th largest squared singular value")
    bx.legend(fontsize=7)


def hayase2025_figure(result, hist: dict[str, np.ndarray], path: str | Path) -> Path:
    """Two panels saved to ``path``: the bulk histograms (``hist``: :meth:`Hayase2025.histogram`) with the law's
    and Marchenko–Pastur's densities; the sorted bulk of the first draw against both laws' quantiles at levels
    ``1 - (k - 1/2)/n``.

    Parameters
    ----------
    result : attnspec.reproduce.Hayase2025
    hist : dict of str to array
        Bin edges ``bin_lo``, ``bin_hi`` and the densities ``softmax``, ``linear``.
    path : str or Path
        The image to write (:meth:`Hayase2025.write` uses ``out_dir/hayase2025.png``).

    Returns
    -------
    Path
        ``path``, written (atomically, by :func:`attnspec.figures.save_figure`).

    Examples
    --------
    >>> import tempfile
    >>> from attnspec.reproduce import hayase2025
    >>> r = hayase2025(d=32, draws=1)
    >>> hayase2025_figure(r, r.histogram(), Path(tempfile.mkdtemp()) / "h.png").name
    'h.png'
    """
    s = result.summary
    fig, (ax, bx) = pyplot().subplots(1, 2, figsize=(11, 4.2))
    _density_panel(ax, result, hist)
    _rank_panel(bx, result)
    conv = "orthonormal inputs" if s["inputs"] == "orthonormal" else "iid Gaussian inputs"
    fig.suptitle(f"Hayase, Collins & Karakida (2025): d = d_qk = {s['d']}, beta = {s['beta']:g}, {s['draws']} draws, "
                 f"top {s['n_remove']} removed ({conv})", fontsize=9)
    return save_figure(fig, path)
