"""Inter-head dependence.

**Pairwise** (heads ``g, h`` of one layer), from the centered contexts ``M_h`` of all texts stacked
over tokens (``N x d_head``):

* ``cka``: linear CKA (Kornblith et al. 2019), ``||M_g^T M_h||_F^2 / (||M_g^T M_g||_F ||M_h^T M_h||_F)``
  in [0, 1]: 1 when the two heads' token representations agree up to rotation and scale;
* ``cka_null``: the same after :func:`~attnspec.diagnostics.spectral.free_rotation` (heads put in
  generic position, independently per text): the value independent heads give at this size;
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

__all__ = ["gram_blocks", "cka_matrix", "output_inner", "pair_table_arrays"]


def gram_blocks(M: torch.Tensor) -> np.ndarray:
    """``sum_b Mcat_b^T Mcat_b`` with ``Mcat = [M_1 .. M_H]``: ``(H*dh, H*dh)`` float64 (accumulate)."""
    B, H, L, dh = M.shape
    X = M.transpose(1, 2).reshape(B * L, H * dh)
    return (X.T @ X).double().numpy()                       # in M's dtype per batch, summed in float64


def cka_matrix(C: np.ndarray, H: int) -> np.ndarray:
    """Linear CKA between all head pairs from the stacked Gram ``C`` ``(H*dh, H*dh)``: ``(H, H)``."""
    dh = C.shape[0] // H
    blocks = C.reshape(H, dh, H, dh)
    fro2 = np.einsum("gahb,gahb->gh", blocks, blocks)
    d = np.sqrt(np.diag(fro2))
    with np.errstate(invalid="ignore", divide="ignore"):
        return fro2 / np.outer(d, d)


def output_inner(C: np.ndarray, W: np.ndarray, H: int) -> np.ndarray:
    """``<M_g W_O^g, M_h W_O^h>_F`` summed over texts: ``(H, H)``; ``W`` ``(H*dh, d_out)``."""
    dh = C.shape[0] // H
    KK = W @ W.T
    return np.einsum("gahb,gahb->gh", C.reshape(H, dh, H, dh), KK.reshape(H, dh, H, dh))


def pair_table_arrays(cka: np.ndarray, cka_null: np.ndarray, inner: np.ndarray, groups: np.ndarray):
    """Upper-triangle pairs: ``(g, h, cka, cka_null, output_corr, shared_kv)`` arrays."""
    H = cka.shape[0]
    g, h = np.triu_indices(H, 1)
    d = np.sqrt(np.diag(inner))
    with np.errstate(invalid="ignore", divide="ignore"):
        corr = inner / np.outer(d, d)
    return g, h, cka[g, h], cka_null[g, h], corr[g, h], groups[g] == groups[h]
