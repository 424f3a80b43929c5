"""Empirical spectra and distances between spectra (and between a spectrum and a law).

* :mod:`.gram` — :func:`gram_eigenvalues`: the eigenvalues of ``Y Y^T`` through the smaller Gram matrix;
* :mod:`.compare` — moments, the fraction of zero eigenvalues, quantiles, the bulk/outlier split, W1 and
  KS distances between samples or from a sample to a law's CDF, :func:`summarize`.
"""
from .compare import (ks_distance, ks_to_cdf, log_moments, moments, pooled, quantiles, split_outliers, summarize,
                      wasserstein1, wasserstein1_to_cdf, zero_fraction)
from .gram import gram_eigenvalues

__all__ = ["gram_eigenvalues", "zero_fraction", "ks_distance", "ks_to_cdf", "log_moments", "moments", "pooled",
           "quantiles", "split_outliers", "summarize", "wasserstein1", "wasserstein1_to_cdf"]
