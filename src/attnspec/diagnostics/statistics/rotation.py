"""Free rotation of head contexts: each head's centered context moved by an independent Haar rotation
of the text's token space (used for the empirical free sum of a layer's heads and the CKA null,
:mod:`.dependence`).

``M_h -> O_h M_h`` keeps ``M_h^T M_h``, hence each head's spectrum and its coupling to ``W_O^h``, and
destroys only the heads' alignment in token space. Draws are per text (:class:`.noise.TextNoise`), so
the result depends neither on batching nor on padding.
"""
from __future__ import annotations

import numpy as np
import torch

from .noise import TextNoise

__all__ = ["free_rotation", "helmert_basis", "helmert_apply", "ROTATION_BYTES"]

#: Budget (bytes) of one text's float64 temporaries in :func:`free_rotation` (its heads are taken in chunks under it).
ROTATION_BYTES = 8 * 2 ** 20


def helmert_basis(n: int) -> np.ndarray:
    """Orthonormal basis ``(n, n - 1)`` of the sum-zero vectors of ``R^n`` (Helmert): column ``k``
    is ``(1, ..., 1, -k, 0, ..., 0) / sqrt(k (k + 1))`` with ``k`` ones.

    Parameters
    ----------
    n : int
        Dimension (>= 1; ``n = 1`` gives an empty ``(1, 0)`` basis).

    Returns
    -------
    numpy.ndarray, shape (n, n - 1)

    Examples
    --------
    >>> import numpy as np
    >>> E = helmert_basis(3)
    >>> E.round(4)
    array([[ 0.7071,  0.4082],
           [-0.7071,  0.4082],
           [ 0.    , -0.8165]])
    >>> np.allclose(E.T @ E, np.eye(2)), np.allclose(E.sum(axis=0), 0)
    (True, True)
    """
    i, k = np.arange(n)[:, None], np.arange(1, n)[None, :]
    return np.where(i < k, 1.0, np.where(i == k, -k, 0.0)) / np.sqrt(k * (k + 1.0))


def helmert_apply(X: torch.Tensor, transpose: bool = False) -> torch.Tensor:
    """``E Y`` (``Y`` ``(..., n - 1, d)``) or, with ``transpose``, ``E^T X`` (``X`` ``(..., n, d)``), ``E`` the Helmert
    basis ``(n, n - 1)`` (:func:`helmert_basis`), from prefix sums without forming ``E``: ``O(n d)`` instead of
    ``O(n^2 d)``. With ``c_k = 1 / sqrt(k (k + 1))``: ``(E^T X)_k = c_k (sum_{i < k} X_i - k X_k)`` and
    ``(E Y)_i = sum_{k > i} c_k Y_k - i c_i Y_i``.

    Examples
    --------
    >>> g = torch.Generator().manual_seed(0)
    >>> X, Y = torch.randn(2, 5, 3, generator=g, dtype=torch.float64), torch.randn(2, 4, 3, generator=g, dtype=torch.float64)
    >>> E = torch.from_numpy(helmert_basis(5))
    >>> bool(torch.allclose(helmert_apply(X, transpose=True), E.T @ X)), bool(torch.allclose(helmert_apply(Y), E @ Y))
    (True, True)
    """
    n = X.shape[-2] + (0 if transpose else 1)
    k = torch.arange(1, n, dtype=X.dtype, device=X.device)[:, None]         # (n - 1, 1)
    c = torch.rsqrt(k * (k + 1))
    if transpose:
        return c * (X.cumsum(-2)[..., :-1, :] - k * X[..., 1:, :])
    cY = c * X
    out = torch.zeros(X.shape[:-2] + (n, X.shape[-1]), dtype=X.dtype, device=X.device)
    out[..., :-1, :] = cY.flip(-2).cumsum(-2).flip(-2)                     # sum_{k > i} c_k Y_k
    out[..., 1:, :] -= k * cY
    return out


def _sign_fixed_qr(X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Reduced QR of ``X`` ``(..., n, k)`` with ``R``'s diagonal made non-negative (unique and continuous
    in ``X`` at full rank)."""
    Q, R = torch.linalg.qr(X)
    s = torch.where(torch.diagonal(R, dim1=-2, dim2=-1) < 0, -1.0, 1.0).to(R.dtype)
    return Q * s[..., None, :], R * s[..., :, None]


def _sign_fixed_r(X: torch.Tensor) -> torch.Tensor:
    """``R`` of :func:`_sign_fixed_qr` alone (no ``Q`` formed)."""
    R = torch.linalg.qr(X, mode="r")[1]
    return R * torch.where(torch.diagonal(R, dim1=-2, dim2=-1) < 0, -1.0, 1.0).to(R.dtype)[..., :, None]


def _rotate_text(Mb: torch.Tensor, idx: torch.Tensor, draw, out: torch.Tensor,
                 max_bytes: int = ROTATION_BYTES) -> None:
    """Free rotation of one text's centered contexts ``Mb[:, idx]`` (``Mb`` ``(H, L, dh)``, ``idx`` its ``n`` real
    tokens), computed in float64 and written to ``out[:, idx]`` in ``out``'s dtype; ``draw(shape)`` a standard
    normal float64 tensor on ``Mb``'s device, drawn head after head (the same numbers as one draw of all heads).
    The heads' factorizations run batched over chunks of heads whose float64 temporaries (the contexts, the
    draw and their product, ``3 n d_head`` numbers a head) fit in ``max_bytes`` (at least one head; all heads of
    a text up to a few thousand tokens, one call each)."""
    H, _, dh = Mb.shape
    n = idx.numel()
    m = n - 1
    if m < 1:
        return
    if m <= dh:                                        # token space: O_h = E O0_h E^T, O0_h Haar on R^m
        X = Mb[:, idx].double()
        out[:, idx] = helmert_apply(_sign_fixed_qr(draw((H, m, m)))[0] @ helmert_apply(X, transpose=True)).to(out.dtype)
        return
    step = max(1, int(max_bytes) // (3 * n * dh * 8))
    for h0 in range(0, H, step):
        hs = slice(h0, min(H, h0 + step))
        X = Mb[hs][:, idx].double()
        G = draw((X.shape[0], n, dh))
        G -= G.mean(-2, keepdim=True)
        R = _sign_fixed_r(X)                           # M_h = Q_h R_h: R_h^T R_h = M_h^T M_h
        R_G = _sign_fixed_r(G)                         # G_h = F_h R_G: F_h = G_h R_G^{-1}, a Haar dh-frame
        del X
        out[hs][:, idx] = (G @ torch.linalg.solve_triangular(R_G, R, upper=True)).to(out.dtype)   # F_h R_h


def free_rotation(M: torch.Tensor, valid: torch.Tensor, noise: TextNoise, max_bytes: int = ROTATION_BYTES) -> torch.Tensor:
    """Each head's centered context moved by an independent Haar rotation of the text's token space:
    ``M_h -> O_h M_h``, ``O_h`` Haar-orthogonal on the centered span of the text's real tokens.

    ``M_h^T M_h`` is kept (hence each head's spectrum and its coupling to ``W_O^h``); only the alignment
    of heads in token space, i.e. their dependence, is destroyed. With ``M_h = U_h Sigma_h W_h^T`` the
    result is ``F_h Sigma_h W_h^T``, ``F_h = O_h U_h`` a Haar frame; it is drawn at the cheaper size:
    for ``n_b - 1 <= d_head`` as ``O_h = E O0_h E^T`` (``E`` the Helmert basis of the centered span, applied
    by prefix sums, :func:`helmert_apply`; ``O0_h`` Haar from the QR of a Gaussian ``(n_b-1) x (n_b-1)``),
    otherwise as ``F_h R_h`` with
    ``M_h = Q_h R_h`` (``O_h Q_h`` is a Haar frame, drawn as ``F_h``, the Q factor of a centered
    Gaussian ``G_h`` ``n_b x d_head``, computed as ``G_h (R_G^{-1} R_h)`` from the two R factors alone).
    QR factors have ``R``'s diagonal non-negative, so that the map is continuous in ``M`` and equal
    inputs up to rounding give equal rotations.
    Cost per head and text ``O(n_b min(n_b, d_head)^2)``, draws per text (:class:`TextNoise`), so the result
    depends neither on batching nor on padding. The factorizations run in float64, one text at a time and over
    chunks of its heads, on ``M``'s device (the draws are made on the host and moved there); memory: the output
    ``(B, H, L, d_head)`` in ``M``'s dtype and at most ``max(max_bytes, 3 n_b d_head 8)`` bytes of float64
    temporaries.

    Parameters
    ----------
    M : torch.Tensor, shape (B, H, L, d_head)
        Centered contexts.
    valid : torch.Tensor of bool, shape (B, L)
        Real tokens.
    noise : TextNoise
        The per-text draws (purpose :attr:`Draw.FREE_ROTATION`).
    max_bytes : int
        Budget of one text's float64 temporaries (>= 1; at least one head at a time). The numbers do not
        depend on it.

    Returns
    -------
    torch.Tensor, shape (B, H, L, d_head)

    Examples
    --------
    Each head's ``M_h^T M_h`` (so its spectrum) is kept, the contexts themselves move:

    >>> import numpy as np, torch; g = torch.Generator().manual_seed(0)
    >>> from attnspec.diagnostics.statistics.spectral import center
    >>> M = center(torch.randn(1, 2, 4, 3, generator=g, dtype=torch.float64), torch.ones(1, 4, dtype=torch.bool))
    >>> from attnspec.diagnostics.statistics.noise import Draw, TextNoise
    >>> valid = torch.ones(1, 4, dtype=torch.bool)
    >>> R = free_rotation(M, valid, TextNoise(0, Draw.FREE_ROTATION, 0, [0], valid))
    >>> torch.allclose(R[0, 0].T @ R[0, 0], M[0, 0].T @ M[0, 0]), torch.allclose(R, M)
    (True, False)

    Head by head (the smallest budget), the same numbers:

    >>> one = free_rotation(M, valid, TextNoise(0, Draw.FREE_ROTATION, 0, [0], valid), max_bytes=1)
    >>> torch.equal(one, R)
    True
    """
    if int(max_bytes) < 1:
        raise ValueError(f"max_bytes must be >= 1, got {max_bytes}")
    out = torch.zeros_like(M)
    for b in range(M.shape[0]):
        _rotate_text(M[b], noise.idx[b].to(M.device),
                     lambda shape, b=b: torch.from_numpy(noise.draw(b, shape)).to(M.device), out[b], max_bytes)
    return out
