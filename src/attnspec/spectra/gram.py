"""Eigenvalues of ``Y Y^T`` through the smaller Gram matrix.

For ``Y`` of shape ``(..., l, n)`` the empirical spectral distribution of ``Y Y^T`` (``l x l``) puts
weight ``1/l`` on each of its ``l`` eigenvalues. When ``n < l`` only ``n`` of them can be non-zero:
they are the eigenvalues of ``Y^T Y`` (``n x n``), and the other ``l - n`` are exact zeros. Computing
``eigvalsh`` of the smaller Gram matrix costs ``O(l n min(l, n))`` for the product plus
``O(min(l, n)^3)``, much less than a full SVD of ``Y``.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

__all__ = ["gram_eigenvalues"]


def gram_eigenvalues(Y: np.ndarray, eigvalsh: Callable[[np.ndarray], np.ndarray] = np.linalg.eigvalsh) -> np.ndarray:
    """Eigenvalues of ``Y Y^T``, ascending, padded with zeros to ``l``.

    Parameters
    ----------
    Y : ndarray or torch.Tensor, shape (..., l, n)
        One matrix or a stack of them (leading axes are batch axes, e.g. draws). A tensor's Gram is formed
        by torch on the tensor's device, and handed to ``eigvalsh``.
    eigvalsh : callable, optional
        Ascending eigenvalues, as a numpy array, of a stack of symmetric matrices (default
        :func:`numpy.linalg.eigvalsh`; the diagnosis passes torch's, which takes tensors on any device and is
        faster on stacks of small matrices).

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
    if not hasattr(Y, "swapaxes") or not hasattr(Y, "ndim"):
        Y = np.asarray(Y)
    if Y.ndim < 2:
        raise ValueError(f"Y must have at least 2 dimensions (..., l, n), got shape {tuple(Y.shape)}")
    l, n = Y.shape[-2:]
    Yt = Y.swapaxes(-1, -2)
    if n < l:
        ev = eigvalsh(Yt @ Y)
        pad = np.zeros(tuple(Y.shape[:-2]) + (l - n,), dtype=ev.dtype)
        ev = np.concatenate([pad, ev], axis=-1)
    else:
        ev = eigvalsh(Y @ Yt)
    return np.maximum(ev, 0.0)
