"""Centered output spectra of heads and layers of a trained model (docs/theory.md, section
*Model and normalization*, adapted).

For text ``b`` with ``l_b`` real tokens, head ``h`` has context ``C_h = A_h V_h`` (``l_b x d_head``),
centered over tokens: ``M_h = P C_h`` with ``P = I - 1 1^T / l_b``. Its output is ``M_h W_O^h``.

Normalization (so that a random head's spectrum has first moment ``e^{beta^2} - 1`` as in docs/theory.md):
the *value-path power* ``c_h = sum_b ||P V_h W_O^h||_F^2 / sum_b (l_b d_out)`` (mean squared entry of
the centered value path) and ``Y_h = sqrt(l_b / d_out) M_h W_O^h / sqrt(c_h)``; the layer uses
``Y = sqrt(l_b / d_out) sum_h M_h W_O^h / sqrt(c)`` with ``c = sum_h c_h``. Spectra are the
eigenvalues of ``Y Y^T`` of every text, pooled. The atom at zero (rank ``<= min(l_b - 1, width)``
after centering) is dropped: each text contributes its top ``min(l_b - 1, d_head)`` (head) or
``min(l_b - 1, d_out)`` (layer) eigenvalues, the same count for a spectrum and its reference.
Eigenvalues come from :func:`attnspec.spectra.gram_eigenvalues` on ``M_h K_h^{1/2}`` with
``K_h = W_O^h W_O^{hT}`` (``d_head x d_head`` Gram instead of ``l x l``).
"""
from __future__ import annotations

import numpy as np
import torch

from ..spectra import gram_eigenvalues
from .noise import TextNoise

__all__ = ["center", "head_contexts", "value_power", "sqrt_psd", "head_eigs", "layer_eigs", "layer_eigs_without_each",
           "free_rotation", "helmert_basis"]


def center(X: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Center ``X`` ``(B, ..., L, d)`` over the real tokens of each text; zero at padding. ``valid`` ``(B, L)``."""
    shape = (valid.shape[0],) + (1,) * (X.dim() - 3) + (valid.shape[1], 1)
    m = valid.view(shape).to(X.dtype)
    mean = (X * m).sum(-2, keepdim=True) / m.sum(-2, keepdim=True).clamp_min(1)
    return (X - mean) * m


def head_contexts(A: torch.Tensor, V: torch.Tensor, groups: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Centered per-head contexts ``M_h = P A_h V_{g(h)}``: ``(B, H, L, d_head)``."""
    return center(A @ V[:, groups], valid)


def value_power(V: torch.Tensor, groups: torch.Tensor, W: torch.Tensor, valid: torch.Tensor) -> tuple[np.ndarray, float]:
    """``sum_b ||P V_{g(h)} W_O^h||_F^2`` per head ``(H,)`` and ``sum_b l_b d_out`` for this batch.

    Computed as ``<sum_b (P V_g)^T (P V_g), W_O^h W_O^{hT}>_F`` (``d_head x d_head`` Grams), never forming
    the ``(B, H, L, d_out)`` value path."""
    H = groups.numel()
    dh = V.shape[-1]
    Vc = center(V, valid).double()                          # (B, H_kv, L, dh)
    G = torch.einsum("bgld,blge->gde", Vc, Vc.transpose(1, 2))  # (H_kv, dh, dh) summed over texts and tokens
    Wh = W.double().view(H, dh, -1)
    K = Wh @ Wh.transpose(-1, -2)                           # (H, dh, dh)
    p = (G[groups] * K).sum(dim=(1, 2))
    return p.numpy(), float(valid.sum()) * Wh.shape[-1]


def sqrt_psd(K: torch.Tensor) -> torch.Tensor:
    """Symmetric square root of a batch of PSD matrices."""
    w, U = np.linalg.eigh(K.double().numpy())
    return torch.from_numpy((U * np.sqrt(np.maximum(w, 0))[..., None, :]) @ np.swapaxes(U, -1, -2)).to(K.dtype)


def _top(ev: np.ndarray, r: np.ndarray) -> np.ndarray:
    """From ascending eigenvalues ``(B, n)`` keep the top ``r_b`` of each row, pooled."""
    n = ev.shape[-1]
    keep = np.arange(n)[None, :] >= (n - r)[:, None]
    return ev[keep]


def head_eigs(M: torch.Tensor, Ksqrt: torch.Tensor, lengths: np.ndarray, scale: np.ndarray, d_out: int) -> list[np.ndarray]:
    """Pooled spectra of ``Y_h`` per head (list of ``H`` arrays). ``M`` ``(B, H, L, dh)``."""
    Z = (M @ Ksqrt[None].to(M.dtype)).numpy()               # float32 unless the model is float64
    ev = gram_eigenvalues(Z)                                # (B, H, L) ascending
    B, H, L = ev.shape
    r = np.minimum(lengths - 1, M.shape[-1])
    fac = lengths[:, None] / (d_out * scale[None, :])       # (B, H)
    ev = ev * fac[..., None]
    return [_top(ev[:, h], r) for h in range(H)]


def layer_eigs(Y: torch.Tensor, lengths: np.ndarray, scale: float) -> np.ndarray:
    """Pooled spectrum of a layer output ``Y`` ``(..., B, L, d_out)`` (uncentered rows already centered).

    Returns ``(..., n)`` pooled over texts (leading axes kept)."""
    d_out = Y.shape[-1]
    Yn = Y.numpy() if Y.dtype == torch.float64 else Y.float().numpy()   # float32 unless the model is float64
    ev = gram_eigenvalues(Yn).astype(np.float64) * (lengths[:, None] / (d_out * scale))
    r = np.minimum(lengths - 1, d_out)
    lead = ev.shape[:-2]
    flat = ev.reshape((-1,) + ev.shape[-2:])
    return np.stack([_top(e, r) for e in flat]).reshape(lead + (-1,))


def layer_eigs_without_each(M: torch.Tensor, Wh: torch.Tensor, lengths: np.ndarray, scale: float) -> np.ndarray:
    """Pooled spectra of the layer output without each head: ``(H, n)``, row ``h`` for
    ``Y_{-h} = sum_{g != h} M_g W_O^g`` (same normalization as :func:`layer_eigs`).

    All ``H`` Grams come from one expansion instead of ``H`` products: with ``Y = sum_g M_g W_O^g``
    and ``T_h = Y W_O^{hT}``, for ``l <= d_out``
    ``Y_{-h} Y_{-h}^T = Y Y^T - T_h M_h^T - M_h T_h^T + M_h (W_O^h W_O^{hT}) M_h^T`` (``l x l``), and for
    ``l > d_out`` the ``d_out x d_out`` form ``Y^T Y - W^{hT} M_h^T Y - Y^T M_h W^h + W^{hT} M_h^T M_h W^h``.
    Computed in ``M``'s dtype (float32 unless the model is float64): the cancellation error is
    ``eps ||Y||^2``, the same order as the eigensolver's on ``Y_{-h}``. ``M`` ``(B, H, L, dh)``, ``Wh``
    ``(H, dh, d_out)``.
    """
    W = Wh.to(M.dtype)
    B, H, L, dh = M.shape
    d_out = W.shape[-1]
    Y = torch.einsum("bhld,hde->ble", M, W)
    if L <= d_out:
        MK = M @ (W @ W.transpose(-1, -2))[None]                 # M_h W^h W^hT: (B, H, L, dh)
        P = torch.einsum("ble,hde->bhld", Y, W) @ M.transpose(-1, -2)
        G = (Y @ Y.transpose(-1, -2))[:, None] - P - P.transpose(-1, -2) + MK @ M.transpose(-1, -2)
    else:                                                        # one head at a time: O(B L d_out) memory
        YY = Y.transpose(-1, -2) @ Y
        G = torch.empty(B, H, d_out, d_out, dtype=Y.dtype)
        for h in range(H):
            U = M[:, h] @ W[h]
            P = U.transpose(-1, -2) @ Y
            G[:, h] = YY - P - P.transpose(-1, -2) + U.transpose(-1, -2) @ U
    ev = np.linalg.eigvalsh(G.numpy())                           # ascending; the top r_b are kept
    ev = np.maximum(ev, 0.0) * (lengths[:, None, None] / (d_out * scale))
    r = np.minimum(lengths - 1, d_out)
    return np.stack([_top(ev[:, h], r) for h in range(H)])


def helmert_basis(n: int) -> np.ndarray:
    """Orthonormal basis ``(n, n - 1)`` of the sum-zero vectors of ``R^n`` (Helmert): column ``k``
    is ``(1, ..., 1, -k, 0, ..., 0) / sqrt(k (k + 1))`` with ``k`` ones."""
    i, k = np.arange(n)[:, None], np.arange(1, n)[None, :]
    return np.where(i < k, 1.0, np.where(i == k, -k, 0.0)) / np.sqrt(k * (k + 1.0))


def _sign_fixed_qr(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Reduced QR of ``X`` ``(..., n, k)`` with ``R``'s diagonal made non-negative (unique and continuous
    in ``X`` at full rank)."""
    Q, R = torch.linalg.qr(torch.from_numpy(np.ascontiguousarray(X)))
    s = torch.where(torch.diagonal(R, dim1=-2, dim2=-1) < 0, -1.0, 1.0).to(R.dtype)
    return (Q * s[..., None, :]).numpy(), (R * s[..., :, None]).numpy()


def _rotate_text(Mb: np.ndarray, draw) -> np.ndarray:
    """Free rotation of one text's centered contexts ``Mb`` ``(H, n, dh)`` (real tokens only)."""
    H, n, dh = Mb.shape
    m = n - 1
    if m < 1:
        return np.zeros_like(Mb)
    if m <= dh:                                        # token space: O_h = E O0_h E^T, O0_h Haar on R^m
        E = helmert_basis(n)
        return E @ (_sign_fixed_qr(draw((H, m, m)))[0] @ (E.T @ Mb))
    R = _sign_fixed_qr(Mb)[1]                          # M_h = Q_h R_h: R_h^T R_h = M_h^T M_h
    G = draw((H, n, dh))
    F = _sign_fixed_qr(G - G.mean(-2, keepdims=True))[0]   # Haar dh-frame in the centered span
    return F @ R


def free_rotation(M: torch.Tensor, valid: torch.Tensor, noise: TextNoise) -> torch.Tensor:
    """Each head's centered context moved by an independent Haar rotation of the text's token space:
    ``M_h -> O_h M_h``, ``O_h`` Haar-orthogonal on the centered span of the text's real tokens.

    ``M_h^T M_h`` is kept (hence each head's spectrum and its coupling to ``W_O^h``); only the alignment
    of heads in token space, i.e. their dependence, is destroyed. With ``M_h = U_h Sigma_h W_h^T`` the
    result is ``F_h Sigma_h W_h^T``, ``F_h = O_h U_h`` a Haar frame; it is drawn at the cheaper size:
    for ``n_b - 1 <= d_head`` as ``O_h = E O0_h E^T`` (``E`` the Helmert basis of the centered span,
    ``O0_h`` Haar from the QR of a Gaussian ``(n_b-1) x (n_b-1)``), otherwise as ``F_h R_h`` with
    ``M_h = Q_h R_h`` (``O_h Q_h`` is a Haar frame, drawn as ``F_h``, the Q factor of a centered
    Gaussian ``n_b x d_head``). QR factors have ``R``'s diagonal non-negative, so that the map is
    continuous in ``M`` and equal inputs up to rounding give equal rotations.
    Cost per head and text ``O(min(n_b, d_head)^3)``, draws per text (:class:`TextNoise`), so the result
    depends neither on batching nor on padding. Shape ``(B, H, L, dh)``.
    """
    B, H, L, dh = M.shape
    Mn = M.double().numpy()
    out = np.zeros_like(Mn)
    for b in range(B):
        idx = noise.idx[b].numpy()
        out[b][:, idx] = _rotate_text(Mn[b][:, idx], lambda shape, b=b: noise.draw(b, shape))
    return torch.from_numpy(out).to(M.dtype)
