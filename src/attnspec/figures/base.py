"""Matplotlib plumbing shared by every figure: the Agg backend, atomic saving, inline PNG.

matplotlib is imported inside these functions, never when a module is imported, so ``import attnspec`` and
``import attnspec.figures`` do not load it; the first figure selects the non-interactive Agg backend.
"""
from __future__ import annotations

import base64
import io
from pathlib import Path

__all__ = ["pyplot", "save_figure", "png_data_uri"]


def pyplot():
    """``matplotlib.pyplot`` with the Agg backend selected (files only, no display needed).

    Returns
    -------
    module
        ``matplotlib.pyplot``.

    Examples
    --------
    >>> plt = pyplot()
    >>> import matplotlib
    >>> matplotlib.get_backend().lower()
    'agg'
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str | Path, dpi: int = 120, tight: bool = True) -> Path:
    """Save ``fig`` atomically (a temporary file in the same folder, then a rename) and close it.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
    path : str or Path
        Target file; its suffix gives the format (``png`` when there is none). Parent folders are created.
    dpi : int
        Resolution of raster formats.
    tight : bool
        Crop to the drawn content (``bbox_inches='tight'``); ``False`` keeps the figure size (for figures
        laid out with ``tight_layout``).

    Returns
    -------
    Path
        ``path``.

    Examples
    --------
    >>> import tempfile
    >>> fig, ax = pyplot().subplots()
    >>> _ = ax.plot([0, 1], [0, 1])
    >>> out = save_figure(fig, Path(tempfile.mkdtemp()) / "line.png")
    >>> out.read_bytes()[:4] == b"\\x89PNG"
    True
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(".tmp-" + path.name)
    fig.savefig(tmp, dpi=dpi, bbox_inches="tight" if tight else None, format=path.suffix.lstrip(".") or "png")
    pyplot().close(fig)
    tmp.replace(path)
    return path


def png_data_uri(fig, dpi: int = 90) -> str:
    """``fig`` as an inline ``data:image/png;base64,...`` URI (for self-contained HTML), then closed.

    The figure is saved at its own size (the caller lays it out, e.g. with ``tight_layout``).

    Examples
    --------
    >>> fig, ax = pyplot().subplots(figsize=(1, 1))
    >>> png_data_uri(fig).startswith("data:image/png;base64,")
    True
    """
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    pyplot().close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
