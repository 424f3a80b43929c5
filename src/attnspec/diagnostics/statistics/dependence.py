"""Inter-head dependence.

**Pairwise** (heads ``g, h`` of one layer), from the centered contexts ``M_h`` of all texts stacked
over tokens (``N x d_head``):

* ``cka``: linear CKA (Kornblith et al. 2019), ``||M_g^T M_h||_F^2 / (||M_g^T M_g||_F ||M_h^T M_h||_F)``
  in [0, 1]: 1 when the two heads' token representations agree up to rotation and scale;
* ``cka_null``: its expectation after :func:`~attnspec.diagnostics.statistics.spectral.free_rotation` (each
  head's context rotated by an independent Haar rotation of the text's centered token space): the value
  independent heads give at this size, in closed form (:func:`free_null_sums`, :func:`cka_free_null`);
  ``cka_excess = cka - cka_null``;
* ``output_corr``: ``<Y_g, Y_h>_F / (||Y_g|| ||Y_h||)`` of the heads' centered outputs in the
  residual stream (``Y_h = M_h W_O^h``): positive = the heads reinforce each other, negative = cancel;
* ``shared_kv``: whether the two query heads share a key/value head (GQA).

**Per layer**: the *free-sum defect* ``W1(spec Y, spec Y_free) / m1(spec Y_free)`` (and KS) between
the layer's actual output spectrum and that of ``Y_free = sum_h F_h Sigma_h W_h^T W_O^h``, the
empirical free sum of the heads (same per-head spectra, token-space alignment destroyed by Haar
rotation: an empirical free convolution that needs no theory solver); and the *interference*
``||Y||^2 / sum_h ||Y_h||^2 - 1`` (share of output energy in cross terms; 0 for orthogonal heads).
"""
from __future__ import annotations

import numpy as np
import torch

from .devices import host

__all__ = ["gram_blocks", "pair_blocks", "block_row", "block_inner", "cka_matrix", "free_null_sums", "cka_free_null", "output_inner",
           "pair_table_arrays"]


def pair_blocks(H: int) -> tuple[np.ndarray, np.ndarray]:
    """The head pairs ``(g, h)``, ``g <= h``, in the order of the blocks of :func:`gram_blocks` (row-major upper
    triangle with the diagonal: ``H (H + 1) / 2`` pairs; the blocks of row ``g`` are consecutive).

    Examples
    --------
    >>> pair_blocks(3)
    (array([0, 0, 0, 1, 1, 2]), array([0, 1, 2, 1, 2, 2]))
    """
    return np.triu_indices(H)


def block_row(H: int, g: int) -> slice:
    """Where the blocks ``(g, h >= g)`` of head ``g`` lie in the blocks of :func:`gram_blocks` (consecutive).

    Examples
    --------
    >>> block_row(3, 0), block_row(3, 1), block_row(3, 2)
    (slice(0, 3, None), slice(3, 5, None), slice(5, 6, None))
    """
    start = g * H - g * (g - 1) // 2
    return slice(start, start + H - g)


def gram_blocks(M: torch.Tensor) -> np.ndarray:
    """The head-pair Gram blocks of the heads' contexts, summed over the batch.

    ``C_gh = sum_b M_bg^T M_bh`` (``dh x dh``) for the pairs ``g <= h`` of :func:`pair_blocks`: the upper half of
    the stacked Gram ``sum_b Mcat_b^T Mcat_b`` (``Mcat_b = [M_b1 .. M_bH]``, ``L x H*dh``), whose lower blocks are
    their transposes (``C_hg = C_gh^T``): ``(H + 1) / (2 H)`` of its memory and of its products. Computed in
    ``M``'s dtype per batch and returned in float64, so that the blocks of successive batches can be added.

    Parameters
    ----------
    M : torch.Tensor
        Contexts ``(B, H, L, dh)`` (centered over tokens by the caller).

    Returns
    -------
    numpy.ndarray
        ``(H (H + 1) / 2, dh, dh)`` float64; the diagonal blocks ``C_gg`` are symmetric positive semi-definite.

    Examples
    --------
    >>> import torch
    >>> M = torch.arange(12.).reshape(1, 2, 3, 2)      # one text, 2 heads, 3 tokens, dh = 2
    >>> C = gram_blocks(M)                             # blocks (0, 0), (0, 1), (1, 1)
    >>> C.shape, bool((C[0] == C[0].T).all())
    ((3, 2, 2), True)
    >>> float(C[0, 0, 0]) == float((M[0, 0, :, 0] ** 2).sum())   # ||column 0 of head 0||^2
    True
    >>> bool((C[1] == (M[0, 0].T @ M[0, 1]).numpy()).all())
    True
    """
    B, H, L, dh = M.shape
    X = M.transpose(1, 2).reshape(B * L, H * dh)
    C = torch.empty(H * (H + 1) // 2, dh, dh, dtype=X.dtype, device=X.device)
    for g in range(H):                      # row g: the blocks (g, h >= g), one product
        blk = X[:, g * dh:(g + 1) * dh].T @ X[:, g * dh:]                  # (dh, (H - g) dh)
        C[block_row(H, g)] = blk.view(dh, H - g, dh).transpose(0, 1)
    return host(C.double())                                 # in M's dtype per batch, summed in float64 on the host


def block_inner(C: np.ndarray, D: np.ndarray | None = None) -> np.ndarray:
    """``<C_gh, D_gh>_F`` of every pair of heads ``(H, H)`` (symmetric), from the Gram blocks ``C`` of
    :func:`gram_blocks` and ``D`` (the same layout; default ``C``: ``||C_gh||_F^2``).

    Examples
    --------
    >>> import torch
    >>> M = torch.randn(2, 3, 5, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    >>> F = block_inner(gram_blocks(M))
    >>> Mcat = M.transpose(1, 2).reshape(10, 6)
    >>> full = (Mcat.T @ Mcat).reshape(3, 2, 3, 2).numpy()
    >>> bool(np.allclose(F, np.einsum("gahb,gahb->gh", full, full)))
    True
    """
    n = C.shape[0]
    H = int(round((np.sqrt(8 * n + 1) - 1) / 2))
    g, h = pair_blocks(H)
    v = np.einsum("pab,pab->p", C, C if D is None else D)
    out = np.empty((H, H))
    out[g, h] = v
    out[h, g] = v
    return out


def cka_matrix(C: np.ndarray, H: int) -> np.ndarray:
    """Linear CKA between all pairs of heads from their stacked Gram matrix.

    ``cka[g, h] = ||C_gh||_F^2 / (||C_gg||_F ||C_hh||_F)`` with ``C_gh = M_g^T M_h`` the ``(dh, dh)``
    blocks of ``C`` (Kornblith et al. 2019): in [0, 1], 1 on the diagonal and for heads whose token
    representations agree up to rotation and scale. NaN for a head whose contexts are all zero.

    Parameters
    ----------
    C : numpy.ndarray
        ``(H (H + 1) / 2, dh, dh)`` Gram blocks of :func:`gram_blocks`.
    H : int
        Number of heads.

    Returns
    -------
    numpy.ndarray
        ``(H, H)`` symmetric; 0 in the rows and columns of a head whose contexts are all zero (a dead head).

    Examples
    --------
    Head 1 is head 0 rotated by 90 degrees (same representation), head 2 is unrelated:

    >>> import numpy as np, torch
    >>> rng = np.random.default_rng(0)
    >>> m0 = rng.standard_normal((50, 2))
    >>> m2 = rng.standard_normal((50, 2))
    >>> M = torch.tensor(np.stack([m0, m0 @ [[0., -1.], [1., 0.]], m2]))[None]
    >>> np.round(cka_matrix(gram_blocks(M), 3), 2)
    array([[1.  , 1.  , 0.0...],
           [1.  , 1.  , 0.0...],
           [0.0..., 0.0..., 1.  ]])
    """
    fro2 = block_inner(C)
    return _over_norms(fro2, np.sqrt(np.diag(fro2)))


def _over_norms(num: np.ndarray, d: np.ndarray) -> np.ndarray:
    """``num[g, h] / (d_g d_h)`` ``(H, H)`` with ``d_g = ||C_gg||_F``; 0 in the rows and columns of a head whose
    contexts are all zero (it shares nothing)."""
    dd = np.outer(d, d)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(dd > 0, np.asarray(num, dtype=np.float64) / np.where(dd > 0, dd, 1.0), 0.0)


def free_null_sums(M: torch.Tensor, valid: torch.Tensor) -> np.ndarray:
    """The expected squared head-pair Gram blocks under independent Haar rotations, summed over the batch.

    With ``O_bg, O_bh`` independent Haar rotations of text ``b``'s centered token space (dimension
    ``n_b - 1``), ``O_bg^T O_bh`` is Haar too and ``E ||A^T O B||_F^2 = ||A||_F^2 ||B||_F^2 / (n_b - 1)`` for
    ``A, B`` in that space; the cross terms of different texts have mean 0. Hence, for ``g != h``,
    ``E ||sum_b (O_bg M_bg)^T (O_bh M_bh)||_F^2 = sum_b ||M_bg||_F^2 ||M_bh||_F^2 / (n_b - 1)``: the numerator of the
    rotated heads' CKA (:func:`cka_free_null`) without drawing a rotation or forming their ``(H d_head)^2``
    Gram. Texts of one real token (no centered space) add nothing.

    Parameters
    ----------
    M : torch.Tensor, shape (B, H, L, d_head)
        Centered contexts (0 at padding), on any device.
    valid : torch.Tensor of bool, shape (B, L)
        Real tokens.

    Returns
    -------
    numpy.ndarray, shape (H, H)
        ``sum_b s_b s_b^T / (n_b - 1)`` with ``s_bh = ||M_bh||_F^2``, float64 (the diagonal is not a CKA
        numerator: :func:`cka_free_null` sets it to 1).

    Examples
    --------
    The closed form against the mean over drawn rotations (:func:`..statistics.spectral.free_rotation`):

    >>> import numpy as np, torch
    >>> from attnspec.diagnostics.statistics.noise import Draw, TextNoise
    >>> from attnspec.diagnostics.statistics.spectral import center, free_rotation
    >>> valid = torch.ones(3, 6, dtype=torch.bool)
    >>> M = center(torch.randn(3, 2, 6, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64), valid)
    >>> draws = [gram_blocks(free_rotation(M, valid, TextNoise(s, Draw.FREE_ROTATION, 0, [0, 1, 2], valid)))
    ...          for s in range(2000)]
    >>> mc = np.mean([(C[1] ** 2).sum() for C in draws])            # block (0, 1)
    >>> round(float(free_null_sums(M, valid)[0, 1] / mc), 2)
    1.0
    """
    s = (M.double() ** 2).sum(dim=(2, 3))                               # (B, H)
    m = (valid.sum(1) - 1).to(s.dtype)                                  # n_b - 1
    s = s * torch.where(m > 0, 1.0 / m.clamp_min(1), 0.0)[:, None].sqrt()
    return host(s.T @ s)


def cka_free_null(C: np.ndarray, null: np.ndarray, H: int) -> np.ndarray:
    """The CKA of heads in generic position: its expectation under independent Haar rotations of every head.

    The rotations keep each head's own Gram block (``C_gg``), so the CKA's denominators do not move and its
    expectation is exactly its numerator's expectation (:func:`free_null_sums`) over them:
    ``cka_null[g, h] = null[g, h] / (||C_gg||_F ||C_hh||_F)`` for ``g != h``, 1 on the diagonal, 0 in the rows
    and columns of a head whose contexts are all zero (as :func:`cka_matrix`). A single drawn rotation, the
    null before, scatters around it (on MiniLM, 8 texts of 32 tokens: by 25 % relative standard deviation).

    Parameters
    ----------
    C : numpy.ndarray
        ``(H (H + 1) / 2, dh, dh)`` Gram blocks of :func:`gram_blocks`.
    null : numpy.ndarray
        ``(H, H)`` sums of :func:`free_null_sums` over the same texts.
    H : int
        Number of heads.

    Returns
    -------
    numpy.ndarray
        ``(H, H)`` symmetric.

    Examples
    --------
    Two heads of 4 independent Gaussian columns on 200 texts of 30 tokens: their CKA is about its null, of
    order ``d_head / (n - 1)``:

    >>> import numpy as np, torch
    >>> from attnspec.diagnostics.statistics.spectral import center
    >>> valid = torch.ones(200, 30, dtype=torch.bool)
    >>> M = center(torch.randn(200, 2, 30, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64), valid)
    >>> C = gram_blocks(M)
    >>> null = cka_free_null(C, free_null_sums(M, valid), 2)
    >>> round(float(null[0, 1]), 3), round(float(cka_matrix(C, 2)[0, 1]), 3), float(null[0, 0])
    (0.001, 0.001, 1.0)
    """
    d = np.sqrt(np.diag(block_inner(C)))                                 # ||C_gg||_F
    out = _over_norms(null, d)
    np.fill_diagonal(out, np.where(d > 0, 1.0, 0.0))
    return out


def output_inner(C: np.ndarray, W: np.ndarray, H: int) -> np.ndarray:
    """Inner products of the heads' outputs in the residual stream, from the stacked Gram matrix.

    ``inner[g, h] = <M_g W_O^g, M_h W_O^h>_F = sum_{a,b} C_gh[a, b] (W_O^g W_O^h^T)[a, b]``, summed
    over the texts that ``C`` sums over; ``W_O^h`` is rows ``h*dh .. (h+1)*dh`` of ``W``. The products
    ``W_O^g W_O^h^T`` (``(H dh)^2 d_out / 2`` multiplications, the cost) run in ``W``'s precision (float32 for a
    float32 model: relative error about ``1e-7 sqrt(d_out)``), the sums with ``C`` in float64.

    Parameters
    ----------
    C : numpy.ndarray
        ``(H (H + 1) / 2, dh, dh)`` Gram blocks of :func:`gram_blocks`.
    W : numpy.ndarray
        Output projection ``(H*dh, d_out)``, the heads' rows stacked (float32 or float64).
    H : int
        Number of heads.

    Returns
    -------
    numpy.ndarray
        ``(H, H)`` float64, symmetric; the diagonal is ``||Y_h||_F^2``.

    Examples
    --------
    >>> import numpy as np, torch
    >>> rng = np.random.default_rng(0)
    >>> M, W = rng.standard_normal((1, 2, 5, 3)), rng.standard_normal((6, 4))
    >>> inner = output_inner(gram_blocks(torch.tensor(M)), W, 2)
    >>> Y0, Y1 = M[0, 0] @ W[:3], M[0, 1] @ W[3:]
    >>> bool(np.allclose(inner, [[(Y0 * Y0).sum(), (Y0 * Y1).sum()], [(Y1 * Y0).sum(), (Y1 * Y1).sum()]]))
    True
    """
    dh = C.shape[-1]
    out = np.empty((H, H))
    for g in range(H):                # row g: W_O^g [W_O^g ... W_O^H]^T, the upper blocks of W W^T only
        K = (W[g * dh:(g + 1) * dh] @ W[g * dh:].T).reshape(dh, H - g, dh)
        out[g, g:] = out[g:, g] = np.einsum("pab,apb->p", C[block_row(H, g)], K.astype(np.float64))
    return out


def pair_table_arrays(cka: np.ndarray, cka_null: np.ndarray, inner: np.ndarray, groups: np.ndarray):
    """Columns of the table of head pairs of one layer, one entry per pair ``g < h``.

    ``output_corr = inner[g, h] / sqrt(inner[g, g] inner[h, h])`` (cosine of the two heads' outputs);
    ``shared_kv`` is true when the two query heads read the same key/value head (GQA).

    Parameters
    ----------
    cka, cka_null : numpy.ndarray
        ``(H, H)`` CKA of the heads and of the same heads in generic position.
    inner : numpy.ndarray
        ``(H, H)`` output inner products of :func:`output_inner`.
    groups : numpy.ndarray
        ``(H,)`` key/value head of each query head.

    Returns
    -------
    tuple of numpy.ndarray
        ``(g, h, cka, cka_null, output_corr, shared_kv)``, each of length ``H (H - 1) / 2``, pairs in
        row-major order of the upper triangle.

    Examples
    --------
    >>> import numpy as np
    >>> cka = np.array([[1., .5, .2], [.5, 1., .1], [.2, .1, 1.]])
    >>> inner = np.array([[4., -2., 0.], [-2., 1., 0.], [0., 0., 9.]])
    >>> g, h, c, c0, corr, shared = pair_table_arrays(cka, 0 * cka, inner, np.array([0, 0, 1]))
    >>> g, h, c
    (array([0, 0, 1]), array([1, 2, 2]), array([0.5, 0.2, 0.1]))
    >>> corr, shared
    (array([-1.,  0.,  0.]), array([ True, False, False]))
    """
    H = cka.shape[0]
    g, h = np.triu_indices(H, 1)
    d = np.sqrt(np.diag(inner))
    with np.errstate(invalid="ignore", divide="ignore"):
        corr = inner / np.outer(d, d)
    return g, h, cka[g, h], cka_null[g, h], corr[g, h], groups[g] == groups[h]
