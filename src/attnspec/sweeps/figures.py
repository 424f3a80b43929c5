"""The structure figure set (``attnspec figures --set structure``), built from sweeps.

Two figures, each overlaying the limiting law (lines, :func:`attnspec.theory.solve_law`) and
Monte-Carlo (markers: softmax and its Gaussian-equivalent surrogate), convention A, ``beta = 1``,
``l = d``:

* ``structure_heads_widths.png`` — head allocation vs projection widths. At fixed total width
  ``H d_head = d`` vary the head count ``H``; separately, at ``H = 4``, vary the per-head query/key
  width ``d_qk`` and the per-head value width ``d_v``. Rows: ``m2`` and the right edge (MC: largest
  surrogate eigenvalue). ``m1 = e^{beta^2} - 1`` in every configuration. The law predicts
  ``m2 = (1 + gamma/omega) sigma^4 + (1/H) sum_h [beta^4 gamma/psi_h + sigma^4 (1 + gamma/phi_h)]``:
  ``H`` moves only ``sigma^4/H``, ``d_qk`` only the score term ``beta^4 gamma/(H psi_h)``, ``d_v`` only
  ``sigma^4 gamma/(H phi_h)``.
* ``structure_sharing.png`` — across-head sharing vs within-head key-value dependence, ``H = 8``.
  Left: ``m2`` (relative to the independent-heads law) against the number of shared K/V groups (GQA from ``H`` to 1 group, keys only, values
  only). Middle: W1 between each shared variant's softmax spectrum and the *independent-heads law*
  (the size of Monte-Carlo noise if sharing preserves the law). Right: ``m1`` per unit value
  variance for independent values, ``W_V = W_K`` (tied) and key-dependent values ``V = K M`` with
  ``M`` of growing norm ``s`` (``m1/s^2``).

:func:`structure_figures` runs the sweeps (resumable: a store ``structure.sqlite`` in ``out_dir``),
writes the PNGs and ``structure_numbers.json`` (the numbers the README quotes) and returns the paths.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..config import MHSAConfig
from .export import points_frame
from .runner import run_sweep
from .spec import SweepPoint, expand_grid

__all__ = ["structure_figures", "structure_points"]


def structure_points(quick: bool = False) -> dict[str, list[SweepPoint]]:
    """The sweep points of each panel (``quick``: d = 64, one draw; else d = 256, 2 draws)."""
    d = 64 if quick else 256
    draws = 1 if quick else 2
    kw = dict(draws=draws, seeds=[0])
    base4 = MHSAConfig.uniform(d, d, heads=4, beta=1.0)
    base8 = MHSAConfig.uniform(d, d, heads=8, beta=1.0)
    hs = [1, 2, 4, 8] if quick else [1, 2, 4, 8, 16]
    widths = [d // 16, d // 8, d // 4, d // 2, d] if not quick else [d // 8, d // 4, d // 2, d]
    groups = [8, 4, 2, 1]
    scales = [0.5, 1.0, 2.0] if quick else [0.25, 0.5, 1.0, 2.0, 4.0]
    return {
        "heads": expand_grid(base4, {"heads": hs}, tags={"panel": "heads"}, **kw),
        "d_qk": expand_grid(base4, {"d_qk_per_head": widths}, tags={"panel": "d_qk"}, **kw),
        "d_v": expand_grid(base4, {"d_v_per_head": widths}, tags={"panel": "d_v"}, **kw),
        "gqa": expand_grid(base8, {"kv_groups": groups}, tags={"panel": "gqa"}, **kw),
        "keys_only": expand_grid(base8, {"key_groups": groups}, tags={"panel": "keys_only"}, **kw),
        "values_only": expand_grid(base8, {"value_groups": groups}, tags={"panel": "values_only"}, **kw),
        "tied": expand_grid(base8, {"values": ["tied-to-keys"]}, tags={"panel": "tied"}, **kw),
        "key_dependent": expand_grid(base8, {"value_key_scale": scales}, tags={"panel": "key_dependent"}, **kw),
    }


def _col(df, name):
    return df[name].to_numpy(dtype=float) if name in df else np.full(len(df), np.nan)


def structure_figures(out_dir, quick: bool = False, progress: bool = True, n_workers: int = 2,
                      scheduler: str | None = None) -> list[Path]:
    """Run the structure sweeps and write the two figures and the numbers (see module docstring)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
    paths = []

    # ---- figure 1: head allocation vs projection widths
    fig, axes = plt.subplots(2, 3, figsize=(13, 7.5), sharey="row")
    specs = [("heads", "tag.heads", "heads H at fixed total width H d_head = d", True),
             ("d_qk", "tag.d_qk_per_head", "d_qk per head (H = 4, d_v = d/4)", True),
             ("d_v", "tag.d_v_per_head", "d_v per head (H = 4, d_qk = d/4)", True)]
    for j, (panel, xcol, xlabel, logx) in enumerate(specs):
        df = F[panel]
        x = _col(df, xcol)
        for i, (lawcol, mc) in enumerate([("law.m2", "m2"), ("law.right_edge", "max")]):
            ax = axes[i, j]
            ax.plot(x, _col(df, lawcol), "-", color="k", lw=2, label="law")
            ax.plot(x, _col(df, f"surrogate.{mc}"), "o", mfc="none", color="C0", ms=8, label="surrogate (MC)")
            ax.plot(x, _col(df, f"softmax.{mc}"), "x", color="C3", ms=8, label="softmax (MC)")
            if logx:
                ax.set_xscale("log", base=2)
            ax.set_xlabel(xlabel)
            ax.grid(alpha=0.3)
        numbers[panel] = {"x": x.tolist(), "law_m1": _col(df, "law.m1").tolist(), "law_m2": _col(df, "law.m2").tolist(),
                          "law_edge": _col(df, "law.right_edge").tolist(),
                          "surrogate_m2": _col(df, "surrogate.m2").tolist(), "softmax_m2": _col(df, "softmax.m2").tolist(),
                          "surrogate_m1": _col(df, "surrogate.m1").tolist(), "softmax_m1": _col(df, "softmax.m1").tolist(),
                          "w1_law_surrogate": _col(df, "dist.law~surrogate.w1").tolist(),
                          "w1_law_softmax": _col(df, "dist.law~softmax.w1").tolist()}
    axes[0, 0].set_ylabel("second moment m2")
    axes[1, 0].set_ylabel("right edge (MC: largest eigenvalue)")
    axes[0, 0].legend()
    fig.suptitle(f"Head allocation vs projection widths (convention A, l = d = {d}, beta = 1; m1 = e-1 throughout)")
    fig.tight_layout()
    p = out_dir / "structure_heads_widths.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)

    # ---- figure 2: across-head sharing vs within-head dependence
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.4))
    indep_law = float(_col(F["gqa"], "law.m2")[0])   # groups = H: independent heads
    for k, (panel, label, col) in enumerate([("gqa", "K and V shared (GQA -> MQA)", "C0"),
                                             ("keys_only", "keys only", "C1"), ("values_only", "values only", "C2")]):
        df = F[panel]
        x = _col(df, "tag.kv_groups" if panel == "gqa" else
                 ("tag.key_groups" if panel == "keys_only" else "tag.value_groups"))
        off = (k - 1) * 0.04
        axes[0].plot(x * (1 + off), _col(df, "law.m2") / indep_law, "-", color=col, lw=2, label=f"law: {label}")
        axes[0].plot(x * (1 + off), _col(df, "softmax.m2") / indep_law, "x", color=col, ms=8)
        axes[0].plot(x * (1 + off), _col(df, "surrogate.m2") / indep_law, "o", mfc="none", color=col, ms=8)
        axes[1].plot(x * (1 + off), _col(df, "dist.law~softmax.w1"), "x-", color=col, label=f"softmax, {label}")
        axes[1].plot(x * (1 + off), _col(df, "dist.law~surrogate.w1"), "o--", mfc="none", color=col,
                     label=f"surrogate, {label}")
        numbers[panel] = {"groups": x.tolist(), "law_m2": _col(df, "law.m2").tolist(),
                          "softmax_m2": _col(df, "softmax.m2").tolist(), "surrogate_m2": _col(df, "surrogate.m2").tolist(),
                          "w1_law_softmax": _col(df, "dist.law~softmax.w1").tolist(),
                          "w1_law_surrogate": _col(df, "dist.law~surrogate.w1").tolist()}
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
    # within-head dependence
    kd = F["key_dependent"]
    s = _col(kd, "tag.value_key_scale")
    gq = F["gqa"]
    ti = F["tied"]
    ax = axes[2]
    ax.axhline(float(_col(gq, "law.m1")[0]), color="k", lw=1.5, label="independent values (law)")
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
    numbers["tied"] = {"law_m1": _col(ti, "law.m1").tolist(), "softmax_m1": _col(ti, "softmax.m1").tolist(),
                       "law_m2": _col(ti, "law.m2").tolist(), "softmax_m2": _col(ti, "softmax.m2").tolist()}
    numbers["key_dependent"] = {"s": s.tolist(), "law_m1": _col(kd, "law.m1").tolist(),
                                "softmax_m1": _col(kd, "softmax.m1").tolist(),
                                "surrogate_m1": _col(kd, "surrogate.m1").tolist(),
                                "law_m2": _col(kd, "law.m2").tolist(), "softmax_m2": _col(kd, "softmax.m2").tolist()}
    numbers["independent_law_m2"] = indep_law
    fig.suptitle(f"Across-head sharing preserves the law; within-head key-value dependence does not "
                 f"(H = 8, l = d = {d}, beta = 1)")
    fig.tight_layout()
    p = out_dir / "structure_sharing.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)

    p = out_dir / "structure_numbers.json"
    p.write_text(json.dumps(numbers, indent=1, default=float))
    paths.append(p)
    return paths
