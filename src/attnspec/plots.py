"""Matplotlib figures of spectra: histograms of eigenvalue samples, optionally with a law's density.

Histograms show the continuous part (eigenvalues above the atom at zero) as a density normalized
to the *whole* sample, so that bars and a law's density (whose integral is ``1 - atom``) share a
scale; the atom at zero is reported in the legend.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .spectra import atom_at_zero, pooled  # noqa: E402

__all__ = ["plot_spectra", "save_figure"]

_COLORS = {"softmax": "tab:blue", "surrogate": "tab:orange", "law": "black"}


def plot_spectra(ax, samples: dict[str, np.ndarray], law=None, bins: int | None = None, log_y: bool | None = None,
                 title: str | None = None, x_max: float | None = None):
    """Overlay eigenvalue histograms (``samples``: label -> eigenvalues) and optionally a law.

    ``law`` needs ``grid``, ``density``, ``atom_at_zero`` and ``right_edge`` (an
    ``attnspec.theory.Law``). ``log_y=None`` picks a log scale when the tail is heavy. The x range
    stops at the 99.9% quantile of the pooled samples (or the law's edge, whichever is larger)
    unless ``x_max`` is given; eigenvalues beyond it are counted in the legend.
    """
    pools = {k: pooled(v) for k, v in samples.items()}
    allx = np.concatenate(list(pools.values())) if pools else np.zeros(1)
    top = x_max if x_max is not None else max(np.quantile(allx, 0.999), getattr(law, "right_edge", 0.0)) * 1.05
    if bins is None:  # about sqrt(n) bins, enough to resolve the law without drowning in noise
        bins = int(np.clip(1.5 * np.sqrt(max(v.size for v in pools.values()) if pools else 1), 30, 150))
    edges = np.linspace(0.0, top, bins + 1)
    heavy, dens_max, dens_min = False, 0.0, np.inf
    for label, x in pools.items():
        atom = atom_at_zero(x)
        pos = x[x > 1e-9 * max(x.max(), 1e-300)]
        hist, _ = np.histogram(pos, bins=edges)
        dens = hist / (x.size * np.diff(edges))
        beyond = int(np.sum(pos > top))
        extra = (f", atom {atom:.3f}" if atom > 1e-3 else "") + (f", {beyond} beyond plot" if beyond else "")
        ax.stairs(dens, edges, label=f"{label} (n={x.size}{extra})", color=_COLORS.get(label),
                  fill=len(pools) == 1, alpha=0.9, linewidth=1.2)
        nz = dens[dens > 0]
        if nz.size:
            heavy |= nz.max() / np.median(nz) > 50
            dens_max, dens_min = max(dens_max, nz.max()), min(dens_min, nz.min())
    if law is not None:
        m = law.grid <= top
        atom = f", atom {law.atom_at_zero:.3f}" if law.atom_at_zero > 1e-3 else ""
        ax.plot(law.grid[m], law.density[m], color=_COLORS["law"], lw=1.5,
                label=f"law (edge {law.right_edge:.4g}{atom})")
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


def save_figure(fig, path: str | Path, dpi: int = 120) -> Path:
    """Save atomically (temporary file then rename) and close the figure."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(".tmp-" + path.name)
    fig.savefig(tmp, dpi=dpi, bbox_inches="tight", format=path.suffix.lstrip(".") or "png")
    plt.close(fig)
    tmp.replace(path)
    return path
