"""Per-head bootstrap intervals of step 5 (:mod:`.bootstrap`: Poisson weights over texts, percentile
intervals at :data:`.bootstrap.LEVEL`).

* ``beta_hat``: the least-squares fit on each replicate's score sums (:meth:`.steps.fit.LayerFitSums.fit_replicates`).
* ``beta_null``: the same fit for the layer's null head at the head's score scale (random scores, same
  masks and text lengths): what ``beta_hat`` returns for a random head here. ``beta_hat`` of a random head
  falls below its score scale on short texts and at high temperature (the softmax normalization is not
  the linear model); ``beta_corrected = beta_hat + score_scale - beta_null`` removes that finite-size bias
  for heads whose scores are close to Gaussian, and its replicates use the same text weights for the
  three terms.
* ``spec_w1_rel`` and ``selection_score``: W1 between the weighted pooled spectra of the head and of its
  Gaussian equivalent (and of the null head and its equivalent), each eigenvalue weighted by its text's
  weight (:func:`.bootstrap.weighted_w1`), relative to the weighted mean of the reference. The fitted
  equivalents are held fixed (the replicate re-weights the texts, it does not refit or redraw them).
* ``removal_spec_shift``: the same for the layer's spectrum with and without the head.
* ``cka_excess`` (heads and pairs): linearized bootstrap of the CKA. ``CKA_gh = F_gh / sqrt(F_gg F_hh)`` with
  ``F_gh = ||C_gh||_F^2`` and ``C = sum_b C^b`` the Gram sum over texts; to first order in the weights
  ``F_gh(w) = 2 sum_b w_b <C_gh, C^b_gh> - F_gh``, whose weighted sums the spectra step accumulates
  (:func:`.steps.spectra.cka_influence`; exact ``C`` from step 2, so one extra pass is not needed). The null
  CKA (free rotations) is held fixed, like the fitted equivalents.
"""
from __future__ import annotations

import numpy as np

from . import dependence as dep
from . import selection as sel
from .bootstrap import LEVEL, interval, weighted_mean, weighted_w1, weights
from .steps.fit import LayerFitSums, NullFitSums
from .steps.spectra import LayerSpectra

__all__ = ["TextWeights", "head_intervals", "cka_excess_replicates"]


class TextWeights:
    """The bootstrap weights of every text of a diagnosis, drawn once: ``self(order) -> (n_boot, B)``."""

    def __init__(self, seed: int, text_ids: np.ndarray, n_boot: int):
        self.ids = np.unique(np.asarray(text_ids, dtype=np.int64))
        self.w = weights(seed, self.ids, n_boot)
        self.n_boot = n_boot

    def column(self, order) -> np.ndarray:
        """Columns of :attr:`w` of the texts ``order``."""
        return np.searchsorted(self.ids, np.asarray(order, dtype=np.int64))


def _rel_w1(x: np.ndarray, y: np.ndarray, idx: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Replicates of ``W1(x, y) / m1(y)``; both spectra have the text index ``idx`` (same texts and counts)."""
    if x.size == 0 or y.size == 0:
        return np.full(w.shape[0], np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        return weighted_w1(x, idx, y, idx, w) / weighted_mean(y, idx, w)


def _pairs(lo_hi: tuple[np.ndarray, np.ndarray], name: str) -> dict[str, np.ndarray]:
    return {f"{name}_lo": lo_hi[0], f"{name}_hi": lo_hi[1]}


def cka_excess_replicates(sp: LayerSpectra) -> np.ndarray | None:
    """Replicates ``(n_boot, H, H)`` of ``cka - cka_null`` (see module docstring), or None without them."""
    if np.ndim(sp.boot_cka) != 3 or np.ndim(sp.gram) != 2:
        return None
    H = sp.n_heads
    dh = sp.gram.shape[0] // H
    blocks = sp.gram.reshape(H, dh, H, dh)
    F = np.einsum("gahb,gahb->gh", blocks, blocks)
    reps = 2 * sp.boot_cka - F[None]
    diag = np.diagonal(reps, axis1=1, axis2=2)
    d = np.sqrt(np.where(diag > 0, diag, np.nan))          # a replicate far from w = 1 can leave the linear range
    with np.errstate(invalid="ignore", divide="ignore"):
        cka = reps / (d[:, :, None] * d[:, None, :])
    return cka - dep.cka_matrix(sp.gram_free, H)[None]


def head_intervals(fs: LayerFitSums, ns: NullFitSums | None, sp: LayerSpectra, tw: TextWeights,
                   level: float = LEVEL) -> dict[str, np.ndarray]:
    """Interval columns ``(H,)`` of one layer (see module docstring): ``beta_hat_lo/hi``, ``beta_null``,
    ``beta_corrected`` and its ``_lo/_hi``, ``spec_w1_rel_lo/hi``, ``selection_score_lo/hi``,
    ``removal_spec_shift_lo/hi``. NaN intervals without replicates."""
    H = sp.n_heads
    out: dict[str, np.ndarray] = {}
    f = fs.fit()
    if ns is not None and ns.scores is not None:
        f0 = ns.fit()
        out["beta_null"] = f0["beta_hat"]
        out["beta_corrected"] = f["beta_hat"] + f["score_scale"] - f0["beta_hat"]
    if tw.n_boot == 0 or fs.boot_scores is None:
        nan = np.full(H, np.nan)
        names = ["beta_hat", "spec_w1_rel", "selection_score", "removal_spec_shift", "cka_excess"] + (
            ["beta_corrected"] if "beta_null" in out else [])
        return {**out, **{f"{n}_{s}": nan for n in names for s in ("lo", "hi")}}
    fr = fs.fit_replicates()
    out.update(_pairs(interval(fr["beta_hat"], level), "beta_hat"))
    if "beta_null" in out and ns.boot_scores is not None:
        f0r = ns.fit_replicates()
        out.update(_pairs(interval(fr["beta_hat"] + fr["score_scale"] - f0r["beta_hat"], level), "beta_corrected"))
    ih = sp.text_index(tw.column)
    d = np.stack([_rel_w1(sp.pooled(sp.heads["act"][h]), sp.pooled(sp.heads["ge"][h]), ih, tw.w)
                  for h in range(H)], 1)
    d0 = np.stack([_rel_w1(sp.pooled(sp.heads["null"][h]), sp.pooled(sp.heads["nullge"][h]), ih, tw.w)
                   for h in range(H)], 1)
    out.update(_pairs(interval(d, level), "spec_w1_rel"))
    out.update(_pairs(interval(sel.selection_score(d, d0), level), "selection_score"))
    il = sp.text_index(tw.column, layer=True)
    full = sp.pooled(sp.layer["act"])
    shift = np.stack([_rel_w1(sp.pooled(sp.removed[h]), full, il, tw.w) for h in range(H)], 1)
    out.update(_pairs(interval(shift, level), "removal_spec_shift"))
    ex = cka_excess_replicates(sp)
    if ex is not None and H > 1:
        off = ~np.eye(H, dtype=bool)
        with np.errstate(invalid="ignore"):
            per_head = np.where(off[None], ex, 0.0).sum(-1) / (H - 1)
        out.update(_pairs(interval(per_head, level), "cka_excess"))
    else:
        out.update(_pairs((np.full(H, np.nan), np.full(H, np.nan)), "cka_excess"))
    return out
