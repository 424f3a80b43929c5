"""Validation of an observed spectrum before identification.

An input to :func:`attnspec.identify.identify` must be possible eigenvalues of a Gram matrix
``Y Y^T``: finite, non-negative up to round-off (``min >= -tol * max|x|``), not all zero, and enough
of them to fit a law (``MIN_EIGENVALUES``).
"""
from __future__ import annotations

import numpy as np

__all__ = ["SpectrumError", "check_spectrum", "MIN_EIGENVALUES", "NEGATIVE_TOLERANCE"]

#: Fewest eigenvalues a fit accepts.
MIN_EIGENVALUES = 10
#: Eigenvalues down to ``-NEGATIVE_TOLERANCE * max|x|`` count as round-off of zero.
NEGATIVE_TOLERANCE = 1e-6


class SpectrumError(ValueError):
    """The eigenvalues cannot be the spectrum of a Gram matrix (or are too few to fit)."""


def check_spectrum(eigs, min_size: int = MIN_EIGENVALUES, tol: float = NEGATIVE_TOLERANCE) -> np.ndarray:
    """``eigs`` as a flat float array, or :class:`SpectrumError` saying why it is not a Gram spectrum."""
    try:
        x = np.asarray(eigs, dtype=float).ravel()
    except (TypeError, ValueError) as e:
        raise SpectrumError(f"eigenvalues must be numbers ({e})") from None
    if x.size == 0:
        raise SpectrumError("no eigenvalues (empty spectrum)")
    bad = ~np.isfinite(x)
    if bad.any():
        kinds = sorted({"nan" if np.isnan(v) else ("inf" if v > 0 else "-inf") for v in x[bad]})
        raise SpectrumError(f"{int(bad.sum())} of {x.size} eigenvalues are not finite ({', '.join(kinds)}); "
                            "eigenvalues must be finite numbers")
    if x.size < min_size:
        raise SpectrumError(f"{x.size} eigenvalues: need at least {min_size} to fit a law")
    scale = float(np.abs(x).max())
    if scale == 0.0:
        raise SpectrumError(f"all {x.size} eigenvalues are zero: no spectrum to fit")
    lo = float(x.min())
    if lo < -tol * scale:
        n_neg = int((x < -tol * scale).sum())
        raise SpectrumError(f"{n_neg} of {x.size} eigenvalues are negative (min {lo:.4g}, max {float(x.max()):.4g}); "
                            f"eigenvalues of a Gram matrix Y Y^T are >= 0 (round-off down to -{tol:g} x max|x| allowed)")
    return x
