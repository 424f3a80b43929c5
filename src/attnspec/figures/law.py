"""The one way to draw a limiting spectral law: :func:`plot_law`.

A law (an :class:`attnspec.theory.Law`, or anything with ``grid``, ``density``, ``atom_at_zero``,
``right_edge``, ``left_edge``, ``moments`` and ``config``) is drawn as its continuous density ``rho`` on its
grid, a black line labelled with its right edge and, when above 1e-3, its atom at zero (the atom itself,
a point mass, is not a curve). ``rho`` integrates to ``1 - atom``, the normalization of the histograms of
:mod:`.spectra`, so the two share one density axis.
"""
from __future__ import annotations

import numpy as np

from .spectra import COLORS, plot_spectra, spectra_top

__all__ = ["plot_law", "law_label"]


def law_label(law) -> str:
    """The legend entry of a law: ``law (edge E, atom a)`` (the atom only when above 1e-3).

    Examples
    --------
    >>> from attnspec import MHSAConfig, solve_law
    >>> law_label(solve_law(MHSAConfig.uniform(100, 100, heads=1, beta=1.0)))
    'law (edge 18.13)'
    """
    atom = f", atom {law.atom_at_zero:.3f}" if law.atom_at_zero > 1e-3 else ""
    return f"law (edge {law.right_edge:.4g}{atom})"


def _density_line(ax, law, label: str | None, top: float | None, **kwargs) -> None:
    keep = law.grid <= top if top is not None else slice(None)
    kwargs.setdefault("color", COLORS["law"])
    kwargs.setdefault("lw", 1.5)
    ax.plot(law.grid[keep], law.density[keep], label=label if label is not None else law_label(law), **kwargs)


def _law_frame(ax, law, log_y: bool | None, title: str | None) -> None:
    """Axes of a law drawn alone: edges dotted, x up to ``1.05 E``, a log y axis for a ``lambda^{-a}`` blow-up."""
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
    if title is None:
        m = law.moments
        title = (f"{law.config.describe()}\nm1..m4 = {m[0]:.5g}, {m[1]:.5g}, {m[2]:.5g}, {m[3]:.5g}; "
                 f"atom {law.atom_at_zero:.3g}")
    if title:
        ax.set_title(title, fontsize=8)


def plot_law(law, ax=None, samples: dict[str, np.ndarray] | None = None, *, label: str | None = None,
             frame: bool = True, bins: int | None = None, log_y: bool | None = None, title: str | None = None,
             x_max: float | None = None, **line_kwargs):
    """Draw the density of ``law``: alone, over eigenvalue histograms, or as a bare line on an existing axis.

    Parameters
    ----------
    law : attnspec.theory.Law
    ax : matplotlib Axes, optional
        Default: a new 7 x 4.2 inch figure.
    samples : dict of str to array, optional
        Label -> eigenvalues. When given, their histograms (:func:`attnspec.figures.spectra.plot_spectra`,
        normalized to each whole sample) are drawn first, the x axis stops at
        ``1.05 max(99.9 % quantile, right edge)`` (or ``x_max``) and the line is cut there.
    label : str, optional
        Legend entry; default :func:`law_label`.
    frame : bool
        Without samples: ``True`` marks the edges (dotted), sets the x range ``[0, 1.05 E]``, a log y axis when
        the density blows up at 0 (``max rho / median rho > 50``) and a title with ``config.describe()``, the
        moments ``m_1..m_4`` and the atom; ``False`` draws the line only (for figures with their own axes).
    bins, log_y, title, x_max
        Histogram bins, log y axis (default: automatic), title (default: none over samples, the moments alone;
        ``''`` for none), right end of the x axis.
    **line_kwargs
        Passed to ``Axes.plot`` (default black, width 1.5).

    Returns
    -------
    Axes

    Examples
    --------
    >>> from attnspec import MHSAConfig, solve_law
    >>> law = solve_law(MHSAConfig.uniform(100, 100, heads=1, beta=1.0))
    >>> ax = plot_law(law)
    >>> x, y = ax.lines[0].get_data()
    >>> bool(np.array_equal(y, law.density))
    True
    """
    if ax is None:
        from .base import pyplot

        ax = pyplot().subplots(figsize=(7, 4.2))[1]
    if samples is not None:
        top = x_max if x_max is not None else spectra_top(samples, law.right_edge)
        plot_spectra(ax, samples, bins=bins, log_y=log_y, title=title, x_max=top)
        _density_line(ax, law, label, top, **line_kwargs)
        ax.legend(fontsize=8)
        return ax
    _density_line(ax, law, label, None, **line_kwargs)
    if frame:
        _law_frame(ax, law, log_y, title)
        ax.legend(fontsize=8)
    return ax
