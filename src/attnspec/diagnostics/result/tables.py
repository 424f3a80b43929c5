"""Step 5, tables: the heads, layers and pairs DataFrames from the merged accumulators.

Every column is defined in :mod:`.columns`; :func:`build_tables` emits no other column.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from ...config import BETA_MAX, alpha_of_beta
from ...models import AttentionSite
from ..statistics import dependence as dep
from . import dependence_verdict as dv
from ..statistics import query_selection as qsel
from ..statistics import selection as sel
from ..statistics.bootstrap import interval
from .intervals import TextWeights, cka_excess_replicates, head_intervals, head_replicates, refined_selection
from ..statistics.removal import normalize_per_layer, spectral_shift
from ..pipeline.resources import _layer_pool
from ..pipeline.fit import LayerFitSums, NullFitSums
from ..pipeline.head_removal import RemovalSums
from ..pipeline.removal_plan import EXACT_MODES
from ..pipeline.spectra import LayerSpectra
from ..options import DiagnoseOptions

__all__ = ["TableOptions", "build_tables", "attention_kind", "roles_table", "head_roles"]


@dataclass(frozen=True)
class TableOptions:
    """What the tables contain: the diagnosis' options, and what the run resolved of them.

    Attributes
    ----------
    options : DiagnoseOptions
        The options of the diagnosis: ``mean_ablation``, ``gradient``, ``threshold``, ``min_tokens`` and ``seed``
        are read from it (properties of the same names), never restated.
    removal : str
        The removal mode the run resolved (:data:`..pipeline.head_removal.MODES`; ``options.removal`` may be
        ``'auto'``): which removal columns exist.
    effect_name : str
        Second name of the ``removal_effect`` column (e.g. ``'embedding_shift'``, ``'loss_increase'``).
    n_boot : int, optional
        Replicates the intervals use: ``options.n_boot`` (None), or 0 when the texts or replicates support no
        interval (every verdict undetermined).

    Examples
    --------
    >>> opt = TableOptions(DiagnoseOptions(n_boot=0), removal="none")
    >>> opt.removal, opt.gradient, round(opt.threshold, 4), opt.min_tokens, opt.n_boot
    ('none', True, 0.6931, 400, 0)
    """

    options: DiagnoseOptions = field(default_factory=DiagnoseOptions)
    removal: str = "exact"            # exact | sampled | screened | first-order | none
    effect_name: str = "embedding_shift"
    n_boot: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.options, DiagnoseOptions):
            raise TypeError(f"options must be a DiagnoseOptions, got {type(self.options).__name__}")
        if self.n_boot is None:
            object.__setattr__(self, "n_boot", int(self.options.n_boot))

    @property
    def mean_ablation(self) -> bool:
        return self.options.mean_ablation

    @property
    def gradient(self) -> bool:
        return self.options.gradient

    @property
    def threshold(self) -> float:
        return self.options.threshold

    @property
    def min_tokens(self) -> int:
        return self.options.min_tokens

    @property
    def seed(self) -> int:
        """Keys the texts' bootstrap weights."""
        return self.options.seed


def attention_kind(site: AttentionSite) -> str:
    """The ``attention`` column: ``'causal'`` or ``'bidirectional'`` (``'cross (keys: encoder)'`` for an
    encoder-decoder's cross-attention), followed by ``', window w'`` when the layer has a sliding window.

    Parameters
    ----------
    site : AttentionSite

    Returns
    -------
    str

    Examples
    --------
    >>> import dataclasses
    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> site = tiny_causal_lm()[0].sites[0]
    >>> attention_kind(site), attention_kind(dataclasses.replace(site, window=4))
    ('causal', 'causal, window 4')
    >>> attention_kind(dataclasses.replace(site, causal=False))
    'bidirectional'
    """
    if _role(site) == "cross":
        att = "cross (keys: encoder)"
    else:
        att = "causal" if site.causal else "bidirectional"
    return att + (f", window {site.window}" if site.window is not None else "")


def _role(site: AttentionSite) -> str:
    return getattr(site, "role", "self")


def _site_columns(site: AttentionSite) -> dict[str, str]:
    """``stack`` (``'encoder'``/``'decoder'``: an encoder-decoder's own label, else ``'decoder'`` for causal
    sites and ``'encoder'`` for bidirectional ones) and ``role`` (``'self'``/``'cross'``)."""
    stack = getattr(site, "stack", None) or ("decoder" if getattr(site, "causal", False) else "encoder")
    return {"stack": stack, "role": _role(site)}


def _head_rows(i: int, site: AttentionSite, fs: LayerFitSums, f: dict, sp: LayerSpectra, cka, cka0, inner,
               opt: TableOptions, iv: dict) -> list[dict]:
    H = site.n_heads
    bl = sel.baselines(fs.baselines)
    la, lge = sp.of_layer("act"), sp.of_layer("ge")
    shift = spectral_shift(la, [sp.without(h) for h in range(H)])
    shift_ge = spectral_shift(lge, [sp.without(h, ge=True) for h in range(H)])
    energy = np.diag(inner)
    offdiag = ~np.eye(H, dtype=bool)
    qs = fs.query.result(min_tokens=opt.min_tokens, intervals=opt.n_boot > 0)   # ..statistics.query_selection
    dead = fs.head_power() <= 0          # zero output (a pruned W_O or V slice): ..statistics.spectral.head_eigs
    rows = []
    for h in range(H):
        d, d0 = sp.departures(h)
        score = float(sel.selection_score(np.array(d["w1_rel"]), np.array(d0["w1_rel"])))
        others = np.where(offdiag[h])[0]
        s_h = float(f["score_scale"][h])
        row = {
            "layer": i, "head": h, **_site_columns(site), "kv_group": site.kv_group(h), "attention": attention_kind(site),
            "n_tokens": int(fs.n_tokens),
            "score_scale": s_h, "beta_hat": float(f["beta_hat"][h]), "alpha_hat": float(f["alpha_hat"][h]),
            "alpha_null": alpha_of_beta(min(s_h, BETA_MAX)) if math.isfinite(s_h) else math.nan,
            "r2": float(f["r2"][h]),
            "spec_w1": d["w1"], "spec_w1_rel": d["w1_rel"], "spec_ks": d["ks"],
            "spec_outliers_per_text": d["n_outliers"] / max(sp.n_texts, 1), "spec_m1": d["m1"], "spec_m1_ge": d["m1_ref"],
            "null_w1_rel": d0["w1_rel"], "selection_score": score,
            "selection": sel.label(score, s_h, opt.threshold, n_tokens=fs.n_tokens, min_tokens=opt.min_tokens,
                                   lo=float(iv["selection_score_lo"][h]), hi=float(iv["selection_score_hi"][h])),
            **{k: (v[h] if v.dtype == object else float(v[h])) for k, v in qs.items()},
            **{k: float(v[h]) for k, v in iv.items()},
            **{k: float(v[h]) for k, v in bl.items()},
            "cka_mean": float(np.nanmean(cka[h, others])) if H > 1 else np.nan,
            "cka_max": float(np.nanmax(cka[h, others])) if H > 1 else np.nan,
            "cka_partner": int(others[np.nanargmax(cka[h, others])]) if H > 1 else -1,
            "cka_null_mean": float(np.nanmean(cka0[h, others])) if H > 1 else np.nan,
            "energy_share": float(energy[h] / energy.sum()) if energy.sum() > 0 else np.nan,
            "removal_spec_shift": float(shift[h]), "removal_spec_shift_ge": float(shift_ge[h]),
        }
        row["diffuse"] = row["selection"] == "diffuse"
        row["cka_excess"] = row["cka_mean"] - row["cka_null_mean"]
        row["dead"] = bool(dead[h])
        if dead[h]:          # zero output: nothing departs, nothing to resample (intervals 0, verdicts undetermined)
            for k in ("spec_w1_rel", "selection_score", "cka_excess"):
                for end in ("_lo", "_hi"):
                    if k + end in row and not math.isfinite(row[k + end]):
                        row[k + end] = 0.0
            row["selection"] = "undetermined"
        rows.append(row)
    return rows


def _layer_row(i: int, site: AttentionSite, fs: LayerFitSums, f: dict, sp: LayerSpectra, cka, cka0, inner,
               head_rows: list[dict], L_max: int, pair_rows: list[dict]) -> dict:
    H = site.n_heads
    groups = np.array([site.kv_group(h) for h in range(H)])
    la = sp.of_layer("act")
    dfree = _departure(la, sp.of_layer("free"))
    dge = _departure(la, sp.of_layer("ge"))
    iu = np.triu_indices(H, 1)
    shared = groups[iu[0]] == groups[iu[1]]
    labels = [r["selection"] for r in head_rows]
    return {
        "layer": i, **_site_columns(site), "attention": attention_kind(site), "n_heads": H, "n_kv_heads": site.n_kv_heads,
        "head_dim": site.head_dim, "d_out": site.d_out,
        "theory_applies": bool(_role(site) == "self" and (not site.causal)
                               and (site.window is None or site.window >= L_max)),
        "window_binds": bool(site.window is not None and site.window < L_max),
        "value_power": float(fs.head_power().sum()),
        "spec_m1": dge["m1"], "ge_m1": dge["m1_ref"], "ge_w1_rel": dge["w1_rel"], "ge_ks": dge["ks"],
        "free_defect_w1_rel": dfree["w1_rel"], "free_defect_ks": dfree["ks"], "free_m1": dfree["m1_ref"],
        "interference": float(inner.sum() / np.trace(inner) - 1) if np.trace(inner) > 0 else np.nan,
        "cka_mean": float(np.nanmean(cka[iu])) if H > 1 else np.nan,
        "cka_null_mean": float(np.nanmean(cka0[iu])) if H > 1 else np.nan,
        "cka_shared_kv_mean": float(np.nanmean(cka[iu][shared])) if shared.any() else np.nan,
        "cka_unshared_kv_mean": float(np.nanmean(cka[iu][~shared])) if (~shared).any() else np.nan,
        "beta_hat_mean": float(np.mean(f["beta_hat"])), "score_scale_mean": float(np.mean(f["score_scale"])),
        **{f"n_{k}": labels.count(k) for k in sel.LABELS},
        **_layer_dependence(site, pair_rows),
    }


def _departure(actual: np.ndarray, reference: np.ndarray) -> dict:
    """:func:`..statistics.selection.spectral_departure`, NaN columns when a spectrum is not finite (a layer whose
    every head is pruned has no free sum to compare with)."""
    if not (np.isfinite(actual).all() and np.isfinite(reference).all()):
        actual = reference = np.zeros(0)
    return sel.spectral_departure(actual, reference)


def _layer_dependence(site: AttentionSite, pair_rows: list[dict]) -> dict:
    """Layer columns of the dependence verdict: margin, background (median excess over pairs not sharing a
    key/value head, all pairs when every pair shares one) and the dependent pairs and heads."""
    ex = np.array([r["cka_excess"] for r in pair_rows], dtype=float)
    shared = np.array([r["shared_kv"] for r in pair_rows], dtype=bool)
    keep = ~shared if (~shared).any() else np.ones(shared.shape, bool)
    finite = ex[keep][np.isfinite(ex[keep])]
    dep_pairs = [r for r in pair_rows if r["dependence"] == "dependent"]
    return {"dependence_margin": dv.margin_of(bool(site.causal) and _role(site) == "self"),
            "cka_excess_background": float(np.median(finite)) if finite.size else np.nan,
            "n_dependent_pairs": len(dep_pairs),
            "n_dependent_heads": len({h for r in dep_pairs for h in (r["head_a"], r["head_b"])})}


def _pair_rows(i: int, site: AttentionSite, cka, cka0, inner, reps: np.ndarray | None, enough_tokens: bool,
               intervals: bool) -> list[dict]:
    """The layer's pairs with their ``dependence`` verdict (:mod:`.dependence_verdict`); ``reps``: the replicates of
    their excess CKA (:func:`.intervals.cka_excess_replicates`, None without)."""
    groups = np.array([site.kv_group(h) for h in range(site.n_heads)])
    g, hh, ck, ck0, corr, shared = dep.pair_table_arrays(cka, cka0, inner, groups)
    lo, hi = interval(reps[:, g, hh]) if reps is not None else (np.full(g.size, np.nan), np.full(g.size, np.nan))
    ex = ck - ck0
    tau = dv.margin_of(bool(site.causal) and _role(site) == "self")
    bg, verdict = dv.pair_verdicts(ex, lo, hi, shared, tau, enough_tokens, intervals and reps is not None)
    where = _site_columns(site)
    return [{"layer": i, **where, "head_a": int(a), "head_b": int(b), "cka": float(x1), "cka_null": float(x2),
             "cka_excess": float(x1 - x2), "cka_excess_lo": float(l), "cka_excess_hi": float(u),
             "cka_excess_background": float(x5), "dependence": str(v),
             "output_corr": float(x3), "shared_kv": bool(x4)}
            for a, b, x1, x2, l, u, x5, v, x3, x4 in zip(g, hh, ck, ck0, lo, hi, bg, verdict, corr, shared)]


def _head_dependence(rows: list[dict], pair_rows: list[dict]) -> None:
    """Adds each head's ``dependence`` and ``dependence_partner`` (:func:`.dependence_verdict.head_verdicts`)."""
    a = np.array([r["head_a"] for r in pair_rows], dtype=int)
    b = np.array([r["head_b"] for r in pair_rows], dtype=int)
    v = np.array([r["dependence"] for r in pair_rows], dtype=str)
    lo = np.array([r["cka_excess_lo"] if np.isfinite(r["cka_excess_lo"]) else r["cka_excess"] for r in pair_rows])
    over = lo - np.array([r["cka_excess_background"] for r in pair_rows], dtype=float)
    dependence, partner = dv.head_verdicts(len(rows), a, b, v, over)
    for row, d, p in zip(rows, dependence, partner):
        row["dependence"], row["dependence_partner"] = str(d), int(p)


def removal_columns(removal: RemovalSums, opt: TableOptions, H_of: np.ndarray) -> dict[str, np.ndarray]:
    """Step 4's head columns, each ``(n_layers, H_max)``: exact effects and their standard errors where
    measured, first-order effects, the best available estimate and its source, Michel importance."""
    cols: dict[str, np.ndarray] = {}
    exact = opt.removal in EXACT_MODES
    fo = opt.removal in ("screened", "first-order")
    if exact:
        cols["removal_effect"] = cols[opt.effect_name] = removal.exact.mean()
        ends = removal.exact.interval() if opt.n_boot else (np.full(np.shape(removal.exact.mean()), np.nan),) * 2
        cols["removal_effect_se"] = removal.exact.se()
        cols["removal_effect_lo"], cols["removal_effect_hi"] = ends
        if opt.mean_ablation:
            cols["removal_effect_mean"] = removal.exact_mean.mean()
            cols["removal_effect_mean_se"] = removal.exact_mean.se()
            cols["removal_effect_mean_lo"], cols["removal_effect_mean_hi"] = (
                removal.exact_mean.interval() if opt.n_boot else ends)
    if fo:
        cols["removal_first_order"] = removal.first_order.mean()
        cols["removal_first_order_se"] = removal.first_order.se()
        cols["removal_first_order_lo"], cols["removal_first_order_hi"] = (
            removal.first_order.interval() if opt.n_boot
            else (np.full(np.shape(cols["removal_first_order"]), np.nan),) * 2)
        measured = removal.exact.measured if exact else np.zeros(cols["removal_first_order"].shape, bool)
        cols["removal_estimate"] = np.where(measured, removal.exact.mean(), cols["removal_first_order"])
        for end in ("lo", "hi"):
            ex = cols.get(f"removal_effect_{end}", np.full(measured.shape, np.nan))
            cols[f"removal_estimate_{end}"] = np.where(measured, ex, cols[f"removal_first_order_{end}"])
        cols["removal_source"] = np.where(measured, "exact", "first-order")
    if opt.gradient or fo:
        mich = removal.importance()
        mich = np.where(np.arange(mich.shape[1])[None] < H_of[:, None], mich, np.nan)
        cols["michel_importance"] = normalize_per_layer(mich)
        cols["michel_importance_raw"] = mich
    return cols


def roles_table(fit_sums: list[LayerFitSums], opt: TableOptions) -> pd.DataFrame:
    """One row per layer, head and rule of the per-query statistic and the sink (columns ``layer``, ``head`` and
    :data:`..statistics.query_selection.ROLE_COLUMNS`; :meth:`..statistics.query_selection.QuerySelectionSums.roles`),
    from step 2's merged sums: no other pass.

    Examples
    --------
    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> from attnspec.diagnostics.pipeline.collect import collect
    >>> from attnspec.diagnostics.pipeline.fit import LayerFitSums
    >>> ad, batch = tiny_causal_lm()
    >>> sums = [LayerFitSums().update(lb, s.w_out(), 0, 20) for lb, s in zip(collect(ad, batch), ad.sites)]
    >>> t = roles_table(sums, TableOptions(n_boot=20))
    >>> len(t), list(t.columns), t["rule"].iloc[-1]                # 2 layers x 2 heads x 20 rules
    (80, ['layer', 'head', 'rule', 'excess', 'excess_lo', 'excess_hi', 'verdict', 'real_weight'], 'sink')
    """
    parts = []
    for i, fs in enumerate(fit_sums):
        if fs.query is None:
            continue
        r = fs.query.roles(min_tokens=opt.min_tokens, intervals=opt.n_boot > 0)
        H, R = r["excess"].shape
        parts.append(pd.DataFrame({"layer": i, "head": np.repeat(np.arange(H), R),
                                   **{k: np.asarray(v).ravel() for k, v in r.items()}}))
    cols = ["layer", "head", *qsel.ROLE_COLUMNS]
    return pd.concat(parts, ignore_index=True)[cols] if parts else pd.DataFrame(columns=cols)


def head_roles(heads: pd.DataFrame, roles: pd.DataFrame) -> list[str]:
    """Per row of ``heads``, its rules whose verdict is ``selective``, joined by ``'; '`` (empty when none).

    Examples
    --------
    >>> heads = pd.DataFrame({"layer": [0, 0], "head": [0, 1]})
    >>> roles = pd.DataFrame({"layer": [0, 0, 0], "head": [0, 0, 1], "rule": ["offset -1", "sink", "sink"],
    ...                       "verdict": ["selective", "selective", "not selective"]})
    >>> head_roles(heads, roles)
    ['offset -1; sink', '']
    """
    sel_rows = roles[roles["verdict"] == "selective"] if len(roles) else roles
    named = sel_rows.groupby(["layer", "head"], sort=False)["rule"].agg("; ".join).to_dict() if len(sel_rows) else {}
    return [named.get((int(layer), int(head)), "") for layer, head in zip(heads["layer"], heads["head"])]


def build_tables(sites: list[AttentionSite], fit_sums: list[LayerFitSums], fits: list[dict],
                 spectra: list[LayerSpectra], removal: RemovalSums, W: list, L_max: int,
                 opt: TableOptions, null_sums: list[NullFitSums] | None = None, replicates: list | None = None
                 ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """``(heads, layers, pairs)`` (columns in :mod:`.columns`); ``null_sums``: the null heads' fit sums
    (``beta_null`` and its replicates).

    Parameters
    ----------
    sites : list of AttentionSite
    fit_sums, fits : list
        Per layer: step 2's merged :class:`..pipeline.fit.LayerFitSums` and their fits.
    spectra : list of LayerSpectra
        Per layer: step 3's merged spectra.
    removal : RemovalSums
        Step 4's sums (empty when ``opt.removal`` is ``'none'`` and ``opt.gradient`` is False).
    W : list of torch.Tensor
        Per layer ``W_O`` ``(H d_head, d_out)``.
    L_max : int
        Tokens of the longest text.
    opt : TableOptions
    null_sums : list of NullFitSums, optional

    Returns
    -------
    heads, layers, pairs : pandas.DataFrame
        One row per head, per layer, per pair of heads of a layer.

    Examples
    --------
    Steps 1-3 by hand on the tiny GPT-2 (one batch), then the tables without removal:

    >>> import torch
    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> from attnspec.diagnostics.statistics.bootstrap import weights
    >>> from attnspec.diagnostics.pipeline.collect import collect
    >>> from attnspec.diagnostics.pipeline.fit import LayerFitSums
    >>> from attnspec.diagnostics.pipeline.spectra import layer_batch_spectra
    >>> ad, batch = tiny_causal_lm()
    >>> lbs, W = collect(ad, batch), [s.w_out() for s in ad.sites]
    >>> sums = [LayerFitSums().update(lb, w, 0, 20) for lb, w in zip(lbs, W)]
    >>> fits = [s.fit() for s in sums]
    >>> nulls = [NullFitSums().update(lb.allowed, lb.valid, lb.order, lb.index, 2, 16, f["score_scale"], 0, 6,
    ...                               n_boot=20) for lb, f in zip(lbs, fits)]
    >>> spectra = [LayerSpectra(2, head_dim=16, d_out=32).update(layer_batch_spectra(
    ...     lb, w, f, n.fit(), s.head_power(), 0, s.gram, weights(0, lb.order, 20)))
    ...     for lb, w, f, n, s in zip(lbs, W, fits, nulls, sums)]
    >>> opt = TableOptions(DiagnoseOptions(gradient=False, n_boot=20, min_tokens=0), removal="none")
    >>> heads, layers, pairs = build_tables(ad.sites, sums, fits, spectra, RemovalSums(), W, 6, opt, nulls)
    >>> len(heads), len(layers), len(pairs), "removal_effect" in heads
    (4, 2, 2, False)
    >>> layers[["layer", "attention", "theory_applies"]].values.tolist()   # causal: read as descriptive
    [[0, 'causal', False], [1, 'causal', False]]
    """
    H_of = np.array([s.n_heads for s in sites])
    cols = removal_columns(removal, opt, H_of)
    ids = spectra[0].corpus_texts()[0] if spectra else np.zeros(0, np.int64)
    tw = TextWeights(opt.seed, ids, opt.n_boot)

    if replicates is not None:
        replicates[:] = [None] * len(sites)

    def layer(i: int) -> tuple[list[dict], dict, list[dict]]:
        return _layer_tables(i, sites[i], fit_sums[i], fits[i], spectra[i], null_sums[i] if null_sums else None,
                             W[i], cols, tw, L_max, opt, replicates)
    with _layer_pool(torch.get_num_threads()) as pool:        # layers are independent; numpy releases the GIL
        done = list(pool.map(layer, range(len(sites))))
    rows = [r for hr, _, _ in done for r in hr]
    prows = [r for _, _, pr in done for r in pr]
    return pd.DataFrame(rows), pd.DataFrame([lr for _, lr, _ in done]), pd.DataFrame(prows)


def _layer_tables(i: int, site: AttentionSite, fs: LayerFitSums, f: dict, sp: LayerSpectra, ns: NullFitSums | None,
                  W, cols: dict, tw: TextWeights, L_max: int, opt: TableOptions,
                  replicates: list | None = None) -> tuple[list[dict], dict, list[dict]]:
    """Head rows, layer row and pair rows of layer ``i`` (its accumulators only: layers run concurrently); the
    layer's bootstrap replicates go to ``replicates[i]`` when a list is given."""
    if np.ndim(sp.gram) != 3:       # step 3 was given step 2's Gram sum and did not recompute it
        sp = dataclasses.replace(sp, gram=fs.gram)
    cka, cka0 = dep.cka_matrix(sp.gram, site.n_heads), dep.cka_free_null(sp.gram, fs.free_null, site.n_heads)
    inner = dep.output_inner(sp.gram, W.to(torch.float64 if W.dtype == torch.float64 else torch.float32).numpy(),
                             site.n_heads)
    pair_reps = cka_excess_replicates(sp, cka0)                       # the pairs' intervals and the heads' replicates
    reps = head_replicates(fs, ns, sp, tw, pair_reps) if tw.n_boot and fs.boot_scores is not None else None
    if replicates is not None:
        replicates[i] = reps
    iv = head_intervals(fs, ns, sp, tw, reps=reps)
    refined = (refined_selection(iv, reps["selection_score"], sp, tw, opt.threshold)   # ends near the threshold,
               if reps is not None else {})                                            # verdict given or not
    hr = _head_rows(i, site, fs, f, sp, cka, cka0, inner, opt, iv)
    for h, row in enumerate(hr):
        row["selection_replicates"] = refined.get(h, tw.n_boot)
    pr = _pair_rows(i, site, cka, cka0, inner, pair_reps, fs.n_tokens >= opt.min_tokens, opt.n_boot > 0)
    _head_dependence(hr, pr)
    for h, row in enumerate(hr):
        row.update({k: (v[i, h] if isinstance(v[i, h], str) else float(v[i, h])) for k, v in cols.items()})
    return hr, _layer_row(i, site, fs, f, sp, cka, cka0, inner, hr, L_max, pr), pr
