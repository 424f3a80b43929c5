"""Empirical spectra and distances between spectra (and between a spectrum and a law)."""
from .compare import (atom_at_zero, ks_distance, ks_to_cdf, log_moments, moments, pooled, quantiles,
                      split_outliers, summarize, wasserstein1, wasserstein1_to_cdf)
from .gram import gram_eigenvalues

__all__ = ["gram_eigenvalues", "atom_at_zero", "ks_distance", "ks_to_cdf", "log_moments", "moments", "pooled",
           "quantiles", "split_outliers", "summarize", "wasserstein1", "wasserstein1_to_cdf"]
