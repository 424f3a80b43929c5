"""The figures behind the seed's claims, recomputed from scratch (``attnspec figures``).

1. ``law_vs_montecarlo``: the ``H = 4`` law (``gamma = omega = 1``, ``psi_h = phi_h = 1/4``, ``beta = 1``)
   against softmax and surrogate draws at ``d = 250..2000``; W1 to the law shrinks with ``d``
   (docs/theory.md, "Law against Monte-Carlo").
2. ``edge_vs_beta``: right edge of the attention-matrix law against the Marchenko–Pastur edge
   ``4 (e^{beta^2} - 1)`` at ``gamma = psi = 1`` and ``gamma = 1/2``: the law's edge stays above it.
3. ``sharing``: GQA (2 groups), MQA, keys-only and values-only sharing against independent heads: the law is
   unchanged and softmax spectra agree within seed-to-seed noise.
4. ``tying``: ``W_V = W_K`` inside each head against independent values: the law moves (``m_1`` 1.72 -> 5.72).

Each function returns plain numbers (written to ``figures.json`` by the command) and saves one PNG.
Monte-Carlo is :func:`attnspec.simulation.simulate` with fixed seeds (convention A, token centering); the laws
are those of the exact ratios (solved at ``d = 400``: only ratios matter).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..config import MHSAConfig
from ..spectra import ks_distance, wasserstein1
from ..theory import closed_forms as cf
from ..theory import law_distances, solve_law
from .base import pyplot, save_figure
from .law import plot_law

__all__ = ["law_vs_montecarlo", "edge_vs_beta", "sharing", "tying", "all_figures", "SHARING"]

#: sharing variants of :func:`sharing`: name -> ``MHSAConfig`` keyword arguments
SHARING = {"independent": {}, "GQA (2 groups)": dict(key_groups=2, value_groups=2),
           "MQA": dict(key_groups=1, value_groups=1), "K only": dict(key_groups=1), "V only": dict(value_groups=1)}


def _h4(d: int, **kw) -> MHSAConfig:
    """Four heads at width ``d``: ``l = d_out = d``, ``d_qk = d_v = round(d/4)``, ``beta = 1``."""
    return MHSAConfig.uniform(d, d, heads=4, d_qk=round(d / 4), d_v=round(d / 4), d_out=d, beta=1.0, **kw)


def _bar(total: int, desc: str, progress: bool):
    from tqdm.auto import tqdm
    return tqdm(total=total, desc=desc, disable=not progress, leave=False)


def _distance_row(law, sim, d: int, draws: int) -> dict:
    """Per-draw W1/KS (whole and bulk) to the law, averaged; their spread and the first draw's values."""
    row = {"d": d, "draws": draws}
    for m in ("softmax", "surrogate"):
        per = [law_distances(law, e) for e in getattr(sim, m)]
        for k in per[0]:
            vals = np.array([p[k] for p in per], dtype=float)
            row[f"{k}_{m}"] = float(vals.mean())
            row[f"{k}_{m}_sd"] = float(vals.std(ddof=1)) if vals.size > 1 else 0.0
            row[f"{k}_{m}_first_draw"] = float(vals[0])
    return row


def law_vs_montecarlo(out: Path, ds=(250, 500, 1000, 2000), seed: int = 0, progress: bool = True) -> dict:
    """W1/KS between the law and softmax/surrogate draws per ``d``, and ``law_vs_montecarlo.png``.

    ``max(1, 2000 // d)`` draws at each ``d`` (every size pools about 2000 eigenvalues); the distances of
    :func:`attnspec.theory.law_distances` are computed per draw and averaged (``*_sd``: their standard deviation,
    ``*_first_draw``: the first draw's, as docs/theory.md quotes one draw each). Left panel: histograms at the
    largest ``d`` over the law; right: W1 against ``d`` (log-log).

    Parameters
    ----------
    out : Path
        Folder of the PNG.
    ds : sequence of int
        Widths ``d = l = d_out`` (``d_qk = d_v = d/4``).
    seed : int
    progress : bool

    Returns
    -------
    dict
        ``figure`` (file name), ``law_moments``, ``law_right_edge`` and one row per ``d``.

    Examples
    --------
    >>> import tempfile
    >>> r = law_vs_montecarlo(Path(tempfile.mkdtemp()), ds=(64,), progress=False)
    >>> r["figure"], r["rows"][0]["draws"], round(r["law_moments"][0], 6)
    ('law_vs_montecarlo.png', 31, 1.718282)
    """
    from ..simulation import simulate

    law = solve_law(_h4(400))
    rows, last = [], None
    with _bar(len(ds), "law vs Monte-Carlo", progress) as bar:
        for d in ds:
            draws = max(1, 2000 // d)
            last = simulate(_h4(d), seed=seed, draws=draws)
            rows.append(_distance_row(law, last, d, draws))
            bar.update()
    fig, (a1, a2) = pyplot().subplots(1, 2, figsize=(12, 4.2))
    plot_law(law, a1, {"softmax": last.softmax, "surrogate": last.surrogate},
             title=f"{last.config.describe()}\n{last.softmax.shape[0]} draw(s), seed {seed}")
    dd = np.array([r["d"] for r in rows])
    for m, style in (("softmax", "o-"), ("surrogate", "s-")):
        a2.errorbar(dd, [r[f"w1_{m}"] for r in rows], yerr=[r[f"w1_{m}_sd"] for r in rows], fmt=style, capsize=3,
                    label=f"W1(law, {m}), mean over draws")
        a2.plot(dd, [r[f"w1_bulk_{m}"] for r in rows], style[0] + ":", alpha=0.6, label=f"W1 bulk (law, {m})")
    a2.set_xscale("log")
    a2.set_yscale("log")
    a2.set_xlabel("d (= l = d_out; d_qk = d_v = d/4); draws = 2000/d")
    a2.set_ylabel("W1 to the law")
    a2.set_title(f"H = 4, beta = 1: law m1..m4 = {', '.join(f'{x:.5g}' for x in law.moments)}", fontsize=9)
    a2.legend(fontsize=8)
    png = save_figure(fig, Path(out) / "law_vs_montecarlo.png")
    return {"figure": png.name, "law_moments": law.moments.tolist(), "law_right_edge": law.right_edge, "rows": rows}


def edge_vs_beta(out: Path, betas=None, progress: bool = True) -> dict:
    """Right edge ``E`` of the attention-matrix law against the Marchenko–Pastur edge ``4 sigma^2``
    (``sigma^2 = e^{beta^2} - 1``), at ``gamma = psi = 1`` and ``gamma = 1/2``, and ``edge_vs_beta.png``.

    Parameters
    ----------
    out : Path
    betas : sequence of float, optional
        Default: 25 values from 0.1 to 2.5.
    progress : bool

    Returns
    -------
    dict
        ``figure`` and, per ``gamma=...``, ``beta``, ``edge``, ``mp_edge`` and ``ratio = E / (4 sigma^2)``
        (27/16 as ``beta -> 0`` at ``gamma = psi = 1``, 1 as ``beta`` grows).

    Examples
    --------
    >>> import tempfile
    >>> r = edge_vs_beta(Path(tempfile.mkdtemp()), betas=[0.5, 1.0], progress=False)
    >>> r["figure"], [round(q, 3) for q in r["gamma=1"]["ratio"]]
    ('edge_vs_beta.png', [1.576, 1.311])
    """
    betas = np.round(np.linspace(0.1, 2.5, 25), 3) if betas is None else np.asarray(betas, dtype=float)
    res = {}
    with _bar(2 * betas.size, "edge vs beta", progress) as bar:
        for gamma in (1.0, 0.5):
            edges = []
            for b in betas:
                cfg = MHSAConfig(seq_len=int(400 * gamma), d_model=400, d_qk=(400,), d_v=(400,), d_out=400,
                                 beta=float(b), target="attention")
                edges.append(solve_law(cfg).right_edge)
                bar.update()
            mp = np.array([cf.mp_edge(b) for b in betas])
            res[f"gamma={gamma:g}"] = {"beta": betas.tolist(), "edge": edges, "mp_edge": mp.tolist(),
                                       "ratio": (np.array(edges) / mp).tolist()}
    fig, (a1, a2) = pyplot().subplots(1, 2, figsize=(12, 4.2))
    for key, r in res.items():
        a1.semilogy(r["beta"], r["edge"], "o-", ms=3, label=f"law edge, {key}, psi = 1")
        a2.plot(r["beta"], r["ratio"], "o-", ms=3, label=key)
    a1.semilogy(betas, [cf.mp_edge(b) for b in betas], "k--", label="Marchenko–Pastur 4(e^{b^2}-1)")
    a1.set_xlabel("beta")
    a1.set_ylabel("right edge")
    a1.legend(fontsize=8)
    a1.set_title("attention matrix Y_att, convention A", fontsize=9)
    a2.axhline(27 / 16, color="0.6", ls=":", label="27/16 (beta -> 0)")
    a2.axhline(1.0, color="k", ls="--", lw=1)
    a2.set_xlabel("beta")
    a2.set_ylabel("edge / MP edge")
    a2.legend(fontsize=8)
    png = save_figure(fig, Path(out) / "edge_vs_beta.png")
    return {"figure": png.name, **res}


def _step_histograms(ax, samples: dict[str, np.ndarray], top: float) -> None:
    """Step histograms of the positive eigenvalues (80 bins on ``[0, top]``, density normalized to the whole
    sample), a log y axis ranging over the bars, x range ``[0, top]``."""
    bins = np.linspace(0, top, 80)
    hmax, hmin = 0.0, np.inf
    for label, x in samples.items():
        h, _, _ = ax.hist(x[x > 0], bins=bins, histtype="step",
                          weights=np.full((x > 0).sum(), 1 / (x.size * np.diff(bins)[0])), label=label)
        hmax, hmin = max(hmax, h.max()), min(hmin, h[h > 0].min())
    ax.set_yscale("log")
    ax.set_ylim(hmin / 3, hmax * 3)
    ax.set_xlim(0, top)


def _sharing_numbers(eig: dict, laws: dict, noise: np.ndarray) -> dict:
    ref, lref = eig["independent"], laws["independent"]
    res = {}
    for name in SHARING:
        res[name] = {"ks_to_independent": ks_distance(eig[name], ref) if name != "independent" else 0.0,
                     "w1_to_independent": wasserstein1(eig[name], ref) if name != "independent" else 0.0,
                     "law_moments": laws[name].moments.tolist(), "law_right_edge": laws[name].right_edge,
                     "law_max_rel_moment_change": float(np.max(np.abs(laws[name].moments / lref.moments - 1)))}
    res["seed_noise"] = {"ks": ks_distance(noise, ref), "w1": wasserstein1(noise, ref)}
    return res


def sharing(out: Path, d: int = 2000, seed: int = 0, progress: bool = True) -> dict:
    """Sharing variants (:data:`SHARING`) vs independent heads, ``H = 4``, and ``sharing.png``.

    The laws (solved per variant) are identical; the softmax spectra are compared with independent heads by
    KS and W1 (:func:`attnspec.spectra.ks_distance`, :func:`attnspec.spectra.wasserstein1`), with independent
    heads at ``seed + 1`` as the seed-to-seed yardstick (``seed_noise``).

    Parameters
    ----------
    out : Path
    d : int
        Width of the simulations (``d_qk = d_v = d/4``).
    seed : int
    progress : bool

    Returns
    -------
    dict
        ``figure``, ``d``, per variant ``ks_to_independent``, ``w1_to_independent``, ``law_moments``,
        ``law_right_edge``, ``law_max_rel_moment_change``; and ``seed_noise``.

    Examples
    --------
    >>> import tempfile
    >>> r = sharing(Path(tempfile.mkdtemp()), d=64, progress=False)
    >>> r["MQA"]["law_max_rel_moment_change"] < 1e-9
    True
    """
    from ..simulation import simulate

    eig, laws = {}, {}
    with _bar(len(SHARING) + 1, "sharing", progress) as bar:
        for name, kw in SHARING.items():
            laws[name] = solve_law(_h4(400, **kw))
            eig[name] = simulate(_h4(d, **kw), seed=seed, models=("softmax",)).softmax
            bar.update()
        noise = simulate(_h4(d), seed=seed + 1, models=("softmax",)).softmax
        bar.update()
    res = _sharing_numbers(eig, laws, noise)
    fig, (a1, a2) = pyplot().subplots(1, 2, figsize=(12, 4.2))
    _step_histograms(a1, {f"{n}: KS {res[n]['ks_to_independent']:.4f}": eig[n] for n in SHARING},
                     laws["independent"].right_edge * 1.1)
    plot_law(laws["independent"], a1, label="law (all variants)", frame=False)
    a1.set_title(f"softmax, H = 4, d = {d}, beta = 1; seed noise KS {res['seed_noise']['ks']:.4f}", fontsize=9)
    a1.legend(fontsize=7)
    names = [n for n in SHARING if n != "independent"]
    xs = np.arange(len(names))
    a2.bar(xs - 0.2, [res[n]["ks_to_independent"] for n in names], 0.4, label="KS to independent")
    a2.bar(xs + 0.2, [res[n]["w1_to_independent"] for n in names], 0.4, label="W1 to independent")
    a2.axhline(res["seed_noise"]["ks"], color="C0", ls=":", label="KS seed noise")
    a2.axhline(res["seed_noise"]["w1"], color="C1", ls=":", label="W1 seed noise")
    a2.set_xticks(xs, names)
    a2.legend(fontsize=8)
    a2.set_title("across-head sharing preserves the spectrum", fontsize=9)
    png = save_figure(fig, Path(out) / "sharing.png")
    return {"figure": png.name, "d": d, **res}


def tying(out: Path, d: int = 1000, seed: int = 0, progress: bool = True) -> dict:
    """``W_V = W_K`` inside each head vs independent values, ``H = 4``: laws, one draw each, ``tying.png``.

    Tying raises the law's first moment from ``alpha^2 + beta^2 = e - 1`` to
    ``alpha^2 + beta^2 (1 + gamma/psi) = e + 3`` at ``beta = 1``, ``psi = 1/4`` (``m1_closed_form``).

    Parameters
    ----------
    out : Path
    d : int
    seed : int
    progress : bool

    Returns
    -------
    dict
        ``figure``, ``d`` and per case ``law_moments``, ``law_right_edge``, ``m1_closed_form``, ``distances``
        (to the softmax and surrogate draws), ``softmax_m1``, ``surrogate_m1``.

    Examples
    --------
    >>> import tempfile
    >>> r = tying(Path(tempfile.mkdtemp()), d=64, progress=False)
    >>> round(r["tied W_V = W_K"]["law_moments"][0], 5), round(r["tied W_V = W_K"]["m1_closed_form"], 5)
    (5.71828, 5.71828)
    """
    from ..simulation import simulate

    res, sims, laws = {}, {}, {}
    with _bar(2, "tying", progress) as bar:
        for name, kw in (("independent", {}), ("tied W_V = W_K", dict(values="tied-to-keys"))):
            cfg = _h4(d, **kw)
            laws[name] = solve_law(_h4(400, **kw))
            sims[name] = simulate(cfg, seed=seed)
            dist = {m: law_distances(laws[name], getattr(sims[name], m)) for m in ("softmax", "surrogate")}
            res[name] = {"law_moments": laws[name].moments.tolist(), "law_right_edge": laws[name].right_edge,
                         "m1_closed_form": cf.first_moment(cfg), "distances": dist,
                         "softmax_m1": float(np.mean(sims[name].softmax)),
                         "surrogate_m1": float(np.mean(sims[name].surrogate))}
            bar.update()
    fig, axes = pyplot().subplots(1, 2, figsize=(12, 4.2))
    for ax, (name, law) in zip(axes, laws.items()):
        _step_histograms(ax, {f"{m} (W1 {res[name]['distances'][m]['w1']:.3g})": getattr(sims[name], m)
                              for m in ("softmax", "surrogate")}, law.right_edge * 1.15)
        plot_law(law, ax, frame=False)
        ax.set_xlabel("eigenvalue of $Y Y^T$")
        ax.set_title(f"{name}: law m1 {law.moments[0]:.4f}, m2 {law.moments[1]:.4g}, edge {law.right_edge:.4g}",
                     fontsize=9)
        ax.legend(fontsize=8)
    fig.suptitle(f"within-head key-value tying changes the law (H = 4, d = {d}, beta = 1)", fontsize=10)
    png = save_figure(fig, Path(out) / "tying.png")
    return {"figure": png.name, "d": d, **res}


def all_figures(out: Path, quick: bool = False, seed: int = 0, progress: bool = True) -> dict:
    """All four figures into ``out`` (created if missing): :func:`law_vs_montecarlo` at ``d = 250..2000``,
    :func:`edge_vs_beta`, :func:`sharing` at ``d = 2000``, :func:`tying` at ``d = 1000``; ``quick``: ``d = 250,
    500``, five betas, ``d = 250`` (a smoke run, about 10 s).

    Returns
    -------
    dict
        Each figure's name -> what its function returns (``attnspec figures`` writes it to ``figures.json``).

    Examples
    --------
    >>> import tempfile
    >>> sorted(all_figures(Path(tempfile.mkdtemp()), quick=True, progress=False))
    ['edge_vs_beta', 'law_vs_montecarlo', 'sharing', 'tying']
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if quick:
        return {"law_vs_montecarlo": law_vs_montecarlo(out, (250, 500), seed, progress),
                "edge_vs_beta": edge_vs_beta(out, (0.25, 0.5, 1.0, 1.5, 2.0), progress),
                "sharing": sharing(out, 250, seed, progress), "tying": tying(out, 250, seed, progress)}
    return {"law_vs_montecarlo": law_vs_montecarlo(out, (250, 500, 1000, 2000), seed, progress),
            "edge_vs_beta": edge_vs_beta(out, None, progress),
            "sharing": sharing(out, 2000, seed, progress), "tying": tying(out, 1000, seed, progress)}
