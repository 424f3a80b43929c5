"""Softmax attention and its Gaussian-equivalent surrogate (docs/theory.md, section "The Gaussian equivalent").

With scores ``S`` (entries approximately ``N(0, 1)``), softmax attention ``A = rowsoftmax(beta S)``
is replaced, per head, by

    A_surrogate = (1 1^T + beta S + alpha Z) / l,    alpha^2 = e^{beta^2} - 1 - beta^2,

with ``Z`` an ``l x l`` matrix of iid ``N(0, 1)`` entries, independent of everything else.
All functions work on stacks: the last two axes are (query, key).
"""
from __future__ import annotations

import numpy as np

from ..config import alpha_of_beta

__all__ = ["softmax_rows", "surrogate_attention"]


def softmax_rows(scores: np.ndarray, beta: float, mask: np.ndarray | None = None) -> np.ndarray:
    """Row-wise ``softmax(beta * scores)``, stable for any finite beta (max-subtracted, float64).

    Parameters
    ----------
    scores : ndarray, shape (..., l_q, l_k)
    beta : float
        Inverse temperature.
    mask : ndarray of bool, broadcastable to ``scores``, optional
        ``True`` where a key may be attended to; masked entries get weight exactly 0. Every row
        must allow at least one key.

    Returns
    -------
    ndarray, shape (..., l_q, l_k), rows summing to 1.

    Examples
    --------
    >>> softmax_rows(np.array([[0.0, np.log(3.0)]]), beta=1.0)
    array([[0.25, 0.75]])
    >>> softmax_rows(np.zeros((1, 3)), 1.0, mask=np.array([True, True, False]))
    array([[0.5, 0.5, 0. ]])
    """
    z = beta * np.asarray(scores, dtype=float)
    if mask is not None:
        mask = np.broadcast_to(np.asarray(mask, dtype=bool), z.shape)
        if not mask.any(axis=-1).all():
            raise ValueError("mask leaves a query row with no key to attend to")
        z = np.where(mask, z, -np.inf)
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)  # exp(-inf) = 0 for masked keys; no overflow after the max shift
    return e / e.sum(axis=-1, keepdims=True)


def surrogate_attention(scores: np.ndarray, beta: float, rng: np.random.Generator,
                        alpha: float | None = None) -> np.ndarray:
    """Gaussian-equivalent attention ``(1 1^T + beta S + alpha Z) / l`` with fresh noise ``Z``.

    Parameters
    ----------
    scores : ndarray, shape (..., l, l)
    beta : float
        Linear coefficient (the inverse temperature for softmax attention with N(0,1) scores).
    rng : numpy Generator
        Source of ``Z`` (iid N(0, 1), same shape as ``scores``).
    alpha : float, optional
        Noise scale; defaults to ``alpha_of_beta(beta)``. A fitted head passes its own estimate.

    Examples
    --------
    >>> A = surrogate_attention(np.zeros((4, 4)), beta=0.0, rng=np.random.default_rng(0))   # beta = 0: uniform
    >>> A[0]
    array([0.25, 0.25, 0.25, 0.25])
    >>> A = surrogate_attention(np.zeros((200, 200)), beta=1.0, rng=np.random.default_rng(0))
    >>> round(float(np.var(200 * A)), 1)                  # alpha^2 = e - 2
    0.7
    """
    S = np.asarray(scores, dtype=float)
    l = S.shape[-1]
    a = alpha_of_beta(beta) if alpha is None else alpha
    return (1.0 + beta * S + a * rng.standard_normal(S.shape)) / l
