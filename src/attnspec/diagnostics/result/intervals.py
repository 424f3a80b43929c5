"""Per-head bootstrap intervals of step 5 (:mod:`..statistics.bootstrap`: Poisson weights over texts, percentile
intervals at :data:`..statistics.bootstrap.LEVEL`).

* ``beta_hat``: the least-squares fit on each replicate's score sums (:meth:`..pipeline.fit.LayerFitSums.fit_replicates`).
* ``beta_null``: the same fit for the layer's null head at the head's score scale (random scores, same
  masks and text lengths): what ``beta_hat`` returns for a random head here. ``beta_hat`` of a random head
  falls below its score scale on short texts and at high temperature (the softmax normalization is not
  the linear model).
* ``beta_corrected = beta_sym + score_scale - null`` (:func:`corrected_beta`), the head's inverse temperature
  read from its linear response: the logit RMS ``score_scale`` plus the departure ``delta = beta_sym - null``
  of the head's slope from that of a null head at the same temperature on the same rows. ``beta_sym``
  averages the head's slope with that of its reflection (logits ``-S``), which cancels what the skewness of
  a head's logits adds to the slope (a head's preference for its own token, say). ``null`` is the same
  average for the head's *key null* (a random query against the head's own keys at the head's row
  temperatures, :func:`..statistics.identification.key_null_weights`, ``beta_null_keys``) when the fit sums carry it,
  else for the Gaussian null head. The key null keeps repeated and correlated keys: at score scale 2-3 on
  25-token texts a row with repeats saturates like a shorter row (planted heads at temperature 2:
  ``beta_hat`` 1.50, Gaussian null 1.56, key null 1.51).
* **The temperature interval** ``beta_corrected_lo/_hi`` (:func:`temperature_interval`) is the hull of two
  95 % percentile intervals from the same replicates: that of ``beta_corrected`` (the three terms
  recomputed together on each replicate) and that of ``score_scale``. A head's temperature ``theta`` has
  two readings: the logit RMS, whose interval covers ``theta`` whatever the head's logits look like, and
  the linear-response reading ``score_scale + delta``, whose interval covers it only when the head's
  *own* departure ``E[delta]`` is 0. The bootstrap re-weights texts and cannot see that fixed departure:
  random planted heads, whose queries meet their keys at random, still differ from their key null by a
  head-specific ``E[delta]`` of -0.3 % +- 0.5 % of ``theta`` (the shape of their rows, not a sampling
  error), which made the ``beta_corrected`` interval alone cover the planted temperature 87-91 times in
  100. The hull covers ``theta`` at least as often as the better of the two (at least 95 % asymptotically,
  from the logit RMS), and for a head with a genuine departure (a structured head) it spans both readings
  instead of choosing one. It is wider than the ``beta_corrected`` interval by ``|delta|`` at most.
* ``spec_w1_rel`` and ``selection_score``: W1 between the weighted pooled spectra of the head and of its
  Gaussian equivalent (and of the null head and its equivalent), each eigenvalue weighted by its text's
  weight (:func:`..statistics.bootstrap.weighted_w1`), relative to the weighted mean of the reference. The fitted
  equivalents are held fixed (the replicate re-weights the texts, it does not refit or redraw them).
* ``removal_spec_shift``: the same for the layer's spectrum with and without the head.
* ``cka_excess`` (heads and pairs): linearized bootstrap of the CKA. ``CKA_gh = F_gh / sqrt(F_gg F_hh)`` with
  ``F_gh = ||C_gh||_F^2`` and ``C = sum_b C^b`` the Gram sum over texts; to first order in the weights
  ``F_gh(w) = 2 sum_b w_b <C_gh, C^b_gh> - F_gh``, whose weighted sums the spectra step accumulates
  (:func:`..pipeline.spectra.cka_influence`; exact ``C`` from step 2, so one extra pass is not needed). The null
  CKA (its expectation under free rotations, :func:`..statistics.dependence.cka_free_null`) is held fixed, like
  the fitted equivalents.
"""
from __future__ import annotations

import numpy as np

from ..statistics import dependence as dep
from ..statistics import identification as ident
from ..statistics import selection as sel
from ..statistics.bootstrap import LEVEL, interval, replicate_sd, weighted_relative_w1, weights
from ..pipeline.fit import LayerFitSums, NullFitSums
from ..pipeline.spectra import LayerSpectra

#: ``head_intervals`` (the interval columns of one layer, from the step accumulators) is called by
#: :mod:`.tables` only and is not public.
__all__ = ["TextWeights", "REPLICATE_COLUMNS", "REFINED_REPLICATES", "refined_selection", "cka_excess_replicates",
           "corrected_beta", "head_replicates", "removal_replicates", "temperature_interval"]


class TextWeights:
    """The bootstrap weights of every text of a diagnosis, drawn once.

    ``w[:, k]`` are the Poisson(1) weights (:func:`..statistics.bootstrap.weights`) of the ``k``-th distinct text
    id in increasing order; :meth:`column` maps text ids to those columns.

    Parameters
    ----------
    seed : int
        Seed of the diagnosis.
    text_ids : numpy.ndarray
        Positions of the texts in the caller's list (repeats allowed).
    n_boot : int
        Number of replicates, ``>= 0``.

    Examples
    --------
    >>> tw = TextWeights(0, [7, 3, 5, 3], n_boot=4)
    >>> tw.ids, tw.w.shape
    (array([3, 5, 7]), (4, 3))
    >>> cols = tw.column([5, 7])                      # the weights of texts 5 and 7, as a batch
    >>> cols, bool((tw.w[:, cols] == weights(0, [5, 7], 4)).all())
    (array([1, 2]), True)
    """

    def __init__(self, seed: int, text_ids: np.ndarray, n_boot: int):
        self.ids = np.unique(np.asarray(text_ids, dtype=np.int64))
        self.w = weights(seed, self.ids, n_boot)
        self.n_boot = n_boot
        self.seed = seed

    def column(self, order) -> np.ndarray:
        """Columns of :attr:`w` of the texts ``order``."""
        return np.searchsorted(self.ids, np.asarray(order, dtype=np.int64))


def _pairs(lo_hi: tuple[np.ndarray, np.ndarray], name: str) -> dict[str, np.ndarray]:
    return {f"{name}_lo": lo_hi[0], f"{name}_hi": lo_hi[1]}


def cka_excess_replicates(sp: LayerSpectra, cka_null: np.ndarray) -> np.ndarray | None:
    """Bootstrap replicates of the excess CKA ``cka - cka_null`` of every pair of heads of a layer.

    Linearized (module docstring): ``F_gh(w) = 2 sum_b w_b <C_gh, C^b_gh> - F_gh`` with
    ``F_gh = ||C_gh||_F^2``, then ``CKA_gh(w) = F_gh(w) / sqrt(F_gg(w) F_hh(w))`` (NaN for a replicate
    whose ``F_gg(w)`` leaves the positive range); the null CKA is held fixed.

    Parameters
    ----------
    sp : LayerSpectra
        The layer's spectra accumulator, with ``gram`` (``C``) and ``boot_cka``
        (``(n_boot, H, H)`` weighted sums of :func:`..pipeline.spectra.cka_influence`).
    cka_null : numpy.ndarray
        ``(H, H)`` null CKA (:func:`..statistics.dependence.cka_free_null`).

    Returns
    -------
    numpy.ndarray or None
        ``(n_boot, H, H)``, or None when the accumulator holds no replicates.

    Examples
    --------
    Two heads on 40 texts, head 1 = head 0 + independent noise; with a null CKA of 0 between the heads the
    excess is the CKA itself:

    >>> import numpy as np, torch
    >>> from attnspec.diagnostics.statistics.bootstrap import interval, weighted
    >>> from attnspec.diagnostics.statistics.dependence import cka_matrix, gram_blocks
    >>> from attnspec.diagnostics.pipeline.spectra import LayerSpectra, cka_influence
    >>> rng = np.random.default_rng(0)
    >>> M = rng.standard_normal((40, 2, 8, 2))
    >>> M[:, 1] += M[:, 0]
    >>> M = torch.from_numpy(M - M.mean(2, keepdims=True))
    >>> C = gram_blocks(M)
    >>> w = weights(0, range(40), 100)
    >>> sp = LayerSpectra(2, gram=C, boot_cka=weighted(w, cka_influence(M, C)))
    >>> reps = cka_excess_replicates(sp, np.eye(2))
    >>> reps.shape, round(float(cka_matrix(C, 2)[0, 1]), 2)
    ((100, 2, 2), 0.51)
    >>> [round(float(v), 2) for v in interval(reps[:, 0, 1])]         # 95 % interval around it
    [0.46, 0.58]
    """
    if np.ndim(sp.boot_cka) != 3 or np.ndim(sp.gram) != 3:
        return None
    F = dep.block_inner(sp.gram)
    reps = 2 * sp.boot_cka - F[None]
    diag = np.diagonal(reps, axis1=1, axis2=2)
    d = np.sqrt(np.where(diag > 0, diag, np.nan))          # a replicate far from w = 1 can leave the linear range
    with np.errstate(invalid="ignore", divide="ignore"):
        cka = reps / (d[:, :, None] * d[:, None, :])
    zero = np.diag(F) <= 0                   # a head with zero contexts (a dead head) shares nothing: 0, as cka_matrix
    cka[:, zero, :], cka[:, :, zero] = 0.0, 0.0
    return cka - np.asarray(cka_null)[None]


def corrected_beta(sums: dict[str, np.ndarray], null_sums: dict[str, np.ndarray] | None = None
                   ) -> np.ndarray | None:
    """``beta_corrected = beta_sym + score_scale - null``: the temperature, with the fit's finite-row bias removed.

    ``beta_sym`` is the head's slope averaged with its reflection's (logits ``-S``,
    :func:`..statistics.identification.symmetric_slopes`), and ``null`` the same average for the key null
    (``beta_null_keys``) when ``sums`` carry it, else for the null head of ``null_sums`` (random Gaussian
    scores at the head's score scale), else there is no correction (None). Works on point sums ``(H,)``
    and on bootstrap replicates ``(n_boot, H)`` alike.

    Parameters
    ----------
    sums : dict
        The head's :func:`..statistics.identification.score_sums` (optionally with the key null's).
    null_sums : dict, optional
        The null heads' score sums.

    Returns
    -------
    numpy.ndarray or None

    Examples
    --------
    A random head at score scale 2 on 24-token rows, and its Gaussian null: both saturate alike, and the
    correction brings the slope (about 1.48) back to the score scale, to 1-3 % (the null's logits are
    centered after drawing, so their root mean square is ``sqrt(1 - 1/24)`` of the requested scale):

    >>> import numpy as np, torch
    >>> from attnspec.diagnostics.statistics.identification import null_weights, score_sums
    >>> g = torch.Generator().manual_seed(0)
    >>> Q, K, Q0, K0 = torch.randn(4, 32, 4, 24, 16, generator=g, dtype=torch.float64)
    >>> allowed = torch.ones(32, 24, 24, dtype=torch.bool)
    >>> sums = score_sums(null_weights(allowed, np.full(4, 2.0), Q, K), allowed)
    >>> s = ident.fit_from_sums(sums)["score_scale"]
    >>> null = score_sums(null_weights(allowed, s, Q0, K0), allowed)
    >>> np.round(corrected_beta(sums, null) / s, 2)
    array([1.01, 1.01, 1.03, 1.03])
    """
    f, sl = ident.fit_from_sums(sums), ident.symmetric_slopes(sums)
    if "beta_null_keys" in sl:
        return sl["beta_sym"] + f["score_scale"] - sl["beta_null_keys"]
    if null_sums is not None:
        return sl["beta_sym"] + f["score_scale"] - ident.symmetric_slopes(null_sums)["beta_sym"]
    return None


def temperature_interval(corrected: tuple[np.ndarray, np.ndarray], scale: tuple[np.ndarray, np.ndarray]
                         ) -> tuple[np.ndarray, np.ndarray]:
    """The interval of a head's inverse temperature: the hull ``[min(c_lo, s_lo), max(c_hi, s_hi)]`` of the
    percentile intervals of ``beta_corrected`` (``c``) and ``score_scale`` (``s``) (module docstring).

    Parameters
    ----------
    corrected, scale : tuple of numpy.ndarray
        ``(lo, hi)`` each, ``(H,)``; NaN ends of ``corrected`` (no replicate) give the ``score_scale`` ends.

    Returns
    -------
    lo, hi : numpy.ndarray

    Examples
    --------
    A null-like head (the two readings agree) and a head whose linear response departs from its null:

    >>> import numpy as np
    >>> lo, hi = temperature_interval((np.array([1.96, 1.80]), np.array([2.04, 1.88])),
    ...                               (np.array([1.97, 1.96]), np.array([2.05, 2.04])))
    >>> lo.tolist(), hi.tolist()
    ([1.96, 1.8], [2.05, 2.04])
    """
    return np.fmin(corrected[0], scale[0]), np.fmax(corrected[1], scale[1])


#: The per-head diagnostics whose bootstrap replicates a diagnosis keeps (:func:`head_replicates`, and the
#: removal columns of :func:`removal_replicates`): what a paired comparison of two diagnoses differences.
REPLICATE_COLUMNS = ("score_scale", "beta_hat", "beta_corrected", "spec_w1_rel", "selection_score",
                     "query_selection_score", "removal_spec_shift", "cka_excess", "removal_effect",
                     "removal_first_order", "removal_estimate")


def head_replicates(fs: LayerFitSums, ns: NullFitSums | None, sp: LayerSpectra, tw: TextWeights,
                    pair_excess: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Bootstrap replicates ``(n_boot, H)`` of the per-head diagnostics of one layer (module docstring).

    Keys: ``score_scale``, ``beta_hat``, ``beta_corrected`` (its own replicates, when the fit has a null),
    ``spec_w1_rel``, ``selection_score``, ``query_selection_score`` (the rule of the whole corpus, as the
    table's), ``removal_spec_shift`` and ``cka_excess`` (the head's mean excess over its pairs). Replicate ``b``
    re-weights every text by the same Poisson weights ``tw.w[b]`` in every diagnosis of the same texts and seed,
    so the difference of two diagnoses' replicates is the replicate of their difference (a paired bootstrap).
    Empty without replicates.

    Parameters
    ----------
    fs : LayerFitSums
        Step 2's merged sums of the layer.
    ns : NullFitSums or None
        The layer's null-head sums.
    sp : LayerSpectra
        Step 3's merged spectra of the layer.
    tw : TextWeights
        The texts' bootstrap weights.
    pair_excess : numpy.ndarray, optional
        ``(n_boot, H, H)``: :func:`cka_excess_replicates` of the layer when the caller has them (the tables' pairs).

    Returns
    -------
    dict of str to numpy.ndarray

    Examples
    --------
    Steps 1-3 by hand on the tiny GPT-2 (one batch of two texts), then the replicates of its first layer:

    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> from attnspec.diagnostics.pipeline.collect import collect
    >>> from attnspec.diagnostics.pipeline.spectra import layer_batch_spectra
    >>> ad, batch = tiny_causal_lm()
    >>> lb, W = collect(ad, batch)[0], ad.sites[0].w_out()
    >>> fs = LayerFitSums().update(lb, W, 0, 20)
    >>> f = fs.fit()
    >>> ns = NullFitSums().update(lb.allowed, lb.valid, lb.order, lb.index, 2, 16, f["score_scale"], 0, 6, n_boot=20)
    >>> sp = LayerSpectra(2, head_dim=16, d_out=32).update(layer_batch_spectra(
    ...     lb, W, f, ns.fit(), fs.head_power(), 0, fs.gram, weights(0, lb.order, 20)))
    >>> reps = head_replicates(fs, ns, sp, TextWeights(0, lb.order, 20))
    >>> sorted(reps)[:4], reps["score_scale"].shape
    (['beta_corrected', 'beta_hat', 'cka_excess', 'query_selection_score'], (20, 2))
    """
    H = sp.n_heads
    if tw.n_boot == 0 or fs.boot_scores is None:
        return {}
    has_null = ns is not None and ns.scores is not None
    fr = fs.fit_replicates()
    out: dict[str, np.ndarray] = {"score_scale": fr["score_scale"], "beta_hat": fr["beta_hat"]}
    reps = corrected_beta(fs.boot_scores, ns.boot_scores if has_null else None)
    if reps is not None:
        out["beta_corrected"] = reps
    d, d0 = sp.departure_replicates(tw.column, tw.w, key=(tw.seed, tw.n_boot))
    out["spec_w1_rel"], out["selection_score"] = d, sel.selection_score(d, d0)
    q = fs.query
    if q is not None and q.n_boot == tw.n_boot:
        strict = q.best_rule()
        best = np.where(strict >= 0, strict, q.best_rule(1))       # as the table's rule (QuerySelectionSums.result)
        ex = q.excess_replicates()
        out["query_selection_score"] = np.stack(
            [ex[:, h, b] if b >= 0 else np.full(tw.n_boot, np.nan) for h, b in enumerate(best)], 1)
    il = sp.text_index(tw.column, layer=True)
    full = sp.pooled(sp.layer["act"])
    out["removal_spec_shift"] = np.stack([weighted_relative_w1(sp.pooled(sp.removed[h]), full, il, tw.w)
                                          for h in range(H)], 1)
    ex = pair_excess
    if ex is None and np.ndim(sp.gram) == 3:
        ex = cka_excess_replicates(sp, dep.cka_free_null(sp.gram, fs.free_null, H))
    if ex is not None and H > 1:
        off = ~np.eye(H, dtype=bool)
        with np.errstate(invalid="ignore"):
            out["cka_excess"] = np.where(off[None], ex, 0.0).sum(-1) / (H - 1)
    else:
        out["cka_excess"] = np.full((tw.n_boot, H), np.nan)
    return out


def removal_replicates(removal, exact: bool, first_order: bool) -> dict[str, np.ndarray]:
    """Bootstrap replicates ``(n_boot, n_layers, H_max)`` of the removal columns: ``removal_effect`` (exact
    removal), ``removal_first_order`` and ``removal_estimate`` (exact where measured, else first order), each
    the ratio of its replicate sums (:class:`..pipeline.head_removal.RatioSums`), NaN where a head was measured
    on fewer than two texts.

    Parameters
    ----------
    removal : RemovalSums
        Step 4's merged sums.
    exact, first_order : bool
        Which estimates the diagnosis made (its removal mode).

    Returns
    -------
    dict of str to numpy.ndarray
        Empty without replicates.

    Examples
    --------
    >>> from attnspec.diagnostics.pipeline.head_removal import RemovalSums
    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> ad, batch = tiny_causal_lm()
    >>> rem = RemovalSums().add_removal(ad, [batch], mean_ablation=False, means=None, max_tokens=10_000, n_boot=5)
    >>> {k: v.shape for k, v in removal_replicates(rem, exact=True, first_order=False).items()}
    {'removal_effect': (5, 2, 2)}
    """
    def reps(r) -> np.ndarray | None:
        if np.ndim(r.be) == 0:
            return None
        bn = np.asarray(r.bn, dtype=float)
        with np.errstate(invalid="ignore", divide="ignore"):
            x = np.where(bn > 0, r.be / np.where(bn > 0, bn, 1.0), np.nan)
        return np.where((np.asarray(r.m) >= 2)[None], x, np.nan)
    out: dict[str, np.ndarray] = {}
    ex = reps(removal.exact) if exact else None
    if ex is not None:
        out["removal_effect"] = ex
    fo = reps(removal.first_order) if first_order else None
    if fo is not None:
        out["removal_first_order"] = fo
        measured = removal.exact.measured if exact else np.zeros(fo.shape[1:], bool)
        out["removal_estimate"] = np.where(measured[None], ex if ex is not None else np.nan, fo)
    return out


#: Replicates of the selection score of a head whose interval end lies near the threshold, stage by stage
#: (:func:`refined_selection`).
REFINED_REPLICATES = (2000,)
#: Monte-Carlo standard deviation of a 2.5 % percentile of ``B`` replicates, in units of their standard deviation,
#: times ``sqrt(B)``: ``sqrt(0.025 * 0.975) / phi(1.96)`` (0.19 at 200 replicates; measured: up to 0.3, the
#: replicates being neither normal nor independent of the ends' interpolation).
_PERCENTILE_MC = float(np.sqrt(0.025 * 0.975) / (np.exp(-1.959964 ** 2 / 2) / np.sqrt(2 * np.pi)))
#: A head is refined when an interval end lies within this many of those standard deviations of the threshold.
_NEAR = 4.0


def refined_selection(iv: dict, reps: np.ndarray, sp: LayerSpectra, tw: TextWeights, threshold: float,
                      level: float = LEVEL, stages: tuple = REFINED_REPLICATES) -> dict[int, int]:
    """Recompute the ``selection_score`` interval of every head whose interval end lies near ``threshold`` from more
    replicates, stage by stage (``stages``, in place in ``iv``); returns the heads refined and the replicates behind
    each one's interval now.

    A percentile end of ``B`` replicates moves by about ``0.19-0.3 sd sqrt(200 / B)`` from one draw of the weights to
    another (``sd``: the replicates' spread): at 200 replicates the verdict of a head whose end sits within that of
    the threshold depends on the seed. A head whose end lies within four times ``0.19 sd / sqrt(B)`` of the threshold
    is recomputed from the stage's replicates (its first ``B`` are the same: each text's Poisson weights are one
    stream), and again at a next stage while it stays that close; other heads keep their interval. On MiniLM a
    head whose lower end is 0.007 above log 2 read 0.699-0.738 at 200 replicates, 0.693-0.705 at 2,000 and
    0.697-0.707 at 10,000 over three seeds; a stage of 10,000 cost three times the first stage's time (MiniLM: 19
    heads refined, 1.5 s and 2.9 s on a busy box), so the default is one stage.

    Examples
    --------
    The tiny GPT-2's layer 0 with a threshold put at head 0's lower end: that head is refined, the other not:

    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> from attnspec.diagnostics.pipeline.collect import collect
    >>> from attnspec.diagnostics.pipeline.spectra import layer_batch_spectra
    >>> ad, batch = tiny_causal_lm()
    >>> lb, W = collect(ad, batch)[0], ad.sites[0].w_out()
    >>> fs = LayerFitSums().update(lb, W, 0, 20); f = fs.fit()
    >>> ns = NullFitSums().update(lb.allowed, lb.valid, lb.order, lb.index, 2, 16, f["score_scale"], 0, 6, n_boot=20)
    >>> sp = LayerSpectra(2, head_dim=16, d_out=32).update(layer_batch_spectra(
    ...     lb, W, f, ns.fit(), fs.head_power(), 0, fs.gram, weights(0, lb.order, 20)))
    >>> tw = TextWeights(0, lb.order, 20)
    >>> reps = head_replicates(fs, ns, sp, tw)["selection_score"]
    >>> iv = {"selection_score_lo": np.array([0.1, -5.0]), "selection_score_hi": np.array([0.3, -4.0])}
    >>> refined_selection(iv, reps, sp, tw, threshold=0.1)
    {0: 2000}
    >>> float(iv["selection_score_lo"][1])                   # far from the threshold: kept
    -5.0
    """
    lo, hi = iv["selection_score_lo"], iv["selection_score_hi"]
    if tw.n_boot == 0 or reps is None or not len(reps):
        return {}
    sd = replicate_sd(reps)
    refined: dict[int, int] = {}
    B = tw.n_boot
    for n in stages:
        if n <= B:
            continue
        window = _NEAR * _PERCENTILE_MC * sd / np.sqrt(B)
        close = (np.abs(lo - threshold) < window) | (np.abs(hi - threshold) < window)
        near = np.flatnonzero(np.isfinite(lo) & np.isfinite(hi) & close)
        if not near.size:
            break
        more = TextWeights(tw.seed, tw.ids, n)
        d, d0 = sp.departure_replicates(more.column, more.w, heads=near)
        lo[near], hi[near] = interval(sel.selection_score(d, d0), level)
        refined.update({int(h): int(n) for h in near})
        B = n
    return dict(sorted(refined.items()))


def head_intervals(fs: LayerFitSums, ns: NullFitSums | None, sp: LayerSpectra, tw: TextWeights,
                   level: float = LEVEL, reps: dict | None = None) -> dict[str, np.ndarray]:
    """Interval columns ``(H,)`` of one layer (see module docstring): ``score_scale_lo/hi``, ``beta_hat_lo/hi``,
    ``beta_null``, ``beta_null_keys`` (when the fit sums carry the key null), ``beta_corrected`` and its
    ``_lo/_hi``, ``spec_w1_rel_lo/hi``, ``selection_score_lo/hi``, ``removal_spec_shift_lo/hi``. NaN intervals
    without replicates; the replicates are ``reps`` when given, else :func:`head_replicates`."""
    H = sp.n_heads
    out: dict[str, np.ndarray] = {}
    has_null = ns is not None and ns.scores is not None
    if has_null:
        out["beta_null"] = ns.fit()["beta_hat"]
    sl = ident.symmetric_slopes(fs.scores)
    if "beta_null_keys" in sl:
        out["beta_null_keys"] = sl["beta_null_keys"]
    corrected = corrected_beta(fs.scores, ns.scores if has_null else None)
    if corrected is not None:
        out["beta_corrected"] = corrected
    if tw.n_boot == 0 or fs.boot_scores is None:
        nan = np.full(H, np.nan)
        names = ["score_scale", "beta_hat", "spec_w1_rel", "selection_score", "removal_spec_shift", "cka_excess"] + (
            ["beta_corrected"] if corrected is not None else [])
        return {**out, **{f"{n}_{s}": nan for n in names for s in ("lo", "hi")}}
    reps = head_replicates(fs, ns, sp, tw) if reps is None else reps
    scale = interval(reps["score_scale"], level)
    out.update(_pairs(scale, "score_scale"))
    out.update(_pairs(interval(reps["beta_hat"], level), "beta_hat"))
    if corrected is not None:
        own = interval(reps["beta_corrected"], level) if "beta_corrected" in reps else (np.full(H, np.nan),) * 2
        out.update(_pairs(temperature_interval(own, scale), "beta_corrected"))
    for name in ("spec_w1_rel", "selection_score", "removal_spec_shift", "cka_excess"):
        out.update(_pairs(interval(reps[name], level), name))
    return out
