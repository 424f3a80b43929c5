"""The structure figure set (``attnspec figures --set structure``), drawn from stored sweeps.

Two figures, each overlaying the limiting law (lines, :func:`attnspec.theory.solve_law`) and Monte-Carlo
(markers: softmax and its Gaussian-equivalent surrogate), convention A, ``beta = 1``, ``l = d``; the points are
:func:`attnspec.sweeps.structure.structure_points`:

* ``structure_heads_widths.png``: head allocation vs projection widths. At fixed total width ``H d_head = d``
  vary the head count ``H``; separately, at ``H = 4``, the per-head query/key width ``d_qk`` and value width
  ``d_v``. Rows: ``m2`` and the right edge (Monte-Carlo: the largest eigenvalue). ``m1 = e^{beta^2} - 1``
  throughout. The law has ``m2 = (1 + gamma/omega) sigma^4 + (1/H) sum_h [beta^4 gamma/psi_h + sigma^4
  (1 + gamma/phi_h)]``: ``H`` moves only ``sigma^4/H``, ``d_qk`` only the score term, ``d_v`` only
  ``sigma^4 gamma/(H phi_h)``.
* ``structure_sharing.png``: across-head sharing vs within-head key-value dependence, ``H = 8``. Left: ``m2``
  relative to the independent-heads law against the number of shared K/V groups (GQA down to MQA, keys only,
  values only). Middle: W1 between each variant's spectrum and its law. Right: ``m1`` per unit value
  variance for independent values, ``W_V = W_K`` and key-dependent values ``V = K M`` (``m1/s^2``).

:func:`structure_figures` runs the sweeps (resumable: ``structure.sqlite`` in ``out_dir``), writes the PNGs and
``structure_numbers.json`` (the numbers docs/structure.md quotes) and returns the paths.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..sweeps import points_frame, run_sweep
from ..sweeps.structure import structure_points
from .base import pyplot, save_figure

__all__ = ["structure_figures"]

_SHARED = [("gqa", "tag.kv_groups", "K and V shared (GQA -> MQA)", "C0"),
           ("keys_only", "tag.key_groups", "keys only", "C1"), ("values_only", "tag.value_groups", "values only", "C2")]


def _col(df, name):
    return df[name].to_numpy(dtype=float) if name in df else np.full(len(df), np.nan)


def _cols(df, **names) -> dict:
    """``{key: column as a list}`` for ``key=column name`` (NaN where the column is missing)."""
    return {k: _col(df, c).tolist() for k, c in names.items()}


def _heads_widths(F: dict, d: int, numbers: dict):
    """Figure 1: m2 (top row) and the right edge (bottom row) against H, d_qk and d_v."""
    fig, axes = pyplot().subplots(2, 3, figsize=(13, 7.5), sharey="row")
    specs = [("heads", "tag.heads", "heads H at fixed total width H d_head = d"),
             ("d_qk", "tag.d_qk_per_head", "d_qk per head (H = 4, d_v = d/4)"),
             ("d_v", "tag.d_v_per_head", "d_v per head (H = 4, d_qk = d/4)")]
    for j, (panel, xcol, xlabel) in enumerate(specs):
        df = F[panel]
        x = _col(df, xcol)
        for i, (lawcol, mc) in enumerate([("law.m2", "m2"), ("law.right_edge", "max")]):
            ax = axes[i, j]
            ax.plot(x, _col(df, lawcol), "-", color="k", lw=2, label="law")
            ax.plot(x, _col(df, f"surrogate.{mc}"), "o", mfc="none", color="C0", ms=8, label="surrogate (MC)")
            ax.plot(x, _col(df, f"softmax.{mc}"), "x", color="C3", ms=8, label="softmax (MC)")
            ax.set_xscale("log", base=2)
            ax.set_xlabel(xlabel)
            ax.grid(alpha=0.3)
        numbers[panel] = {"x": x.tolist(), **_cols(
            df, law_m1="law.m1", law_m2="law.m2", law_edge="law.right_edge", surrogate_m2="surrogate.m2",
            softmax_m2="softmax.m2", surrogate_m1="surrogate.m1", softmax_m1="softmax.m1",
            w1_law_surrogate="dist.law~surrogate.w1", w1_law_softmax="dist.law~softmax.w1")}
    axes[0, 0].set_ylabel("second moment m2")
    axes[1, 0].set_ylabel("right edge (MC: largest eigenvalue)")
    axes[0, 0].legend()
    fig.suptitle(f"Head allocation vs projection widths (convention A, l = d = {d}, beta = 1; m1 = e-1 throughout)")
    fig.tight_layout()
    return fig


def _sharing_panels(F: dict, axes, indep_law: float, numbers: dict) -> None:
    """Left: m2 relative to the independent-heads law; middle: W1 to the law; one colour per sharing kind."""
    for k, (panel, xcol, label, col) in enumerate(_SHARED):
        df = F[panel]
        x = _col(df, xcol) * (1 + (k - 1) * 0.04)   # a small offset keeps coinciding markers apart
        axes[0].plot(x, _col(df, "law.m2") / indep_law, "-", color=col, lw=2, label=f"law: {label}")
        axes[0].plot(x, _col(df, "softmax.m2") / indep_law, "x", color=col, ms=8)
        axes[0].plot(x, _col(df, "surrogate.m2") / indep_law, "o", mfc="none", color=col, ms=8)
        axes[1].plot(x, _col(df, "dist.law~softmax.w1"), "x-", color=col, label=f"softmax, {label}")
        axes[1].plot(x, _col(df, "dist.law~surrogate.w1"), "o--", mfc="none", color=col, label=f"surrogate, {label}")
        numbers[panel] = {"groups": _col(df, xcol).tolist(), **_cols(
            df, law_m2="law.m2", softmax_m2="softmax.m2", surrogate_m2="surrogate.m2",
            w1_law_softmax="dist.law~softmax.w1", w1_law_surrogate="dist.law~surrogate.w1")}
    for ax in axes[:2]:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("number of shared groups (8 = independent heads, 1 = MQA)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("m2 / m2(law, independent heads)\n(lines: law, x: softmax, o: surrogate)")
    axes[0].set_ylim(0.75, 1.25)
    tied_ratio = float(_col(F["tied"], "law.m2")[0]) / indep_law
    axes[0].annotate(f"W_V = W_K (tied): law m2 ratio {tied_ratio:.1f}  (off the scale)", xy=(0.03, 0.93),
                     xycoords="axes fraction", fontsize=8)
    axes[0].legend(fontsize=7)
    axes[1].set_ylabel("W1(MC spectrum, law of the variant)")
    axes[1].legend(fontsize=6)


def _dependence_panel(F: dict, ax, numbers: dict) -> None:
    """Right: m1 per unit value variance, independent vs tied vs key-dependent values."""
    kd, ti = F["key_dependent"], F["tied"]
    s = _col(kd, "tag.value_key_scale")
    ax.axhline(float(_col(F["gqa"], "law.m1")[0]), color="k", lw=1.5, label="independent values (law)")
    ax.axhline(float(_col(ti, "law.m1")[0]), color="C4", lw=1.5, ls="--", label="W_V = W_K tied (law)")
    ax.plot([1.0], _col(ti, "softmax.m1"), "x", color="C4", ms=9)
    ax.plot(s, _col(kd, "law.m1") / s ** 2, "-", color="C5", lw=2, label="V = K M, law, m1/s^2")
    ax.plot(s, _col(kd, "softmax.m1") / s ** 2, "x", color="C5", ms=8, label="softmax (MC)")
    ax.plot(s, _col(kd, "surrogate.m1") / s ** 2, "o", mfc="none", color="C5", ms=8, label="surrogate (MC)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("norm s of M (V = K M, M ~ N(0, s^2/d_qk))")
    ax.set_ylabel("m1 per unit value variance")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    numbers["tied"] = _cols(ti, law_m1="law.m1", softmax_m1="softmax.m1", law_m2="law.m2", softmax_m2="softmax.m2")
    numbers["key_dependent"] = {"s": s.tolist(), **_cols(
        kd, law_m1="law.m1", softmax_m1="softmax.m1", surrogate_m1="surrogate.m1", law_m2="law.m2",
        softmax_m2="softmax.m2")}


def _sharing(F: dict, d: int, numbers: dict):
    """Figure 2: across-head sharing (left, middle) vs within-head dependence (right)."""
    fig, axes = pyplot().subplots(1, 3, figsize=(14, 4.4))
    indep_law = float(_col(F["gqa"], "law.m2")[0])   # groups = H: independent heads
    _sharing_panels(F, axes, indep_law, numbers)
    _dependence_panel(F, axes[2], numbers)
    numbers["independent_law_m2"] = indep_law
    fig.suptitle(f"Across-head sharing preserves the law; within-head key-value dependence does not "
                 f"(H = 8, l = d = {d}, beta = 1)")
    fig.tight_layout()
    return fig


def structure_figures(out_dir, quick: bool = False, progress: bool = True, n_workers: int = 2,
                      scheduler: str | None = None) -> list[Path]:
    """Run the structure sweeps and write the two figures and their numbers (see the module docstring).

    Parameters
    ----------
    out_dir : str or Path
        Created if missing; holds the store ``structure.sqlite`` (a re-run recomputes nothing), the PNGs and
        ``structure_numbers.json``.
    quick : bool
        ``d = 64``, one draw per point (smoke runs); else ``d = 256``, 2 draws.
    progress, n_workers, scheduler
        As :func:`attnspec.sweeps.run_sweep`.

    Returns
    -------
    list of Path
        ``structure_heads_widths.png``, ``structure_sharing.png``, ``structure_numbers.json``.

    Raises
    ------
    RuntimeError
        When a sweep point failed (the first error is quoted).

    Examples
    --------
    >>> import tempfile
    >>> paths = structure_figures(tempfile.mkdtemp(), quick=True, progress=False, n_workers=0)
    >>> [p.name for p in paths]
    ['structure_heads_widths.png', 'structure_sharing.png', 'structure_numbers.json']
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    db = out_dir / "structure.sqlite"
    panels = structure_points(quick)
    allpts = [p for pts in panels.values() for p in pts]
    report = run_sweep(allpts, db, name="structure", n_workers=n_workers, scheduler=scheduler, progress=progress)
    if report.failed:
        raise RuntimeError(f"{len(report.failed)} structure sweep point(s) failed; first: {report.failed[0][1]}")
    F = {k: points_frame(v, db) for k, v in panels.items()}
    d = allpts[0].config.d_model
    numbers: dict = {"d": d, "draws": allpts[0].draws, "beta": 1.0, "sweep": str(report)}
    paths = [save_figure(_heads_widths(F, d, numbers), out_dir / "structure_heads_widths.png", dpi=110, tight=False),
             save_figure(_sharing(F, d, numbers), out_dir / "structure_sharing.png", dpi=110, tight=False)]
    p = out_dir / "structure_numbers.json"
    p.write_text(json.dumps(numbers, indent=1, default=float))
    return paths + [p]
