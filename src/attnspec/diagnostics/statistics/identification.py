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

**Temperature correction** (:func:`symmetric_slopes`): at score scale 2 or more on rows of a few dozen
keys the softmax is nearly a maximum, and ``beta_hat`` falls below the temperature by an amount that
depends on how many *distinct* keys a row has (repeated tokens have equal keys) and, at any scale, on the
skewness of a row's logits. The *key null* (:func:`key_null_weights`) is a random query against the head's
own keys at the head's row temperatures: it has the first, not the second; reflecting the logits
(``S -> -S``) removes the second.
"""
from __future__ import annotations

import numpy as np
import torch

from ...models.attention_calls import grouped_matmul
from .devices import host, like

__all__ = ["row_scores", "score_sums", "fit_from_sums", "symmetric_slopes", "surrogate_weights", "null_weights",
           "key_null_weights"]

_TINY = 1e-30


def row_scores(A: torch.Tensor, allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Row-centered logits of attention weights, the mask of the entries that enter the fit, and ``n_i``.

    ``S^raw_ij = log A_ij - mean_{j' allowed} log A_ij'`` on allowed entries, 0 elsewhere. The fit
    mask keeps the allowed entries of rows with ``n_i >= 2`` allowed keys.

    Parameters
    ----------
    A : torch.Tensor
        ``(B, H, L, L)`` attention weights (rows sum to 1 over the allowed keys).
    allowed : torch.Tensor
        ``(B, L, L)`` bool, the keys each query may attend to.

    Returns
    -------
    S : torch.Tensor
        ``(B, H, L, L)`` row-centered logits.
    fit_mask : torch.Tensor
        ``(B, 1, L, L)`` bool.
    n : torch.Tensor
        ``(B, 1, L, 1)`` number of allowed keys of each row (at least 1), in ``A``'s dtype.

    Examples
    --------
    Causal attention over 3 tokens; the first row has one key and is left out of the fit:

    >>> import torch
    >>> allowed = torch.ones(3, 3, dtype=torch.bool).tril()[None]
    >>> A = torch.tensor([[[[1., 0, 0], [.5, .5, 0], [.2, .4, .4]]]], dtype=torch.float64)
    >>> S, fit_mask, n = row_scores(A, allowed)
    >>> n.flatten().tolist(), fit_mask.sum().item()
    ([1.0, 2.0, 3.0], 5)
    >>> bool(torch.allclose(S.sum(-1), torch.zeros(3, dtype=torch.float64)))      # centered per row
    True
    """
    al = allowed[:, None]
    n = al.sum(-1, keepdim=True).clamp_min(1).to(A.dtype)
    S = A.clamp_min(_TINY).log_().mul_(al)                    # log A on the allowed entries, in place
    S = S.sub_(S.sum(-1, keepdim=True) / n).mul_(al)
    fit_mask = al & (n >= 2)
    return S, fit_mask, n


def score_sums(A: torch.Tensor, allowed: torch.Tensor, per_text: bool = False, keys: torch.Tensor | None = None,
               queries: torch.Tensor | None = None) -> dict[str, np.ndarray]:
    """Sufficient statistics of each head's least-squares fit of ``y = n_i A - 1`` on ``S^raw``.

    Over the fit entries (:func:`row_scores`): ``N`` (count), ``sxx = sum S^raw^2``,
    ``sxy = sum S^raw y`` and ``syy = sum y^2``; ``rsxy = sum (-S^raw) (n_i softmax(-S^raw)_ij - 1)``, the
    same cross sum for the reflected head (:func:`symmetric_slopes`); with ``keys`` and ``queries`` also
    the key null's ``knull_sxx, knull_sxy, knull_syy, knull_rsxy`` (:func:`score_sums` with ``keys``, one pass over
    ``A``). Sums of several batches add up.

    Parameters
    ----------
    A : torch.Tensor
        ``(B, H, L, L)`` attention weights (or a tile of query rows on the keys that hold their allowed keys,
        ``(B, H, r, k)``, :func:`..pipeline.collect.tiles_of`).
    allowed : torch.Tensor
        ``(B, L, L)`` bool (``(B, r, k)`` for a tile).
    per_text : bool, optional
        Keep one value per text: ``(B, H)`` instead of ``(H,)``.
    keys, queries : torch.Tensor, optional
        ``(B, H, k, d)`` the keys each query head reads (or ``(B, H_kv, k, d)``, one per key head, as
        :func:`key_null_weights` takes them) and ``(B, H, r, d)`` standard normal key-null queries.

    Returns
    -------
    dict
        ``{"N", "sxx", "sxy", "syy", "rsxy"}`` float64 arrays (and the key null's four sums).

    Examples
    --------
    Uniform causal attention: zero logits, zero response:

    >>> import torch
    >>> allowed = torch.ones(3, 3, dtype=torch.bool).tril()[None]
    >>> A = allowed[:, None].double() / allowed.sum(-1, keepdim=True)[:, None]
    >>> score_sums(A, allowed)
    {'N': array([5.]), 'sxx': array([0.]), 'sxy': array([0.]), 'syy': array([0.]), 'rsxy': array([0.])}
    """
    S, fm, n = row_scores(A, allowed)
    r2 = _row_dot(S, S)
    out = _sums(S, A, fm, n, per_text, r2)
    if keys is not None:
        A0, T = _key_null(S, n, allowed, keys, queries, r2)
        out.update({k: v for k, v in _sums(T, A0, fm, n, per_text, prefix="knull_").items() if k != "knull_N"})
    return out


def _row_dot(X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """``sum_j X_ij Y_ij`` per query row, ``(..., r)``, in the tiles' dtype: a row has at most ``L`` terms, and
    rows are summed in float64 (:func:`_sums`); one pass over ``X`` and ``Y``, no product kept."""
    return torch.linalg.vecdot(X, Y, dim=-1)


def _sums(S: torch.Tensor, A: torch.Tensor, fm: torch.Tensor, n: torch.Tensor, per_text: bool,
          r2: torch.Tensor | None = None, prefix: str = "") -> dict[str, np.ndarray]:
    """``N``, ``sum S^2``, ``sum S y``, ``sum y^2`` over the fit mask ``fm``, ``y = n A - 1``, and the
    reflected head's ``rsxy = sum (-S) (n softmax(-S) - 1)`` (``r2``: the rows' ``sum S^2`` when known).

    ``S`` is 0 off ``fm`` (off the allowed set by construction, and a row with one allowed key is 0 once
    centered), so only ``y`` needs the mask. Each row's sum is taken in the tiles' dtype and the rows' in float64."""
    y = (A * n).sub_(1).mul_(fm)
    Ar = torch.softmax(S.masked_fill(~fm, float("inf")).neg_(), dim=-1)     # the reflected head, logits -S
    yr = torch.nan_to_num_(Ar, nan=0.0).mul_(n).sub_(1)                      # rows without a fit entry: NaN -> 0
    dims = (2,) if per_text else (0, 2)
    d = lambda rows: host(rows.double().sum(dim=dims))  # noqa: E731
    N = fm.sum(dim=(2, 3) if per_text else (0, 2, 3), dtype=torch.float64)
    N = host(N.expand(*N.shape[:-1], A.shape[1]))
    return {f"{prefix}N": N, f"{prefix}sxx": d(_row_dot(S, S) if r2 is None else r2), f"{prefix}sxy": d(_row_dot(S, y)),
            f"{prefix}syy": d(_row_dot(y, y)), f"{prefix}rsxy": -d(_row_dot(S, yr))}


def fit_from_sums(sums: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Gaussian-equivalent parameters of each head from accumulated :func:`score_sums`.

    ``score_scale = sqrt(sxx / N)``, slope ``b = sxy / sxx`` per unit of raw score,
    ``beta_hat = b * score_scale`` (per unit of standardized score),
    ``alpha_hat = sqrt((syy - b sxy) / N)`` and ``r2 = 1 - (syy - b sxy) / syy``.

    Parameters
    ----------
    sums : dict
        ``{"N", "sxx", "sxy", "syy"}`` arrays of equal shape (other entries are ignored; see
        :func:`symmetric_slopes`).

    Returns
    -------
    dict
        ``{"score_scale", "beta_hat", "alpha_hat", "r2"}`` arrays of that shape.

    Examples
    --------
    A random head at inverse temperature 0.8 (:func:`null_weights`): ``beta_hat`` is close to 0.8
    and ``alpha_hat`` to ``sqrt(e^0.64 - 1 - 0.64) = 0.51``:

    >>> import numpy as np, torch
    >>> g = torch.Generator().manual_seed(0)
    >>> Q, K = torch.randn(2, 4, 1, 64, 64, generator=g, dtype=torch.float64)
    >>> allowed = torch.ones(4, 64, 64, dtype=torch.bool)
    >>> fit = fit_from_sums(score_sums(null_weights(allowed, np.array([0.8]), Q, K), allowed))
    >>> {k: np.round(v, 1) for k, v in fit.items()}
    {'score_scale': array([0.8]), 'beta_hat': array([0.8]), 'alpha_hat': array([0.5]), 'r2': array([0.7])}
    """
    N = np.maximum(sums["N"], 1)
    sxx, sxy, syy = sums["sxx"], sums["sxy"], sums["syy"]
    with np.errstate(invalid="ignore", divide="ignore"):
        s = np.sqrt(sxx / N)
        slope = np.where(sxx > 0, sxy / sxx, 0.0)  # per unit of raw score
        rss = np.maximum(syy - slope * sxy, 0.0)
        r2 = np.where(syy > 0, 1 - rss / syy, 0.0)
    return {"score_scale": s, "beta_hat": slope * s, "alpha_hat": np.sqrt(rss / N), "r2": r2}


def symmetric_slopes(sums: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The slopes of the temperature correction: ``beta_sym`` of the head and ``beta_null_keys`` of its key null.

    ``beta_sym = (beta_hat + beta_reflected) / 2`` with ``beta_reflected = score_scale * rsxy / sxx`` the
    fit of the reflected head (logits ``-S``, same rows): the softmax's linear slope grows with the
    skewness of a row's logits (``K'(s) = s + kappa_3 s^2 / 2 + ...`` for the cumulant function ``K`` of
    the standardized logits), and reflection flips the sign of every odd cumulant, so the average keeps
    the even part (the saturation of a finite row) and drops the skewness a head's preference for
    particular keys adds. ``beta_null_keys`` is the same average for the key null (:func:`score_sums` with ``keys``;
    the reflected key null is the antithetic draw ``-g``). Sums without ``rsxy`` give ``beta_sym = beta_hat``;
    without the key null's sums there is no ``beta_null_keys``.

    Parameters
    ----------
    sums : dict
        :func:`score_sums` (point sums ``(H,)`` or bootstrap replicates ``(n_boot, H)``).

    Returns
    -------
    dict
        ``{"beta_sym"}`` and, with the key null's sums, ``"beta_null_keys"``.

    Examples
    --------
    A random head at score scale 2 on rows of 24 keys, and its key null:

    >>> import numpy as np, torch
    >>> g = torch.Generator().manual_seed(0)
    >>> Q, K, G = torch.randn(3, 32, 4, 24, 16, generator=g, dtype=torch.float64)
    >>> allowed = torch.ones(32, 24, 24, dtype=torch.bool)
    >>> A = null_weights(allowed, np.full(4, 2.0), Q, K)
    >>> sl = symmetric_slopes(score_sums(A, allowed, keys=K, queries=G))
    >>> round(float(sl["beta_sym"].mean()), 2), round(float(sl["beta_null_keys"].mean()), 2)
    (1.48, 1.48)
    """
    N = np.maximum(sums["N"], 1)
    sxx = sums["sxx"]
    with np.errstate(invalid="ignore", divide="ignore"):
        slope = lambda xy, xx: np.where(xx > 0, xy / xx, 0.0) * np.sqrt(xx / N)  # noqa: E731
        out = {"beta_sym": slope((sums["sxy"] + sums["rsxy"]) / 2 if "rsxy" in sums else sums["sxy"], sxx)}
        if "knull_sxy" in sums:
            out["beta_null_keys"] = slope((sums["knull_sxy"] + sums["knull_rsxy"]) / 2, sums["knull_sxx"])
    return out


def surrogate_weights(A: torch.Tensor, allowed: torch.Tensor, scale: np.ndarray, beta: np.ndarray,
                      alpha: np.ndarray, Z: torch.Tensor) -> torch.Tensor:
    """Gaussian-equivalent attention weights ``(1 + beta_hat S + alpha_hat Z) / n_i`` on allowed entries.

    ``S = S^raw / score_scale`` are the standardized row-centered logits of ``A`` (:func:`row_scores`);
    0 off the allowed entries.

    Parameters
    ----------
    A : torch.Tensor
        ``(B, H, r, L)`` attention weights of a tile of ``r`` query rows.
    allowed : torch.Tensor
        ``(B, r, L)`` bool.
    scale, beta, alpha : numpy.ndarray
        ``(H,)`` fitted ``score_scale``, ``beta_hat``, ``alpha_hat`` (:func:`fit_from_sums`).
    Z : torch.Tensor
        Standard normal of ``A``'s shape on the allowed entries (:meth:`.noise.TextNoise.on_allowed` with purpose
        ``Draw.GE_NOISE`` or ``Draw.NULL_GE_NOISE``).

    Returns
    -------
    torch.Tensor
        ``(B, H, r, L)`` in ``A``'s dtype.

    Examples
    --------
    Without noise the weights are the linearized softmax, ``(1 + S^raw) / n``; rows still sum to 1:

    >>> import numpy as np, torch
    >>> allowed = torch.ones(1, 2, 2, dtype=torch.bool)
    >>> A = torch.tensor([[[[.5, .5], [.2, .8]]]], dtype=torch.float64)
    >>> W = surrogate_weights(A, allowed, np.array([1.]), np.array([1.]), np.array([0.]), torch.zeros_like(A))
    >>> W.sum(-1).tolist(), round(W[0, 0, 1, 1].item() - 0.5, 4), round(float(np.log(2)) / 2, 4)
    ([[[1.0, 1.0]]], 0.3466, 0.3466)
    """
    S, _, n = row_scores(A, allowed)
    t = lambda v: like(v, A)[None, :, None, None]  # noqa: E731
    W = S.mul_(t(beta / np.where(scale > 0, scale, 1.0)))          # beta_hat S^raw / score_scale, in place
    return W.addcmul_(Z.to(A.dtype), t(alpha)).add_(1).mul_(allowed[:, None] / n)


def null_weights(allowed: torch.Tensor, scale: np.ndarray, Q: torch.Tensor, K: torch.Tensor) -> torch.Tensor:
    """A random head at the same temperature: ``softmax(s_h G)`` over allowed keys, for a query tile.

    ``G = Q K^T / sqrt(d_qk)`` with ``Q`` and ``K`` iid standard normal (purpose ``Draw.NULL_SCORES``):
    the scores of the random-matrix model (docs/theory.md, *Model and normalization*; unit-variance
    entries, rank ``d_qk`` like a real head's).

    Parameters
    ----------
    allowed : torch.Tensor
        ``(B, r, L)`` bool; rows with no allowed key get weights 0.
    scale : numpy.ndarray
        ``(H,)`` inverse temperatures ``s_h``.
    Q : torch.Tensor
        ``(B, H, r, d_qk)`` the tile's query rows.
    K : torch.Tensor
        ``(B, H, L, d_qk)``.

    Returns
    -------
    torch.Tensor
        ``(B, H, r, L)``, rows summing to 1 over the allowed keys.

    Examples
    --------
    >>> import numpy as np, torch
    >>> g = torch.Generator().manual_seed(0)
    >>> Q, K = torch.randn(2, 1, 2, 3, 8, generator=g)
    >>> allowed = torch.ones(3, 3, dtype=torch.bool).tril()[None]
    >>> A = null_weights(allowed, np.array([1.0, 0.0]), Q, K)
    >>> A[0, 1]                                     # scale 0: uniform over the allowed keys
    tensor([[1.0000, 0.0000, 0.0000],
            [0.5000, 0.5000, 0.0000],
            [0.3333, 0.3333, 0.3333]])
    >>> A.sum(-1)
    tensor([[[1., 1., 1.],
             [1., 1., 1.]]])
    """
    G = Q @ K.transpose(-1, -2) / Q.shape[-1] ** 0.5
    logits = G.mul_(like(scale, G)[None, :, None, None]).masked_fill_(~allowed[:, None], float("-inf"))   # in place
    return torch.softmax(logits, dim=-1).nan_to_num_(nan=0.0)


def key_null_weights(A: torch.Tensor, allowed: torch.Tensor, keys: torch.Tensor, G: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """The key null of a tile of query rows: a random query against the head's own keys, at the head's row
    temperatures (module docstring).

    ``U_ij = g_i . k_j`` centered over the allowed keys of row ``i``, then ``T_ij = U_ij r_i / rho_i`` with
    ``r_i^2 = sum_j S^raw_ij^2`` (the head's row, :func:`row_scores`) and ``rho_i^2 = sum_j U_ij^2``, so
    that every row of ``T`` has the head's row mean square; ``A0 = softmax(T)`` over the allowed keys.
    Rows whose head logits are all equal (``r_i = 0``) stay uniform. The null keeps the keys (repeated
    tokens, their correlations) and every row's temperature, and randomizes which keys a query prefers.

    Parameters
    ----------
    A : torch.Tensor
        ``(B, H, r, L)`` the head's attention weights of ``r`` query rows.
    allowed : torch.Tensor
        ``(B, r, L)`` bool.
    keys : torch.Tensor
        ``(B, H, L, d)`` the keys each query head reads, any scale; or ``(B, H_kv, L, d)`` one per key head
        (``H_kv`` divides ``H``), query head ``h`` reading key head ``h // (H / H_kv)``.
    G : torch.Tensor
        ``(B, H, r, d)`` standard normal queries (seeded, drawn row by row).

    Returns
    -------
    A0 : torch.Tensor
        ``(B, H, r, L)`` in ``A``'s dtype, rows summing to 1 over the allowed keys (0 for rows without one).
    T : torch.Tensor
        ``(B, H, r, L)`` the null's row-centered logits (0 off the allowed keys).

    Examples
    --------
    Two equal keys (a repeated token) get equal null logits in every row; each row has the head's own
    root mean square:

    >>> import torch
    >>> g = torch.Generator().manual_seed(0)
    >>> allowed = torch.ones(1, 3, 3, dtype=torch.bool)
    >>> A = torch.softmax(torch.randn(1, 1, 3, 3, generator=g, dtype=torch.float64), -1)
    >>> keys = torch.randn(1, 1, 3, 4, generator=g, dtype=torch.float64)
    >>> keys[..., 2, :] = keys[..., 0, :]
    >>> A0, T = key_null_weights(A, allowed, keys, torch.randn(1, 1, 3, 4, generator=g, dtype=torch.float64))
    >>> bool(torch.allclose(T[..., 0], T[..., 2])), bool(torch.allclose(A0.sum(-1), torch.ones((), dtype=A0.dtype)))
    (True, True)
    >>> S, _, _ = row_scores(A, allowed)
    >>> bool(torch.allclose(T.pow(2).sum(-1), S.pow(2).sum(-1)))
    True
    """
    S, _, n = row_scores(A, allowed)
    return _key_null(S, n, allowed, keys, G)


def _key_null(S: torch.Tensor, n: torch.Tensor, allowed: torch.Tensor, keys: torch.Tensor, G: torch.Tensor,
              r2: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`key_null_weights` from the head's row-centered logits ``S`` and row sizes ``n`` (``r2``: the rows'
    ``sum_j S_ij^2``, ``(B, H, r)``, when known)."""
    al = allowed[:, None]
    U = grouped_matmul(G.to(S.dtype), keys.to(S.dtype).transpose(-1, -2))     # one key head per group, or per head
    U = U.masked_fill_(~al, 0.0)                                                     # padded keys may be NaN
    U = U.sub_(U.sum(-1, keepdim=True) / n).mul_(al)
    r2 = (_row_dot(S, S) if r2 is None else r2)[..., None]
    rho2 = _row_dot(U, U)[..., None]
    T = U.mul_(torch.sqrt(r2 / rho2.clamp_min(_TINY)) * (rho2 > 0))
    A0 = torch.softmax(T.masked_fill(~al, float("-inf")), dim=-1)
    return torch.nan_to_num_(A0, nan=0.0), T

