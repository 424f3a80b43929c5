"""Matplotlib helpers for laws (Agg backend; import only where plotting is needed)."""
from __future__ import annotations

import numpy as np

__all__ = ["plot_law"]


def plot_law(ax, law, label: str | None = None, log_y: bool | None = None, title: str | None = True, **kwargs):
    """Density of ``law`` with its edges marked; a ``lambda^{-a}`` blow-up at 0 switches to a log y axis.

    The atom at zero and the moments go into the legend/title.
    """
    law.plot(ax, label=label, **kwargs)
    ax.axvline(law.right_edge, color="0.5", ls=":", lw=1)
    if law.left_edge is not None:
        ax.axvline(law.left_edge, color="0.5", ls=":", lw=1)
    pos = law.density[law.density > 0]
    if log_y is None:
        log_y = pos.size > 0 and pos.max() / np.median(pos) > 50
    if log_y:
        ax.set_yscale("log")
        ax.set_ylim(np.median(pos) / 1e3, pos.max() * 2)
    ax.set_xlim(0, law.right_edge * 1.05)
    ax.set_xlabel("eigenvalue of $Y Y^T$")
    ax.set_ylabel("density")
    if title is True:
        m = law.moments
        title = (f"{law.config.describe()}\nm1..m4 = {m[0]:.5g}, {m[1]:.5g}, {m[2]:.5g}, {m[3]:.5g}; "
                 f"atom {law.atom_at_zero:.3g}")
    if title:
        ax.set_title(title, fontsize=8)
    ax.legend(fontsize=8)
    return ax
