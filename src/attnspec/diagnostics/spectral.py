"""Centered output spectra of heads and layers of a trained model (THEORY.md section 1, adapted).

For text ``b`` with ``l_b`` real tokens, head ``h`` has context ``C_h = A_h V_h`` (``l_b x d_head``),
centered over tokens: ``M_h = P C_h`` with ``P = I - 1 1^T / l_b``. Its output is ``M_h W_O^h``.

Normalization (so that a random head's spectrum has first moment ``e^{beta^2} - 1`` as in THEORY.md):
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

__all__ = ["center", "head_contexts", "value_power", "sqrt_psd", "head_eigs", "layer_eigs", "free_rotation"]


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
    Z = (M @ Ksqrt[None]).double().numpy()
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


def _frames(G: np.ndarray, tol: float = 1e-8) -> np.ndarray:
    """Orthonormal frames ``G (G^T G)^{-1/2}`` (polar factor), columns ordered by decreasing Gram
    eigenvalue, null directions set to 0. ``G`` ``(..., L, k)``."""
    lam, U = np.linalg.eigh(np.swapaxes(G, -1, -2) @ G)
    lam, U = lam[..., ::-1], U[..., ::-1]
    inv = np.where(lam > tol * lam[..., :1], 1.0 / np.sqrt(np.maximum(lam, 1e-300)), 0.0)
    return (G @ U) * inv[..., None, :]


def free_rotation(M: torch.Tensor, valid: torch.Tensor, noise: TextNoise) -> torch.Tensor:
    """Each head's centered context put in generic position: ``F_h Sigma_h W_h^T``.

    ``M_h = U_h Sigma_h W_h^T``; ``F_h`` is a Haar-random orthonormal frame (polar factor of a
    Gaussian matrix) in the centered span of the text's real tokens, independent across heads and
    texts (the signs of ``W_h``'s columns are fixed, largest entry positive, so that equal inputs up to
    rounding give equal rotations). Each head keeps its own Gram matrix ``M_h^T M_h`` (hence its spectrum and its coupling to
    ``W_O^h``); only the alignment of heads in token space, i.e. their dependence, is destroyed.
    Shape ``(B, H, L, dh)``.
    """
    B, H, L, dh = M.shape
    Mn = M.double().numpy()
    lam, W = np.linalg.eigh(np.swapaxes(Mn, -1, -2) @ Mn)
    lam, W = lam[..., ::-1], W[..., ::-1]                   # descending
    big = np.take_along_axis(W, np.abs(W).argmax(-2)[..., None, :], axis=-2)
    W = W * np.where(big < 0, -1.0, 1.0)                      # eigenvector signs fixed: a continuous map of M
    k = np.clip(valid.sum(1).numpy() - 1, 0, dh)            # (B,)
    keep = (np.arange(dh)[None, :] < k[:, None])            # (B, dh)
    sig = np.sqrt(np.maximum(lam, 0)) * keep[:, None, :]
    G = center(noise.full((H,), (dh,), dtype=torch.float64), valid).numpy()
    F = _frames(G)
    out = (F * sig[..., None, :]) @ np.swapaxes(W, -1, -2)
    return torch.from_numpy(np.ascontiguousarray(out)).to(M.dtype)
