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

from ...spectra import gram_eigenvalues
from .devices import DEVICE_EIGVALSH_MAX_N, host
from .rotation import free_rotation, helmert_basis  # noqa: F401  (re-exported: spectra and their free sum)

__all__ = ["center", "head_contexts", "value_power", "sqrt_psd", "head_eigs", "layer_output", "layer_eigs",
           "SIDE_BY_SIDE_BYTES",
           "layer_eigs_without_each",
           "layer_eigs_ritz", "ritz_values", "ritz_bytes_per_text", "removed_blocks", "REMOVED_GRAM_BYTES",
           "REMOVAL_SPECTRA", "RITZ_BLOCK", "free_rotation", "helmert_basis"]


def center(X: torch.Tensor, valid: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    """``P X``: each text's rows centered over its real tokens, zero at padding.

    Parameters
    ----------
    X : torch.Tensor, shape (B, ..., L, d)
        Rows are tokens; leading axes after the first (e.g. heads) are kept.
    valid : torch.Tensor of bool, shape (B, L)
        Real tokens of each text.
    inplace : bool
        Overwrite ``X`` (the same numbers, without a second tensor of its size; for a caller that owns ``X``).

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
    mean = (m.transpose(-1, -2) @ X) / m.sum(-2, keepdim=True).clamp_min(1)      # (..., 1, d): one pass, no product kept
    return (X.sub_(mean) if inplace else X - mean).mul_(m)


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
    return host(p), float(valid.sum()) * Wh.shape[-1]


def sqrt_psd(K: torch.Tensor) -> torch.Tensor:
    """Symmetric square root of a batch of PSD matrices (negative eigenvalues from rounding count as 0), computed
    in float64 on the host and returned on ``K``'s device.

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
    w, U = np.linalg.eigh(host(K.double()))
    return torch.from_numpy((U * np.sqrt(np.maximum(w, 0))[..., None, :]) @ np.swapaxes(U, -1, -2)).to(K.device, K.dtype)


def symmetric_eigenvalues(A: np.ndarray | torch.Tensor) -> np.ndarray:
    """Ascending eigenvalues of symmetric ``A`` ``(..., n, n)`` (lower triangle read), in ``A``'s precision:
    ``torch.linalg.eigvalsh``, the LAPACK ``syevd`` that ``numpy.linalg.eigvalsh`` calls, 1.3-1.6x faster
    on the stacks of small matrices of a diagnosis (no copy for a contiguous numpy array). A tensor on another
    device is solved there up to ``n =`` :data:`.devices.DEVICE_EIGVALSH_MAX_N`, on the host above; the
    eigenvalues are returned on the host.

    Examples
    --------
    >>> symmetric_eigenvalues(np.array([[2.0, 1.0], [1.0, 2.0]]))
    array([1., 3.])
    """
    At = A if isinstance(A, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(A))
    if At.device.type != "cpu" and At.shape[-1] > DEVICE_EIGVALSH_MAX_N:
        At = At.cpu()
    return host(torch.linalg.eigvalsh(At))


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
        Value-path power ``c_h`` of each head (0: a dead head, its output and its eigenvalues are 0).
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
    Z = M @ Ksqrt[None].to(M.dtype)                         # float32 unless the model is float64
    ev = gram_eigenvalues(Z, symmetric_eigenvalues)                                # (B, H, L) ascending
    B, H, L = ev.shape
    r = np.minimum(lengths - 1, M.shape[-1])
    dead = np.asarray(scale) <= 0                          # zero output (pruned W_O or V slice): eigenvalues 0
    fac = np.where(dead[None, :], 0.0, lengths[:, None] / (d_out * np.where(dead, 1.0, scale)[None, :]))   # (B, H)
    ev = ev * fac[..., None]
    return [_top(ev[:, h], r) for h in range(H)]


#: Budget (bytes) of the contexts side by side, ``[M_1 ... M_H]``, that :func:`layer_output` copies at once.
SIDE_BY_SIDE_BYTES = 4 * 2 ** 20


def layer_output(M: torch.Tensor, Wh: torch.Tensor, max_bytes: int = SIDE_BY_SIDE_BYTES) -> torch.Tensor:
    """The layer output ``Y = sum_h M_h W_O^h`` ``(B, L, d_out)`` of the contexts ``M`` ``(B, H, L, d_head)`` and the
    heads' output projections ``Wh`` ``(H, d_head, d_out)``: the product of the contexts side by side,
    ``[M_1 ... M_H] [W_O^1; ...; W_O^H]``, in ``M``'s dtype; when the side-by-side copy of the contexts would take
    more than ``max_bytes``, text by text over chunks of tokens whose copy takes at most that (at least one
    token), each written into ``Y`` in place: memory beyond ``Y`` is one chunk, not a second copy of the contexts.

    Examples
    --------
    >>> g = torch.Generator().manual_seed(0)
    >>> M, Wh = torch.randn(2, 3, 4, 5, generator=g), torch.randn(3, 5, 6, generator=g)
    >>> Y = layer_output(M, Wh)
    >>> tuple(Y.shape), bool(torch.allclose(Y, sum(M[:, h] @ Wh[h] for h in range(3)), atol=1e-5))
    ((2, 4, 6), True)
    >>> bool(torch.allclose(layer_output(M, Wh, max_bytes=1), Y, rtol=1e-6, atol=1e-6))   # one token at a time
    True
    """
    B, H, L, dh = M.shape
    W = Wh.reshape(H * dh, Wh.shape[-1]).to(M.dtype)
    if B * L * H * dh * M.element_size() <= max_bytes:
        return M.transpose(1, 2).flatten(2) @ W
    step = max(1, min(L, int(max_bytes) // (H * dh * M.element_size())))     # tokens of one text at once
    Y = torch.empty(B, L, W.shape[-1], dtype=M.dtype, device=M.device)
    for b in range(B):
        for l0 in range(0, L, step):                   # written in place: no product beside Y
            torch.matmul(M[b, :, l0:l0 + step].transpose(0, 1).flatten(1), W, out=Y[b, l0:l0 + step])
    return Y


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
    Yn = Y if Y.dtype == torch.float64 else Y.float()      # float32 unless the model is float64
    ev = gram_eigenvalues(Yn, symmetric_eigenvalues).astype(np.float64) * (lengths[:, None] / (d_out * scale))
    r = np.minimum(lengths - 1, d_out)
    lead = ev.shape[:-2]
    flat = ev.reshape((-1,) + ev.shape[-2:])
    return np.stack([_top(e, r) for e in flat]).reshape(lead + (-1,))


#: Default budget (bytes) of the removed-head Grams built at once by :func:`layer_eigs_without_each` (and of the texts
#: taken at once by :func:`layer_eigs_ritz`).
REMOVED_GRAM_BYTES = 32 * 2 ** 20


def removed_blocks(B: int, H: int, n: int, max_bytes: int = REMOVED_GRAM_BYTES) -> list[tuple[slice, slice]]:
    """(texts, heads) blocks over which :func:`layer_eigs_without_each` builds its ``n x n`` Grams at once.

    One (text, head) pair costs ``u = 64 n^2`` bytes (its Gram and the products behind it in float32, and
    the float64 copy the eigensolver makes: ``8 n^2`` numbers of 8 bytes, an upper bound); a block holds
    ``k = max(1, max_bytes // u)`` pairs: all heads of ``k // H`` texts when ``k >= H``, else ``k`` heads
    of one text. The Grams held at once thus take ``max(max_bytes, u)`` bytes at most.

    Parameters
    ----------
    B, H : int
        Texts and heads (>= 1).
    n : int
        Gram size ``min(L, d_out)`` (>= 1).
    max_bytes : int
        Budget (>= 1).

    Returns
    -------
    list of (slice, slice)
        Text and head slices, covering every (text, head) pair once, in text-major order.

    Examples
    --------
    >>> removed_blocks(3, 4, 16, max_bytes=64 * 16 ** 2 * 8)        # 8 pairs a block: 2 texts of 4 heads
    [(slice(0, 2, None), slice(0, 4, None)), (slice(2, 3, None), slice(0, 4, None))]
    >>> removed_blocks(1, 4, 16, max_bytes=64 * 16 ** 2 * 3)        # 3 pairs: heads 0-2, then head 3
    [(slice(0, 1, None), slice(0, 3, None)), (slice(0, 1, None), slice(3, 4, None))]
    """
    for name, v in (("B", B), ("H", H), ("n", n), ("max_bytes", max_bytes)):
        if int(v) < 1:
            raise ValueError(f"{name} must be >= 1, got {v}")
    k = max(1, int(max_bytes) // (64 * n * n))
    if k >= H:
        t = k // H
        return [(slice(b, min(B, b + t)), slice(0, H)) for b in range(0, B, t)]
    return [(slice(b, b + 1), slice(h, min(H, h + k))) for b in range(B) for h in range(0, H, k)]


def _removed_grams(M: torch.Tensor, W: torch.Tensor, Y: torch.Tensor, K: torch.Tensor, G0: torch.Tensor) -> torch.Tensor:
    """``Y_{-h} Y_{-h}^T`` (``l <= d_out``) or ``Y_{-h}^T Y_{-h}`` (``l > d_out``) of a block: ``M``
    ``(b, c, L, dh)``, ``W`` ``(c, dh, d_out)``, ``Y`` ``(b, L, d_out)`` the full layer output, ``K``
    ``(c, dh, dh)`` the heads' ``W_O^h W_O^{hT}``, ``G0`` ``(b, n, n)`` the full layer's Gram of the same form;
    ``(b, c, n, n)``. The ``d_out x d_out`` form goes through the head's ``d_head``-sized factors
    (``M_h^T Y``, ``M_h^T M_h``), never an ``L x d_out`` product per head: ``O(d_out^2 d_head)`` a head,
    not ``O(L d_out^2)``."""
    if Y.shape[1] <= Y.shape[2]:
        P = torch.einsum("ble,hde->bhld", Y, W) @ M.transpose(-1, -2)             # T_h M_h^T
        G = G0[:, None] - P
        G -= P.transpose(-1, -2)
        G += (M @ K[None]) @ M.transpose(-1, -2)
        return G
    Wt = W.transpose(-1, -2)[None]                                                # W^{hT}: (1, c, d_out, dh)
    P = Wt @ (M.transpose(-1, -2) @ Y[:, None])                                   # W^{hT} M_h^T Y
    G = G0[:, None] - P
    G -= P.transpose(-1, -2)
    G += (Wt @ (M.transpose(-1, -2) @ M)) @ W[None]                               # W^{hT} M_h^T M_h W^h
    return G


def layer_eigs_without_each(M: torch.Tensor, Wh: torch.Tensor, lengths: np.ndarray, scale: float,
                            max_bytes: int = REMOVED_GRAM_BYTES, K: torch.Tensor | None = None,
                            Y: torch.Tensor | None = None) -> np.ndarray:
    """Pooled spectra of the layer output without each head: ``(H, n)``, row ``h`` for
    ``Y_{-h} = sum_{g != h} M_g W_O^g`` (same normalization as :func:`layer_eigs`).

    The Grams come from one expansion instead of ``H`` products: with ``Y = sum_g M_g W_O^g``
    and ``T_h = Y W_O^{hT}``, for ``l <= d_out``
    ``Y_{-h} Y_{-h}^T = Y Y^T - T_h M_h^T - M_h T_h^T + M_h (W_O^h W_O^{hT}) M_h^T`` (``l x l``), and for
    ``l > d_out`` the ``d_out x d_out`` form ``Y^T Y - W^{hT} M_h^T Y - Y^T M_h W^h + W^{hT} M_h^T M_h W^h``,
    the full layer's Gram ``Y Y^T`` (``Y^T Y``) formed once per text.
    They are built and diagonalized in (text, head) blocks (:func:`removed_blocks`): beyond the layer
    output ``Y`` (``B L d_out`` numbers) the memory is ``max(max_bytes, 64 n^2)`` bytes with
    ``n = min(L, d_out)``, whatever ``B`` and ``H``; the blocks do not change the result.
    The Grams are built in ``M``'s dtype (float32 unless the model is float64; cancellation error
    ``eps ||Y||^2``) and diagonalized in float64 (as fast as float32 at these sizes, and without adding the
    solver's own ``eps ||Y||^2`` to a column that compares nearly equal spectra: with a float32 solver the
    MiniLM table moved by 1.4e-5 relative across bucket sizes, with float64 by 6e-6).

    Parameters
    ----------
    M : torch.Tensor, shape (B, H, L, d_head)
        Centered contexts.
    Wh : torch.Tensor, shape (H, d_head, d_out)
        Output projection per head.
    lengths : numpy.ndarray of int, shape (B,)
    scale : float
        Value-path power used for every row.
    max_bytes : int
        Budget of the Grams built at once (>= 1; :data:`REMOVED_GRAM_BYTES`).
    K : torch.Tensor, shape (H, d_head, d_head), optional
        ``W_O^h W_O^{hT}`` in ``M``'s dtype, when the caller has it (the head spectra need it too);
        computed once here otherwise, not once per block.
    Y : torch.Tensor, shape (B, L, d_out), optional
        The layer output ``sum_g M_g W_O^g`` in ``M``'s dtype, when the caller has it; computed here otherwise.

    Returns
    -------
    numpy.ndarray, shape (H, n)

    Examples
    --------
    With two heads, the layer without head 0 is head 1 alone, one head at a time or both at once:

    >>> import numpy as np, torch; g = torch.Generator().manual_seed(0)
    >>> M = center(torch.randn(1, 2, 4, 3, generator=g, dtype=torch.float64), torch.ones(1, 4, dtype=torch.bool))
    >>> Wh = torch.randn(2, 3, 5, generator=g, dtype=torch.float64)    # W_O^h: (H, d_head, d_out)
    >>> out = layer_eigs_without_each(M, Wh, np.array([4]), 1.0)
    >>> alone = layer_eigs(torch.einsum("bld,de->ble", M[:, 1], Wh[1]), np.array([4]), 1.0)
    >>> out.shape, np.allclose(out[0], alone), np.array_equal(out, layer_eigs_without_each(M, Wh, np.array([4]), 1.0, 1))
    ((2, 3), True, True)
    """
    W = Wh.to(M.dtype)
    B, H, L, dh = M.shape
    d_out = W.shape[-1]
    Y = layer_output(M, W) if Y is None else Y.to(M.dtype)
    K = (W @ W.transpose(-1, -2)) if K is None else K.to(M.dtype)
    ev = np.empty((B, H, min(L, d_out)))
    texts, G0 = None, None                  # the full layer's Gram of the block's texts, once per texts
    for bs, hs in removed_blocks(B, H, min(L, d_out), max_bytes):
        if bs != texts:
            texts = bs
            G0 = Y[bs] @ Y[bs].transpose(-1, -2) if L <= d_out else Y[bs].transpose(-1, -2) @ Y[bs]
        ev[bs, hs] = symmetric_eigenvalues(_removed_grams(M[bs, hs], W[hs], Y[bs], K[hs], G0).double())   # ascending
    ev = np.maximum(ev, 0.0) * (lengths[:, None, None] / (d_out * scale))
    r = np.minimum(lengths - 1, d_out)
    return np.stack([_top(ev[:, h], r) for h in range(H)])


#: Values of the ``removal_spectra`` option, the default first: how the layer's spectrum without each head is
#: computed (:func:`layer_eigs_ritz`, :func:`layer_eigs_without_each`).
REMOVAL_SPECTRA = ("ritz", "exact")
#: Consecutive eigenvectors of the layer per Rayleigh-Ritz block of :func:`layer_eigs_ritz` (texts of at most this
#: many tokens, or layers at most this wide, get the exact spectra). Also the largest batched eigensolve on CUDA.
RITZ_BLOCK = 32


def symmetric_eigh(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Ascending eigenvalues ``(..., n)`` and eigenvectors ``(..., n, n)`` (columns) of symmetric ``A``, on ``A``'s
    device and in its precision (solved on the host above :data:`.devices.DEVICE_EIGVALSH_MAX_N` on another device).

    Examples
    --------
    >>> w, Q = symmetric_eigh(torch.tensor([[2.0, 1.0], [1.0, 2.0]], dtype=torch.float64))
    >>> w.tolist(), bool(torch.allclose(Q @ torch.diag(w) @ Q.T, torch.tensor([[2.0, 1.0], [1.0, 2.0]], dtype=torch.float64)))
    ([1.0, 3.0], True)
    """
    if A.device.type != "cpu" and A.shape[-1] > DEVICE_EIGVALSH_MAX_N:
        w, Q = torch.linalg.eigh(A.cpu())
        return w.to(A.device), Q.to(A.device)
    return torch.linalg.eigh(A)


def ritz_values(lam: torch.Tensor, A: torch.Tensor, C: torch.Tensor, AK: torch.Tensor, block: int = RITZ_BLOCK) -> np.ndarray:
    """Rayleigh-Ritz values of ``G' = diag(lam) + E`` on blocks of ``block`` consecutive coordinates, with the
    correction ``E = -A C^T - C A^T + A AK^T`` given by its ``d``-wide factors: the eigenvalues of the
    diagonal blocks of ``G'``, ascending. The blocks end at the last coordinate (the largest ``lam``); the first
    one takes the remainder. ``block = 1``: the diagonal of ``G'``; ``block >= n``: its eigenvalues.

    Parameters
    ----------
    lam : torch.Tensor, shape (B, n)
        Ascending eigenvalues of ``G`` (float64).
    A, C, AK : torch.Tensor, shape (B, H, n, d)
        Factors of one correction per ``H`` (one per head), rows in the order of ``lam``.
    block : int
        Coordinates per block (>= 1).

    Returns
    -------
    numpy.ndarray, shape (B, H, n)
        Float64, clipped at 0, ascending along the last axis.

    Examples
    --------
    One block covering every coordinate gives the eigenvalues of ``G'``:

    >>> g = torch.Generator().manual_seed(0)
    >>> lam = torch.tensor([[1.0, 2.0, 5.0]], dtype=torch.float64)
    >>> A, C = torch.randn(2, 1, 1, 3, 2, generator=g, dtype=torch.float64)
    >>> E = -A[0, 0] @ C[0, 0].T - C[0, 0] @ A[0, 0].T + A[0, 0] @ A[0, 0].T
    >>> exact = torch.linalg.eigvalsh(torch.diag(lam[0]) + E).clamp_min(0)
    >>> bool(np.allclose(ritz_values(lam, A, C, A, block=3)[0, 0], exact.numpy()))
    True
    >>> bool(np.allclose(ritz_values(lam, A, C, A, block=1)[0, 0].sum(), exact.sum().item()))    # the trace
    True
    """
    if int(block) < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    B, H, n, d = A.shape
    r0 = n % block if n > block else 0                                          # the first block: the remainder
    parts = []
    for sl, k in ((slice(0, r0), r0), (slice(r0, n), min(block, n))):
        m = sl.stop - sl.start
        if m == 0:
            continue
        Ab, Cb, AKb = (X[..., sl, :].reshape(B, H, m // k, k, d) for X in (A, C, AK))
        E = (Ab @ (AKb - Cb).transpose(-1, -2) - Cb @ Ab.transpose(-1, -2)).double()
        E = E + torch.diag_embed(lam[:, None, sl].reshape(B, 1, m // k, k))
        parts.append(symmetric_eigenvalues(E).reshape(B, H, m))
    return np.sort(np.maximum(np.concatenate(parts, axis=-1), 0.0), axis=-1)


def ritz_bytes_per_text(H: int, d_head: int, L: int, d_out: int, block: int = RITZ_BLOCK) -> int:
    """Bytes of :func:`layer_eigs_ritz`'s temporaries per text (an upper bound): the Gram, its eigenvectors and
    the eigensolver's copy (``12 n^2``: float32, a float32 model's), the factors ``A``, ``C``, ``A K`` and ``T`` (``16 H d_head n``),
    for ``L <= d_out`` the contexts side by side (``4 H d_head L``), for ``L > d_out`` ``Y^T M_h`` (``4 d_head d_out``)
    and one more factor while they are stacked (``4 H d_head n``), and the float64 Ritz blocks
    (``8 H n min(block, n)``), with ``n = min(L, d_out)``.

    Examples
    --------
    >>> ritz_bytes_per_text(H=32, d_head=128, L=2048, d_out=4096) / 2 ** 20      # one text of an 8 B-wide layer
    224.0
    """
    n = min(L, d_out)
    return (12 * n * n + 16 * H * d_head * n + 8 * H * n * min(block, n)
            + (4 * H * d_head * L if L <= d_out else 4 * d_head * d_out + 4 * H * d_head * n))


def _ritz_text_blocks(B: int, per_text: int, max_bytes: int) -> list[slice]:
    """Consecutive text slices of ``max(1, max_bytes // per_text)`` texts."""
    t = max(1, int(max_bytes) // max(1, int(per_text)))
    return [slice(b, min(B, b + t)) for b in range(0, B, t)]


def layer_eigs_ritz(M: torch.Tensor, Wh: torch.Tensor, lengths: np.ndarray, scale: float,
                    max_bytes: int = REMOVED_GRAM_BYTES, K: torch.Tensor | None = None,
                    Y: torch.Tensor | None = None, block: int = RITZ_BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """Pooled spectrum of the layer output and, from its eigenvectors, the spectrum of the layer without each
    head: ``((n,), (H, n))``, normalized as :func:`layer_eigs`.

    For each text, one eigendecomposition of the smaller Gram of the layer output ``Y`` (``G = Y Y^T`` for
    ``l <= d_out``, else ``Y^T Y``), ``G = Q diag(lambda) Q^T``, gives the layer's eigenvalues and a basis for
    ``G_{-h}``, the Gram of ``Y_{-h} = Y - M_h W_O^h``: its eigenvalues are taken as the Rayleigh-Ritz values of
    ``G_{-h}`` on blocks of ``block`` consecutive eigenvectors of ``G`` (:func:`ritz_values`), i.e. the eigenvalues of
    the block-diagonal part of ``Q^T G_{-h} Q``. They are exact to first order in the head's output (with
    ``block = 1`` they are the Rayleigh quotients ``lambda_i + q_i^T (G_{-h} - G) q_i``, the eigenvalue derivative;
    blocks also resolve the mixing of near-degenerate eigenvalues), exact in their sum (``tr G_{-h}``: the mean
    eigenvalue), majorized by the exact eigenvalues (a pinching: never more spread), and exact when one block
    covers ``n = min(l, d_out)``. ``Q^T (G_{-h} - G) Q = -A C^T - C A^T + A (A K)^T`` comes from ``d_head``-wide
    factors, never ``G_{-h}``: with ``T_h = Y W_O^{hT}``, ``A = Q^T M_h``, ``C = Q^T T_h``, ``K = K_h = W_O^h W_O^{hT}``
    (``l <= d_out``); ``A = (W_O^h Q)^T``, ``C = Q^T Y^T M_h``, ``K = M_h^T M_h`` (``l > d_out``). Cost per text: one
    eigendecomposition of ``n`` and ``O(H d_head (l d_out + n^2))`` products, against ``H`` eigensolves of ``n``
    for :func:`layer_eigs_without_each`.

    The Gram is formed and decomposed in ``M``'s dtype (float32 for a float32 model, as every other spectrum:
    2.6x faster than float64 at ``n = 2,048``, eigenvalues within ``4e-7`` of the largest), the factors run in
    ``M``'s dtype, the blocks in float64. Texts are taken in blocks of at most ``max_bytes`` of temporaries (at least one text).

    Parameters
    ----------
    M : torch.Tensor, shape (B, H, L, d_head)
        Centered contexts.
    Wh : torch.Tensor, shape (H, d_head, d_out)
        Output projection per head.
    lengths : numpy.ndarray of int, shape (B,)
    scale : float
        Value-path power used for every row.
    max_bytes : int
        Budget of the temporaries of one block of texts (>= 1).
    K : torch.Tensor, shape (H, d_head, d_head), optional
        ``W_O^h W_O^{hT}`` when the caller has it.
    Y : torch.Tensor, shape (B, L, d_out), optional
        The layer output ``sum_g M_g W_O^g`` when the caller has it.
    block : int
        Eigenvectors per Rayleigh-Ritz block (:data:`RITZ_BLOCK`; 1: first order).

    Returns
    -------
    layer : numpy.ndarray, shape (n,)
        The top ``min(l_b - 1, d_out)`` eigenvalues of each text, pooled (as :func:`layer_eigs`).
    removed : numpy.ndarray, shape (H, n)
        Row ``h``: the layer without head ``h``, the same count per text.

    Examples
    --------
    Texts of at most :data:`RITZ_BLOCK` tokens: the exact spectra (:func:`layer_eigs`, :func:`layer_eigs_without_each`):

    >>> import numpy as np, torch; g = torch.Generator().manual_seed(0)
    >>> M = center(torch.randn(2, 4, 6, 3, generator=g, dtype=torch.float64), torch.ones(2, 6, dtype=torch.bool))
    >>> Wh = torch.randn(4, 3, 8, generator=g, dtype=torch.float64)
    >>> n = np.array([6, 6])
    >>> layer, removed = layer_eigs_ritz(M, Wh, n, 1.0)
    >>> removed.shape, np.allclose(removed, layer_eigs_without_each(M, Wh, n, 1.0))
    ((4, 10), True)
    >>> bool(np.allclose(layer, layer_eigs(torch.einsum("bhld,hde->ble", M, Wh), n, 1.0)))
    True

    First order (``block=1``), three small heads beside a large one: close to exact, with the exact mean:

    >>> Ws = Wh * torch.tensor([1.0, 0.1, 0.1, 0.1])[:, None, None]
    >>> layer, fo = layer_eigs_ritz(M, Ws, n, 1.0, block=1)
    >>> exact = layer_eigs_without_each(M, Ws, n, 1.0)
    >>> np.allclose(fo.mean(1), exact.mean(1)), bool(np.abs(fo - exact)[1:].max() < 0.01 * layer.max())
    (True, True)

    Texts longer than ``d_out`` take the ``d_out x d_out`` Gram:

    >>> M = center(torch.randn(1, 2, 9, 3, generator=g, dtype=torch.float64), torch.ones(1, 9, dtype=torch.bool))
    >>> Wh = torch.randn(2, 3, 4, generator=g, dtype=torch.float64)
    >>> layer, removed = layer_eigs_ritz(M, Wh, np.array([9]), 1.0)
    >>> removed.shape, np.allclose(removed, layer_eigs_without_each(M, Wh, np.array([9]), 1.0))
    ((2, 4), True)
    """
    W = Wh.to(M.device, M.dtype)
    B, H, L, dh = M.shape
    d_out = W.shape[-1]
    Y = layer_output(M, W) if Y is None else Y.to(M.dtype)
    K = (W @ W.transpose(-1, -2)) if K is None else K.to(M.dtype)
    n = min(L, d_out)
    lam, removed = np.empty((B, n)), np.empty((B, H, n))
    Wcat = W.reshape(H * dh, d_out)                                               # rows: the heads' W_O^h, stacked
    heads = lambda X: X.unflatten(-1, (H, dh)).transpose(1, 2)  # noqa: E731  (b, n, H dh) -> (b, H, n, dh)
    for bs in _ritz_text_blocks(B, ritz_bytes_per_text(H, dh, L, d_out, block), max_bytes):
        Yb, Mb = Y[bs], M[bs]
        G = Yb @ Yb.transpose(-1, -2) if L <= d_out else Yb.transpose(-1, -2) @ Yb
        w, Q = symmetric_eigh(G)
        w, Qt = w.double(), Q.transpose(-1, -2)                                   # (b, n, n), rows q_i^T
        if L <= d_out:                # every head in one product: Q^T [M_1 ... M_H], Q^T Y [W_O^1 ... W_O^H]^T
            A = heads(Qt @ Mb.transpose(1, 2).flatten(2))                         # Q^T M_h: (b, H, n, dh)
            C = heads(Qt @ (Yb @ Wcat.T))                                         # Q^T T_h
            AK = A @ K[None]
        else:
            A = heads(Qt @ Wcat.T)                                                # (W_O^h Q)^T: (b, H, n, dh)
            Yt = Yb.transpose(-1, -2)                     # Q^T Y^T M_h head by head: no copy of the long contexts
            C = torch.stack([Qt @ (Yt @ Mb[:, h]) for h in range(H)], 1)
            AK = A @ (Mb.transpose(-1, -2) @ Mb)
        lam[bs] = host(w)
        removed[bs] = ritz_values(w, A, C, AK, block)
        del A, C, AK, Q, Qt, G
    norm = lengths[:, None] / (d_out * scale)
    r = np.minimum(lengths - 1, d_out)
    layer = _top(np.maximum(lam, 0.0) * norm, r)
    ev = removed * norm[:, None]
    return layer, np.stack([_top(ev[:, h], r) for h in range(H)])
