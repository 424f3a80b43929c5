"""Eigenvalues of ``Y Y^T`` through the smaller Gram matrix.

For ``Y`` of shape ``(..., l, n)`` the empirical spectral distribution of ``Y Y^T`` (``l x l``) puts
weight ``1/l`` on each of its ``l`` eigenvalues. When ``n < l`` only ``n`` of them can be non-zero:
they are the eigenvalues of ``Y^T Y`` (``n x n``), and the other ``l - n`` are exact zeros. Computing
``eigvalsh`` of the smaller Gram matrix costs ``O(l n min(l, n))`` for the product plus
``O(min(l, n)^3)``, much less than a full SVD of ``Y``. The symmetric eigensolver is torch's (:func:`symmetric_eigenvalues`):
on the small stacked problems of a diagnosis it is 1.3-1.6x faster than numpy's OpenBLAS one, with the
same LAPACK algorithm and the same precision.
"""
from __future__ import annotations

import numpy as np
import torch

__all__ = ["gram_eigenvalues", "symmetric_eigenvalues"]


def symmetric_eigenvalues(A: np.ndarray | torch.Tensor) -> np.ndarray:
    """Ascending eigenvalues of symmetric ``A`` ``(..., n, n)`` (lower triangle read), in ``A``'s precision.

    ``torch.linalg.eigvalsh`` on the same memory (no copy for a contiguous numpy array): the LAPACK
    ``syevd`` that ``numpy.linalg.eigvalsh`` calls, faster on stacks of small matrices.

    Examples
    --------
    >>> symmetric_eigenvalues(np.array([[2.0, 1.0], [1.0, 2.0]]))
    array([1., 3.])
    """
    At = A if isinstance(A, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(A))
    return torch.linalg.eigvalsh(At).numpy()


def gram_eigenvalues(Y: np.ndarray) -> np.ndarray:
    """Eigenvalues of ``Y Y^T``, ascending, padded with zeros to ``l``.

    Parameters
    ----------
    Y : ndarray, shape (..., l, n)
        One matrix or a stack of them (leading axes are batch axes, e.g. draws).

    Returns
    -------
    ndarray, shape (..., l)
        Ascending eigenvalues of ``Y Y^T``, clipped at 0 (round-off can make exact zeros slightly
        negative).

    Examples
    --------
    >>> Y = np.array([[1.0], [1.0]])                      # l = 2, n = 1: Y Y^T has eigenvalues 0 and 2
    >>> gram_eigenvalues(Y)
    array([0., 2.])
    """
    Y = np.asarray(Y)
    if Y.ndim < 2:
        raise ValueError(f"Y must have at least 2 dimensions (..., l, n), got shape {Y.shape}")
    l, n = Y.shape[-2:]
    Yt = np.swapaxes(Y, -1, -2)
    if n < l:
        ev = symmetric_eigenvalues(Yt @ Y)
        pad = np.zeros(Y.shape[:-2] + (l - n,), dtype=ev.dtype)
        ev = np.concatenate([pad, ev], axis=-1)
    else:
        ev = symmetric_eigenvalues(Y @ Yt)
    return np.maximum(ev, 0.0)
