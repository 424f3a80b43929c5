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

    selection_score = log( D(Y, Y~) / D(Y0, Y0~) ),

both departures floored at :data:`DEPARTURE_RESOLUTION` (1e-5), below which float32 spectra do not resolve a
departure. Its precision under last-bit differences of the inputs is about ``1e-7 / min(D, D_null)``.

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

Without an interval (``lo``/``hi`` NaN: no replicates, or too few texts) the label is ``undetermined``; called
without ``lo``/``hi`` at all, :func:`label` applies the plain threshold rules to the score.

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

from ...spectra import ks_distance, moments, split_outliers, wasserstein1
from .devices import host

__all__ = ["baseline_sums", "baselines", "spectral_departure", "selection_score", "label", "DIFFUSE_THRESHOLD",
           "BETA_MAX_DIFFUSE", "MIN_TOKENS_FOR_LABEL", "LABELS", "DEPARTURE_RESOLUTION"]

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
    """The selection label of one head from its score, interval and score scale (rules in the module docstring).

    Parameters
    ----------
    score : float
        The head's selection score ``log(D / D_null)``; not finite gives ``'undetermined'``.
    score_scale : float
        The head's fitted score scale ``beta_hat`` (separates ``'diffuse'`` from ``'sparse'`` at ``beta_max``).
    threshold, beta_max : float
        The score threshold (default ``log 2``) and the largest score scale called diffuse (default 1.5).
    n_tokens, min_tokens : float, int
        Real tokens behind the statistics and the fewest that allow a label (default 400).
    lo, hi : float, optional
        The score's interval (not given: the score itself; not finite: no interval, ``'undetermined'``).

    Returns
    -------
    str
        ``'selective'``, ``'diffuse'``, ``'sparse'`` or ``'undetermined'``.

    Examples
    --------
    >>> label(1.2, score_scale=0.8), label(0.1, score_scale=0.8), label(0.1, score_scale=3.0)
    ('selective', 'diffuse', 'sparse')

    An interval across the threshold, or too few tokens, decides nothing:

    >>> label(0.5, 0.8, lo=0.2, hi=1.0), label(1.2, 0.8, n_tokens=100)
    ('undetermined', 'undetermined')
    """
    if n_tokens < min_tokens or not math.isfinite(score):
        return "undetermined"
    lo = score if lo is None else lo
    hi = score if hi is None else hi
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "undetermined"
    if lo >= threshold:
        return "selective"
    if hi < threshold:
        return "diffuse" if score_scale <= beta_max else "sparse"
    return "undetermined"


def baseline_sums(A: torch.Tensor, allowed: torch.Tensor, valid: torch.Tensor, special: torch.Tensor) -> dict:
    """Per-head sums for the entropy and confidence baselines of one batch (add them over batches).

    Parameters
    ----------
    A : torch.Tensor, shape (B, H, L, L)
        Attention weights, rows summing to 1 over the allowed keys.
    allowed : torch.Tensor of bool, shape (B, L, L)
        Which key each query may attend to (``n_i`` = allowed keys of query ``i``).
    valid, special : torch.Tensor of bool, shape (B, L)
        Real (non-padding) tokens, and special tokens (left out of the confidence).

    Returns
    -------
    dict
        ``ent`` (H,): sum over real queries of ``-sum_j A_ij log A_ij``; ``nq``: real queries; ``logn``:
        sum of ``log n_i``; ``ent_ratio`` (H,) and ``nq2``: sum and count of the entropy over ``log n_i`` for
        queries with ``n_i > 1``; ``conf`` (H,) and ``nconf``: sum and count of ``max_j A_ij`` over real,
        non-special queries. :func:`baselines` turns them into means.

    Examples
    --------
    A causal head attending uniformly to the allowed keys has the entropy of a uniform head:

    >>> import torch
    >>> allowed = torch.tril(torch.ones(3, 3, dtype=torch.bool))[None]
    >>> A = (allowed / allowed.sum(-1, keepdim=True))[:, None]           # (1, 1, 3, 3)
    >>> valid, special = torch.ones(1, 3, dtype=torch.bool), torch.zeros(1, 3, dtype=torch.bool)
    >>> s = baseline_sums(A, allowed, valid, special)
    >>> round(float(s["ent"][0]), 4), round(s["logn"], 4), s["nq"]       # log 1 + log 2 + log 3
    (1.7918, 1.7918, 3.0)
    """
    al = allowed[:, None]
    ent = -torch.linalg.vecdot(A, A.clamp_min(1e-30).log_().mul_(al), dim=-1)   # (B, H, L), one pass for the sum
    n = allowed.sum(-1).clamp_min(1).double()                         # (B, L)
    q = valid.bool()
    qc = q & ~special.bool()
    mx = (A * al).amax(-1)                                            # (B, H, L)
    dq = q[:, None].double()
    return {"ent": host((ent.double() * dq).sum(dim=(0, 2))), "nq": float(q.sum()),
            "logn": float((torch.log(n) * q).sum()),
            "ent_ratio": host((torch.where(n[:, None] > 1, ent.double() / torch.log(n[:, None]).clamp_min(1e-12), 0.0)
                               * (q & (n > 1))[:, None]).sum(dim=(0, 2))),
            "nq2": float((q & (n > 1)).sum()),
            "conf": host((mx.double() * qc[:, None]).sum(dim=(0, 2))), "nconf": float(qc.sum())}


def baselines(s: dict) -> dict[str, np.ndarray]:
    """The baselines per head from the sums of :func:`baseline_sums` (module docstring, *Baselines*).

    Parameters
    ----------
    s : dict
        Sums of :func:`baseline_sums`, added over batches.

    Returns
    -------
    dict of str to numpy.ndarray, each of shape (H,)
        ``entropy`` (mean attention entropy over real queries, nats), ``entropy_uniform`` (mean ``log n_i``),
        ``entropy_ratio`` (mean of entropy / ``log n_i``, 1 = uniform) and ``confidence`` (mean ``max_j A_ij``
        over real, non-special queries).

    Examples
    --------
    >>> import torch
    >>> allowed = torch.tril(torch.ones(3, 3, dtype=torch.bool))[None]
    >>> A = (allowed / allowed.sum(-1, keepdim=True))[:, None]           # uniform causal head
    >>> valid, special = torch.ones(1, 3, dtype=torch.bool), torch.zeros(1, 3, dtype=torch.bool)
    >>> b = baselines(baseline_sums(A, allowed, valid, special))
    >>> b["entropy_ratio"].round(4), b["confidence"].round(4)           # (1 + 1/2 + 1/3) / 3
    (array([1.]), array([0.6111]))
    """
    H = s["ent"].shape[0]
    return {"entropy": s["ent"] / max(s["nq"], 1), "entropy_uniform": np.full(H, s["logn"] / max(s["nq"], 1)),
            "entropy_ratio": s["ent_ratio"] / max(s["nq2"], 1), "confidence": s["conf"] / max(s["nconf"], 1)}


def spectral_departure(actual: np.ndarray, reference: np.ndarray) -> dict[str, float]:
    """How far a spectrum departs from a reference spectrum (the ``D`` of the selection score).

    Parameters
    ----------
    actual, reference : numpy.ndarray, 1-D
        Eigenvalues (e.g. a head's output spectrum and that of its Gaussian equivalent).

    Returns
    -------
    dict
        ``w1``: Wasserstein-1 distance of the two empirical laws; ``w1_rel``: ``w1 / m1(reference)``
        (dimensionless; 0 when both spectra are 0, a dead head's; NaN when only the reference's mean is not
        positive); ``ks``: Kolmogorov-Smirnov distance;
        ``n_outliers``: eigenvalues of ``actual`` above the reference's largest; ``m1``, ``m1_ref``: the mean
        eigenvalues. An empty input gives NaN distances and 0 outliers.

    Examples
    --------
    Doubling a spectrum moves it by its own mean, so ``w1_rel`` is 1:

    >>> import numpy as np
    >>> ref = np.arange(1.0, 11.0)
    >>> d = spectral_departure(2 * ref, ref)
    >>> round(d["w1"], 6), round(d["w1_rel"], 6), d["ks"], d["n_outliers"]
    (5.5, 1.0, 0.5, 5)
    >>> spectral_departure(ref, ref)["w1_rel"]
    0.0
    """
    if actual.size == 0 or reference.size == 0:
        return {"w1": np.nan, "w1_rel": np.nan, "ks": np.nan, "n_outliers": 0, "m1": np.nan, "m1_ref": np.nan}
    w1 = wasserstein1(actual, reference)
    m1r = float(moments(reference, 1)[0])
    edge = float(reference.max())
    rel = w1 / m1r if m1r > 0 else (0.0 if w1 == 0 else np.nan)
    return {"w1": w1, "w1_rel": rel, "ks": ks_distance(actual, reference),
            "n_outliers": int(split_outliers(actual, edge)[1].size), "m1": float(moments(actual, 1)[0]),
            "m1_ref": m1r}


#: Smallest relative departure ``D`` the selection score resolves: both departures are floored at it. Float32
#: spectra carry the last-bit differences of their inputs (another CPU's kernels, a perturbation of the weights by
#: 1e-7) at about 1e-7 to 1e-6 of ``m1`` in ``D``, and ``log(D / D_null)`` divides that by the smaller departure:
#: 1e-7 moved the score of a head at ``D = 0.2`` by 7e-7 and of a head at score scale 0.01 (``D = 1e-4``, a softmax
#: linear to 1e-4) by 3e-3. Below the floor, a hundred times that resolution, two departures are not told apart.
DEPARTURE_RESOLUTION = 1e-5


def selection_score(d_actual: np.ndarray, d_null: np.ndarray, floor: float = DEPARTURE_RESOLUTION) -> np.ndarray:
    """The selection score ``log(max(D, floor) / max(D_null, floor))`` (module docstring), elementwise.

    Parameters
    ----------
    d_actual, d_null : numpy.ndarray
        Relative departures ``w1_rel`` of the heads and of their null heads (:func:`spectral_departure`).
    floor : float
        Both are floored at it (default :data:`DEPARTURE_RESOLUTION`): a departure below it is not resolved, so
        that a head and its null both below it score 0, and last-bit differences of the inputs (about 1e-7 in a
        departure) move no score by more than about ``1e-7 / floor``.

    Returns
    -------
    numpy.ndarray
        The scores: 0 when a head departs from its equivalent as much as its null head does.

    Examples
    --------
    >>> import numpy as np
    >>> selection_score(np.array([0.4, 0.1]), np.array([0.1, 0.1])).round(4)   # log 4, log 1
    array([1.3863, 0.    ])

    Departures below the resolution are not told apart (a very cool head and its null):

    >>> selection_score(np.array([2e-6]), np.array([5e-7]))
    array([0.])
    """
    f = max(float(floor), 1e-300)
    return np.log(np.maximum(d_actual, f) / np.maximum(d_null, f))
