"""Per-head interval figure of the report: the selection score with its 95 % bootstrap interval (the verdict's
test) and ``beta_hat`` with its interval beside the score scale and the random-head ``beta_null``."""
from __future__ import annotations

import numpy as np

__all__ = ["interval_figure"]

_COLORS = {"selective": "tab:red", "diffuse": "tab:blue", "sparse": "tab:purple", "undetermined": "0.55"}


def _errorbars(ax, x, y, lo, hi, colors) -> None:
    """Points ``y`` at ``x`` with bars from ``lo`` to ``hi`` (NaN bounds: point only)."""
    lo = np.where(np.isfinite(lo), lo, y)
    hi = np.where(np.isfinite(hi), hi, y)
    ax.vlines(x, lo, hi, colors=colors, lw=1.0)
    ax.scatter(x, y, c=colors, s=9, zorder=3)


def interval_figure(heads, threshold: float):
    """A matplotlib figure (two panels, one point per head in layer-major order), or ``None`` when the
    table has no interval columns. Colours: the ``selection`` label."""
    if "selection_score_lo" not in heads:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    x = np.arange(len(heads))
    colors = [_COLORS.get(v, "0.55") for v in heads["selection"]]
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(min(14.0, 4 + 0.08 * len(x)), 5.2), sharex=True)
    col = lambda c: heads[c].to_numpy(dtype=float)  # noqa: E731
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
    layer = heads["layer"].to_numpy()
    starts = np.flatnonzero(np.r_[True, layer[1:] != layer[:-1]])
    for ax in (a1, a2):
        for s in starts[1:]:
            ax.axvline(s - 0.5, color="0.85", lw=0.6)
        ax.tick_params(labelsize=7)
    a2.set_xticks(starts)
    a2.set_xticklabels([f"L{layer[s]}" for s in starts])
    a2.set_xlabel("heads, layer by layer", fontsize=8)
    fig.tight_layout()
    return fig
