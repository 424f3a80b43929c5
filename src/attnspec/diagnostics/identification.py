"""Per-head identification of the Gaussian equivalent (docs/theory.md, sections *The Gaussian
equivalent* and *From theory to diagnosis*).

For head ``h``, query ``i`` with ``n_i`` allowed keys (real tokens, causal and window rules) and
allowed key ``j``:

* scores: the head's logits centered per query row, ``S^raw_ij = log A_ij - mean_{j'} log A_ij'``
  (softmax is invariant to a per-row constant, so these are exactly the pre-softmax logits
  ``q_i.k_j / sqrt(d)`` up to that constant; recovering them from ``A`` works for every adapter);
* score scale ``s_h = sqrt(mean S^raw_ij^2)`` over all allowed entries of all texts, and the
  standardized scores ``S = S^raw / s_h`` (unit variance, as in the theory where logits are
  ``beta * S`` with ``S`` standard normal): ``s_h`` is the inverse temperature the head actually uses;
* response ``y_ij = n_i A_ij - 1`` (``l A - 1`` with ``l`` the row's number of allowed keys);
* least squares without intercept (both sides have zero row means):
  ``beta_hat = sum S y / sum S^2``, ``alpha_hat^2 = mean (y - beta_hat S)^2``,
  ``R^2 = 1 - sum (y - beta_hat S)^2 / sum y^2`` (share of attention variance that is linear mixing).

For a head with Gaussian scores at scale ``beta`` (a random head), Stein's lemma gives
``beta_hat -> beta = s_h`` and ``alpha_hat^2 -> e^{beta^2} - 1 - beta^2``. Rows with fewer than two
allowed keys (the first token of a causal model) carry no information and are skipped.
The fitted Gaussian equivalent replaces ``A_h`` by ``(1 1^T + beta_hat S + alpha_hat Z) / n_i`` on
the allowed entries, ``Z`` iid standard normal (seeded), same values and output projection.
"""
from __future__ import annotations

import numpy as np
import torch

__all__ = ["row_scores", "score_sums", "fit_from_sums", "add_sums", "surrogate_weights", "null_weights"]

_TINY = 1e-30


def row_scores(A: torch.Tensor, allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Row-centered logits ``S^raw`` ``(B, H, L, L)`` (0 off ``allowed``), the fit mask and ``n_i``.

    ``A``: ``(B, H, L, L)``; ``allowed``: ``(B, L, L)``. The fit mask ``(B, 1, L, L)`` keeps allowed
    entries of rows with ``n_i >= 2``; ``n_i`` has shape ``(B, 1, L, 1)``.
    """
    al = allowed[:, None]
    n = al.sum(-1, keepdim=True).clamp_min(1).to(A.dtype)
    logA = torch.log(A.clamp_min(_TINY)) * al
    S = (logA - logA.sum(-1, keepdim=True) / n) * al
    fit_mask = al & (n >= 2)
    return S, fit_mask, n


def score_sums(A: torch.Tensor, allowed: torch.Tensor, per_text: bool = False) -> dict[str, np.ndarray]:
    """Sufficient statistics per head (float64 ``(H,)``): ``N, sxx, sxy, syy`` over fit entries;
    per text ``(B, H)`` when ``per_text`` (their sum over texts is the default's)."""
    S, fm, n = row_scores(A, allowed)
    y = (n * A - 1) * fm
    S = S * fm
    dims = (2, 3) if per_text else (0, 2, 3)
    d = lambda t: t.sum(dim=dims, dtype=torch.float64).numpy()  # noqa: E731
    N = fm.sum(dim=dims, dtype=torch.float64)
    N = N.expand(*N.shape[:-1], A.shape[1]).numpy()
    return {"N": N, "sxx": d(S * S), "sxy": d(S * y), "syy": d(y * y)}


def add_sums(a: dict | None, b: dict) -> dict:
    return dict(b) if a is None else {k: a[k] + b[k] for k in a}


def fit_from_sums(sums: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``score_scale``, ``beta_hat``, ``alpha_hat``, ``r2`` per head from accumulated sums."""
    N = np.maximum(sums["N"], 1)
    sxx, sxy, syy = sums["sxx"], sums["sxy"], sums["syy"]
    with np.errstate(invalid="ignore", divide="ignore"):
        s = np.sqrt(sxx / N)
        slope = np.where(sxx > 0, sxy / sxx, 0.0)  # per unit of raw score
        rss = np.maximum(syy - slope * sxy, 0.0)
        r2 = np.where(syy > 0, 1 - rss / syy, 0.0)
    return {"score_scale": s, "beta_hat": slope * s, "alpha_hat": np.sqrt(rss / N), "r2": r2}


def surrogate_weights(A: torch.Tensor, allowed: torch.Tensor, scale: np.ndarray, beta: np.ndarray,
                      alpha: np.ndarray, Z: torch.Tensor) -> torch.Tensor:
    """Gaussian-equivalent weights ``(1 + beta_hat S + alpha_hat Z) / n_i`` on allowed entries.

    ``A`` ``(B, H, r, L)`` (a query tile), ``allowed`` ``(B, r, L)``, ``Z`` standard normal of ``A``'s
    shape (:meth:`TextNoise.rows` with purpose ``Draw.GE_NOISE`` or ``Draw.NULL_GE_NOISE``).
    """
    S, _, n = row_scores(A, allowed)
    t = lambda v: torch.as_tensor(v, dtype=A.dtype)[None, :, None, None]  # noqa: E731
    Sstd = S / t(np.where(scale > 0, scale, 1.0))
    return (1 + t(beta) * Sstd + t(alpha) * Z.to(A.dtype)) / n * allowed[:, None]


def null_weights(allowed: torch.Tensor, scale: np.ndarray, Q: torch.Tensor, K: torch.Tensor) -> torch.Tensor:
    """A random head at the same temperature: ``softmax(s_h G)`` over allowed keys, for a query tile.

    ``G = Q K^T / sqrt(d_qk)`` with ``Q`` ``(B, H, r, d_qk)`` (the tile's rows) and ``K``
    ``(B, H, L, d_qk)`` iid standard normal (purpose ``Draw.NULL_SCORES``): the scores of the
    random-matrix model (docs/theory.md, *Model and normalization*; unit-variance entries, rank ``d_qk`` like a real head's).
    ``allowed`` ``(B, r, L)``; rows with no allowed key are 0.
    """
    G = Q @ K.transpose(-1, -2) / Q.shape[-1] ** 0.5
    logits = G * torch.as_tensor(scale, dtype=G.dtype)[None, :, None, None]
    logits = logits.masked_fill(~allowed[:, None], float("-inf"))
    return torch.nan_to_num(torch.softmax(logits, dim=-1), nan=0.0)
