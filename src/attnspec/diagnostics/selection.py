"""Selection behaviour: the RMT selection score and the classic baselines.

**Selection score** (built on identification). Let ``D(Y, Y~) = W1(spec Y, spec Y~) / m1(spec Y~)``
be the Wasserstein-1 distance between a head's centered output spectrum and the spectrum of its
fitted Gaussian equivalent, relative to the equivalent's mean eigenvalue (dimensionless, invariant to
the value path's scale). A finite, trained model never matches its equivalent exactly, and even a
random softmax head departs from its equivalent at finite ``l`` (more so at high temperature, see
docs/theory.md, section *Finite size: how far to trust the equivalence*). The score therefore compares
the head with a *null head*: the same values, output projection, masks and score scale ``s_h``, but the
random scores of the theory's model (``A0 = softmax(s_h G)``, ``G = Q K^T / sqrt(d_head)`` with iid
standard normal ``Q, K``, drawn text by text), and its own fitted equivalent (fit pooled over all
texts, like the head's):

    selection_score = log( D(Y, Y~) / D(Y0, Y0~) ).

It is about 0 for a noise-like head (a random head at the same temperature departs as much), and
positive when the head's attention is structured beyond what its temperature explains (it selects
specific tokens consistently). Each label is a test against the bootstrap interval of the score
(:mod:`.bootstrap`: ``B`` Poisson-weighted replicates over texts, two-sided 95 % percentile interval
``[lo, hi]``, so each bound is a one-sided 97.5 % bound). Labels (column ``selection``):

* ``selective``: ``lo >= threshold`` (default ``log 2``: the head departs from its equivalent at least
  twice as much as a random head at its temperature, and the lower bound says so). Nominal
  false-positive rate for a head whose true score is at the threshold: 2.5 %; for a noise-like head
  (true score about 0) far less;
* ``diffuse`` (flag ``diffuse = True``): ``hi < threshold`` and ``score_scale <= beta_max``
  (default 1.5): noise-like and in the temperature range where the Gaussian equivalence is
  quantitative (docs/theory.md, *The Gaussian equivalent* and *Finite size*);
* ``sparse``: ``hi < threshold`` but ``score_scale > beta_max``: the attention is
  concentrated, yet its output spectrum departs from the equivalent no more than a random head's at
  that temperature does. Spectra cannot tell a consistent one-token pattern (e.g. attending to the
  token itself) from random one-token picks; read ``confidence`` beside it;
* ``undetermined``: the interval contains the threshold (the evidence does not decide), or the
  statistics rest on fewer than ``min_tokens`` real tokens (default :data:`MIN_TOKENS_FOR_LABEL` =
  400). The selection score of a random head fluctuates with the corpus size: on randomly initialized
  BERT, RoBERTa, GPT-2 and Llama (3 seeds each, 8 heads, built-in texts), point scores alone called 14
  of 96 heads "selective" on 25 tokens, 8 of 96 on 104, 1 of 96 on 197 and none on 383 to 1,636 tokens.
  Below the minimum no label is given (the scores are still reported).

Without replicates (``n_boot = 0``) ``lo = hi = score`` and the labels are the plain threshold rules.

**Baselines** (named as in the literature, padding excluded):

* ``entropy`` (Clark et al. 2019): mean over real query tokens of ``-sum_j A_ij log A_ij``;
  ``entropy_uniform`` is the mean of ``log n_i`` (a head attending uniformly); ``entropy_ratio`` their
  quotient (1 = uniform);
* ``confidence`` (Voita et al. 2019): mean over real, non-special query tokens of ``max_j A_ij``.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ..spectra import ks_distance, moments, split_outliers, wasserstein1

__all__ = ["baseline_sums", "baselines", "spectral_departure", "selection_score", "label", "DIFFUSE_THRESHOLD",
           "BETA_MAX_DIFFUSE", "MIN_TOKENS_FOR_LABEL", "LABELS"]

#: Default threshold on the selection score below which a head is noise-like (log 2).
DIFFUSE_THRESHOLD = math.log(2.0)
#: Largest score scale at which a noise-like head is called diffuse (above: 'sparse').
BETA_MAX_DIFFUSE = 1.5
#: Fewest real tokens (all texts together) for a selection label; fewer give ``'undetermined'``.
MIN_TOKENS_FOR_LABEL = 400
#: The labels of column ``selection``.
LABELS = ("selective", "diffuse", "sparse", "undetermined")


def label(score: float, score_scale: float, threshold: float = DIFFUSE_THRESHOLD,
          beta_max: float = BETA_MAX_DIFFUSE, n_tokens: float = math.inf,
          min_tokens: int = MIN_TOKENS_FOR_LABEL, lo: float | None = None, hi: float | None = None) -> str:
    """``'selective'``, ``'diffuse'``, ``'sparse'`` or ``'undetermined'`` (see module docstring); ``lo``,
    ``hi``: the score's interval (default: the score itself)."""
    if n_tokens < min_tokens or not math.isfinite(score):
        return "undetermined"
    lo = score if lo is None or not math.isfinite(lo) else lo
    hi = score if hi is None or not math.isfinite(hi) else hi
    if lo >= threshold:
        return "selective"
    if hi < threshold:
        return "diffuse" if score_scale <= beta_max else "sparse"
    return "undetermined"


def baseline_sums(A: torch.Tensor, allowed: torch.Tensor, valid: torch.Tensor, special: torch.Tensor) -> dict:
    """Per-head sums ``(H,)`` for entropy and confidence (accumulate over batches)."""
    al = allowed[:, None]
    ent = -(A * torch.log(A.clamp_min(1e-30)) * al).sum(-1)         # (B, H, L)
    n = allowed.sum(-1).clamp_min(1).double()                         # (B, L)
    q = valid.bool()
    qc = q & ~special.bool()
    mx = (A * al).amax(-1)                                            # (B, H, L)
    dq = q[:, None].double()
    return {"ent": (ent.double() * dq).sum(dim=(0, 2)).numpy(), "nq": float(q.sum()),
            "logn": float((torch.log(n) * q).sum()),
            "ent_ratio": (torch.where(n[:, None] > 1, ent.double() / torch.log(n[:, None]).clamp_min(1e-12), 0.0)
                          * (q & (n > 1))[:, None]).sum(dim=(0, 2)).numpy(),
            "nq2": float((q & (n > 1)).sum()),
            "conf": (mx.double() * qc[:, None]).sum(dim=(0, 2)).numpy(), "nconf": float(qc.sum())}


def baselines(s: dict) -> dict[str, np.ndarray]:
    """``entropy``, ``entropy_uniform``, ``entropy_ratio``, ``confidence`` per head."""
    H = s["ent"].shape[0]
    return {"entropy": s["ent"] / max(s["nq"], 1), "entropy_uniform": np.full(H, s["logn"] / max(s["nq"], 1)),
            "entropy_ratio": s["ent_ratio"] / max(s["nq2"], 1), "confidence": s["conf"] / max(s["nconf"], 1)}


def spectral_departure(actual: np.ndarray, reference: np.ndarray) -> dict[str, float]:
    """``w1``, ``w1_rel`` (= W1 / m1(reference)), ``ks``, ``n_outliers`` (above the reference's max),
    ``m1`` of both."""
    if actual.size == 0 or reference.size == 0:
        return {"w1": np.nan, "w1_rel": np.nan, "ks": np.nan, "n_outliers": 0, "m1": np.nan, "m1_ref": np.nan}
    w1 = wasserstein1(actual, reference)
    m1r = float(moments(reference, 1)[0])
    edge = float(reference.max())
    return {"w1": w1, "w1_rel": w1 / m1r if m1r > 0 else np.nan, "ks": ks_distance(actual, reference),
            "n_outliers": int(split_outliers(actual, edge)[1].size), "m1": float(moments(actual, 1)[0]),
            "m1_ref": m1r}


def selection_score(d_actual: np.ndarray, d_null: np.ndarray) -> np.ndarray:
    """``log(D / D_null)`` (see module docstring); both floored at 1e-12."""
    return np.log(np.maximum(d_actual, 1e-12) / np.maximum(d_null, 1e-12))
