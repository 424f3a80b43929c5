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
    """``P X``: each text's rows centered over its real tokens, zero at padding.

    Parameters
    ----------
    X : torch.Tensor, shape (B, ..., L, d)
        Rows are tokens; leading axes after the first (e.g. heads) are kept.
    valid : torch.Tensor of bool, shape (B, L)
        Real tokens of each text.

    Returns
    -------
    torch.Tensor, shape of ``X``
        ``X`` minus its mean over the real tokens of the text, and 0 at padding.

    Examples
    --------
    >>> import torch
    >>> X = torch.tensor([[[1.0], [2.0], [6.0]]])                    # (B=1, L=3, d=1)
    >>> center(X, torch.tensor([[True, True, False]])).flatten().tolist()  # mean of 1 and 2; padding 0
    [-0.5, 0.5, 0.0]
    """
    shape = (valid.shape[0],) + (1,) * (X.dim() - 3) + (valid.shape[1], 1)
    m = valid.view(shape).to(X.dtype)
    mean = (X * m).sum(-2, keepdim=True) / m.sum(-2, keepdim=True).clamp_min(1)
    return (X - mean) * m


def head_contexts(A: torch.Tensor, V: torch.Tensor, groups: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Centered per-head contexts ``M_h = P A_h V_{g(h)}``.

    Parameters
    ----------
    A : torch.Tensor, shape (B, H, L, L)
        Attention weights.
    V : torch.Tensor, shape (B, H_kv, L, d_head)
        Values of the key-value heads.
    groups : torch.Tensor of int, shape (H,)
        Key-value head ``g(h)`` of each query head.
    valid : torch.Tensor of bool, shape (B, L)
        Real tokens.

    Returns
    -------
    torch.Tensor, shape (B, H, L, d_head)

    Examples
    --------
    Uniform attention gives every token the same context, which centering removes:

    >>> import torch
    >>> A = torch.full((1, 2, 3, 3), 1 / 3)
    >>> V = torch.tensor([[[[1.0, 0.0], [0.0, 2.0], [2.0, 1.0]]]])     # one key-value head for 2 heads
    >>> M = head_contexts(A, V, torch.tensor([0, 0]), torch.ones(1, 3, dtype=torch.bool))
    >>> tuple(M.shape), float(M.abs().max())
    ((1, 2, 3, 2), 0.0)
    """
    return center(A @ V[:, groups], valid)


def value_power(V: torch.Tensor, groups: torch.Tensor, W: torch.Tensor, valid: torch.Tensor) -> tuple[np.ndarray, float]:
    """``sum_b ||P V_{g(h)} W_O^h||_F^2`` per head ``(H,)`` and ``sum_b l_b d_out`` for this batch.

    Computed as ``<sum_b (P V_g)^T (P V_g), W_O^h W_O^{hT}>_F`` (``d_head x d_head`` Grams), never forming
    the ``(B, H, L, d_out)`` value path.

    Parameters
    ----------
    V : torch.Tensor, shape (B, H_kv, L, d_head)
    groups : torch.Tensor of int, shape (H,)
        Key-value head of each query head.
    W : torch.Tensor, shape (H * d_head, d_out)
        The output projection, head ``h`` in rows ``h d_head`` to ``(h + 1) d_head``.
    valid : torch.Tensor of bool, shape (B, L)

    Returns
    -------
    power : numpy.ndarray, shape (H,)
        ``sum_b ||P V_{g(h)} W_O^h||_F^2``.
    count : float
        ``sum_b l_b d_out``; the value-path power of the module docstring is ``power / count`` summed over
        batches.

    Examples
    --------
    With ``W_O = I`` the power is the squared norm of the centered values:

    >>> import torch
    >>> V = torch.tensor([[[[1.0, 0.0], [0.0, 2.0], [2.0, 1.0]]]])
    >>> valid = torch.ones(1, 3, dtype=torch.bool)
    >>> value_power(V, torch.tensor([0]), torch.eye(2), valid), float((center(V, valid) ** 2).sum())
    ((array([4.]), 6.0), 4.0)
    """
    H = groups.numel()
    dh = V.shape[-1]
    Vc = center(V, valid).double()                          # (B, H_kv, L, dh)
    G = torch.einsum("bgld,blge->gde", Vc, Vc.transpose(1, 2))  # (H_kv, dh, dh) summed over texts and tokens
    Wh = W.double().view(H, dh, -1)
    K = Wh @ Wh.transpose(-1, -2)                           # (H, dh, dh)
    p = (G[groups] * K).sum(dim=(1, 2))
    return p.numpy(), float(valid.sum()) * Wh.shape[-1]


def sqrt_psd(K: torch.Tensor) -> torch.Tensor:
    """Symmetric square root of a batch of PSD matrices (negative eigenvalues from rounding count as 0).

    Parameters
    ----------
    K : torch.Tensor, shape (..., n, n)
        Symmetric positive semi-definite matrices.

    Returns
    -------
    torch.Tensor, shape of ``K``, dtype of ``K``
        ``S`` symmetric PSD with ``S S = K``.

    Examples
    --------
    >>> import torch
    >>> sqrt_psd(torch.tensor([[4.0, 0.0], [0.0, 9.0]]))
    tensor([[2., 0.],
            [0., 3.]])
    """
    w, U = np.linalg.eigh(K.double().numpy())
    return torch.from_numpy((U * np.sqrt(np.maximum(w, 0))[..., None, :]) @ np.swapaxes(U, -1, -2)).to(K.dtype)


def _top(ev: np.ndarray, r: np.ndarray) -> np.ndarray:
    """From ascending eigenvalues ``(B, n)`` keep the top ``r_b`` of each row, pooled."""
    n = ev.shape[-1]
    keep = np.arange(n)[None, :] >= (n - r)[:, None]
    return ev[keep]


def head_eigs(M: torch.Tensor, Ksqrt: torch.Tensor, lengths: np.ndarray, scale: np.ndarray, d_out: int) -> list[np.ndarray]:
    """Pooled spectra of the normalized head outputs ``Y_h`` (module docstring), one array per head.

    Parameters
    ----------
    M : torch.Tensor, shape (B, H, L, d_head)
        Centered contexts (:func:`head_contexts`).
    Ksqrt : torch.Tensor, shape (H, d_head, d_head)
        ``(W_O^h W_O^{hT})^{1/2}`` (:func:`sqrt_psd`).
    lengths : numpy.ndarray of int, shape (B,)
        Real tokens ``l_b`` of each text.
    scale : numpy.ndarray, shape (H,)
        Value-path power ``c_h`` of each head.
    d_out : int
        Output width.

    Returns
    -------
    list of numpy.ndarray
        Per head, the top ``min(l_b - 1, d_head)`` eigenvalues of ``Y_h Y_h^T`` of each text, pooled.

    Examples
    --------
    The eigenvalues are those of ``(l / d_out) M_h W_O^h (M_h W_O^h)^T / c_h``:

    >>> import numpy as np, torch; g = torch.Generator().manual_seed(0)
    >>> M = center(torch.randn(1, 2, 4, 3, generator=g, dtype=torch.float64), torch.ones(1, 4, dtype=torch.bool))
    >>> Wh = torch.randn(2, 3, 5, generator=g, dtype=torch.float64)    # W_O^h: (H, d_head, d_out)
    >>> ev = head_eigs(M, sqrt_psd(Wh @ Wh.transpose(-1, -2)), np.array([4]), np.ones(2), d_out=5)
    >>> Z = (M[0, 0] @ Wh[0]).numpy()
    >>> [e.shape for e in ev], np.allclose(ev[0], np.linalg.eigvalsh(Z @ Z.T)[-3:] * 4 / 5)
    ([(3,), (3,)], True)
    """
    Z = (M @ Ksqrt[None].to(M.dtype)).numpy()               # float32 unless the model is float64
    ev = gram_eigenvalues(Z)                                # (B, H, L) ascending
    B, H, L = ev.shape
    r = np.minimum(lengths - 1, M.shape[-1])
    fac = lengths[:, None] / (d_out * scale[None, :])       # (B, H)
    ev = ev * fac[..., None]
    return [_top(ev[:, h], r) for h in range(H)]


def layer_eigs(Y: torch.Tensor, lengths: np.ndarray, scale: float) -> np.ndarray:
    """Pooled spectrum of a layer output ``Y`` (rows already centered), normalized as in the module docstring.

    Parameters
    ----------
    Y : torch.Tensor, shape (..., B, L, d_out)
        Centered outputs ``sum_h M_h W_O^h`` of each text (leading axes: several outputs at once).
    lengths : numpy.ndarray of int, shape (B,)
        Real tokens ``l_b``.
    scale : float
        The layer's value-path power ``c``.

    Returns
    -------
    numpy.ndarray, shape (..., n)
        The top ``min(l_b - 1, d_out)`` eigenvalues of ``(l_b / (d_out c)) Y_b Y_b^T`` of each text, pooled
        (leading axes kept).

    Examples
    --------
    >>> import numpy as np, torch; g = torch.Generator().manual_seed(0)
    >>> M = center(torch.randn(1, 2, 4, 3, generator=g, dtype=torch.float64), torch.ones(1, 4, dtype=torch.bool))
    >>> Wh = torch.randn(2, 3, 5, generator=g, dtype=torch.float64)    # W_O^h: (H, d_head, d_out)
    >>> Y = torch.einsum("bhld,hde->ble", M, Wh)
    >>> ev = layer_eigs(Y, np.array([4]), 1.0)
    >>> ev.shape, np.allclose(ev, np.linalg.eigvalsh((Y[0] @ Y[0].T).numpy())[1:] * 4 / 5)
    ((3,), True)
    """
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
    ``eps ||Y||^2``, the same order as the eigensolver's on ``Y_{-h}``.

    Parameters
    ----------
    M : torch.Tensor, shape (B, H, L, d_head)
        Centered contexts.
    Wh : torch.Tensor, shape (H, d_head, d_out)
        Output projection per head.
    lengths : numpy.ndarray of int, shape (B,)
    scale : float
        Value-path power used for every row.

    Returns
    -------
    numpy.ndarray, shape (H, n)

    Examples
    --------
    With two heads, the layer without head 0 is head 1 alone:

    >>> import numpy as np, torch; g = torch.Generator().manual_seed(0)
    >>> M = center(torch.randn(1, 2, 4, 3, generator=g, dtype=torch.float64), torch.ones(1, 4, dtype=torch.bool))
    >>> Wh = torch.randn(2, 3, 5, generator=g, dtype=torch.float64)    # W_O^h: (H, d_head, d_out)
    >>> out = layer_eigs_without_each(M, Wh, np.array([4]), 1.0)
    >>> alone = layer_eigs(torch.einsum("bld,de->ble", M[:, 1], Wh[1]), np.array([4]), 1.0)
    >>> out.shape, np.allclose(out[0], alone)
    ((2, 3), True)
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
    depends neither on batching nor on padding.

    Parameters
    ----------
    M : torch.Tensor, shape (B, H, L, d_head)
        Centered contexts.
    valid : torch.Tensor of bool, shape (B, L)
        Real tokens.
    noise : TextNoise
        The per-text draws (purpose :attr:`Draw.FREE_ROTATION`).

    Returns
    -------
    torch.Tensor, shape (B, H, L, d_head)

    Examples
    --------
    Each head's ``M_h^T M_h`` (so its spectrum) is kept, the contexts themselves move:

    >>> import numpy as np, torch; g = torch.Generator().manual_seed(0)
    >>> M = center(torch.randn(1, 2, 4, 3, generator=g, dtype=torch.float64), torch.ones(1, 4, dtype=torch.bool))
    >>> Wh = torch.randn(2, 3, 5, generator=g, dtype=torch.float64)    # W_O^h: (H, d_head, d_out)
    >>> from attnspec.diagnostics.noise import Draw, TextNoise
    >>> valid = torch.ones(1, 4, dtype=torch.bool)
    >>> R = free_rotation(M, valid, TextNoise(0, Draw.FREE_ROTATION, 0, [0], valid))
    >>> torch.allclose(R[0, 0].T @ R[0, 0], M[0, 0].T @ M[0, 0]), torch.allclose(R, M)
    (True, False)
    """
    B, H, L, dh = M.shape
    Mn = M.double().numpy()
    out = np.zeros_like(Mn)
    for b in range(B):
        idx = noise.idx[b].numpy()
        out[b][:, idx] = _rotate_text(Mn[b][:, idx], lambda shape, b=b: noise.draw(b, shape))
    return torch.from_numpy(out).to(M.dtype)
