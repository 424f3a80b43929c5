"""The plot of ``attnspec sweep --plot``: result columns of a sweep against one axis."""
from __future__ import annotations

from pathlib import Path

from .base import pyplot, save_figure

__all__ = ["sweep_plot", "plot_sweep"]


def sweep_plot(frame, x: str, ys, name: str, path: str | Path) -> Path:
    """Plot the mean of each column ``ys`` per value of column ``x`` of ``frame`` and save it to ``path``.

    Law columns (``law.*``) are drawn as lines, Monte-Carlo columns as markers joined by lines; columns absent
    from ``frame`` are skipped (so is everything when ``x`` is absent).

    Parameters
    ----------
    frame : pandas.DataFrame
        Rows of :func:`attnspec.sweeps.points_frame` (or :func:`attnspec.sweeps.to_frame`).
    x : str
        Column on the x axis (e.g. ``tag.beta``).
    ys : iterable of str
        Columns to plot (e.g. ``law.m2``, ``softmax.m2``).
    name : str
        Sweep name, in the title.
    path : str or Path
        Output image; its suffix gives the format (``attnspec sweep --plot FILE``).

    Returns
    -------
    Path
        The file written.

    Examples
    --------
    >>> import tempfile, pandas as pd
    >>> df = pd.DataFrame({"tag.beta": [0.5, 1.0], "law.m2": [0.3, 10.6]})
    >>> sweep_plot(df, "tag.beta", ["law.m2", "softmax.m2"], "demo", Path(tempfile.mkdtemp()) / "m2.png").name
    'm2.png'
    """
    fig, ax = pyplot().subplots(figsize=(6, 4))
    plot_sweep(ax, frame, x, ys, name)
    return save_figure(fig, path)


def plot_sweep(ax, frame, x: str, ys, name: str):
    """Draw :func:`sweep_plot`'s lines on ``ax`` (one per column of ``ys`` present; the mean per ``x`` value).

    Examples
    --------
    >>> import pandas as pd
    >>> ax = plot_sweep(pyplot().subplots()[1], pd.DataFrame({"b": [1, 1, 2], "law.m1": [1.0, 3.0, 5.0]}),
    ...                 "b", ["law.m1"], "s")
    >>> ax.lines[0].get_ydata().tolist()
    [2.0, 5.0]
    """
    for y in ys:
        if y in frame and x in frame:
            g = frame.groupby(x)[y].mean()
            ax.plot(g.index, g.values, "o-" if not y.startswith("law") else "-", label=y)
    ax.set_xlabel(x)
    ax.legend()
    ax.set_title(f"sweep {name}")
    return ax
