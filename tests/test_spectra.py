"""Spectral comparison functions against scipy/numpy references and known distributions."""
import warnings

import numpy as np
import pytest
from scipy import stats

from attnspec.spectra import (zero_fraction, gram_eigenvalues, ks_distance, ks_to_cdf, log_moments, moments,
                              quantiles, split_outliers, wasserstein1, wasserstein1_to_cdf)


@pytest.mark.parametrize("shape", [(40, 25), (25, 40), (30, 30), (3, 20, 7)])
def test_gram_eigenvalues_match_svd(shape):
    Y = np.random.default_rng(0).standard_normal(shape)
    ev = gram_eigenvalues(Y)
    l = shape[-2]
    sv = np.linalg.svd(Y, compute_uv=False) ** 2
    ref = np.sort(np.concatenate([sv, np.zeros(shape[:-2] + (l - sv.shape[-1],))], axis=-1), axis=-1)
    assert ev.shape == shape[:-2] + (l,)
    np.testing.assert_allclose(ev, ref, atol=1e-10)
    assert np.all(ev >= 0)


def test_w1_and_ks_match_scipy():
    rng = np.random.default_rng(1)
    a, b = rng.exponential(size=700), rng.gamma(2.0, size=450)
    assert wasserstein1(a, b) == pytest.approx(stats.wasserstein_distance(a, b), rel=1e-12)
    assert ks_distance(a, b) == pytest.approx(stats.ks_2samp(a, b).statistic, rel=1e-12)
    assert wasserstein1(a, a) == 0.0 and ks_distance(a, a) == 0.0


def test_distances_to_a_cdf():
    rng = np.random.default_rng(2)
    x = rng.uniform(0, 2, size=5000)
    cdf = lambda t: np.clip(np.asarray(t) / 2, 0, 1)  # noqa: E731
    assert ks_to_cdf(x, cdf) == pytest.approx(stats.kstest(x, stats.uniform(0, 2).cdf).statistic, rel=1e-12)
    # W1 of an empirical sample to its own law is O(n^-1/2); a shifted law is off by the shift
    assert wasserstein1_to_cdf(x, cdf, upper=2.0) < 0.03
    shifted = lambda t: np.clip((np.asarray(t) - 0.5) / 2, 0, 1)  # noqa: E731
    assert wasserstein1_to_cdf(x, shifted, upper=2.5) == pytest.approx(0.5, abs=0.03)
    # a law with an atom at zero: half the mass at 0, half uniform on [0, 1]
    y = np.concatenate([np.zeros(2000), np.linspace(0, 1, 2000)])
    atom_cdf = lambda t: np.where(np.asarray(t) < 0, 0.0, 0.5 + 0.5 * np.clip(t, 0, 1))  # noqa: E731
    assert ks_to_cdf(y, atom_cdf) < 2e-3 and wasserstein1_to_cdf(y, atom_cdf, upper=1.0) < 1e-3


def test_moments_atom_quantiles():
    x = np.array([0.0, 0.0, 1.0, 2.0, 3.0])
    np.testing.assert_allclose(moments(x), [6 / 5, 14 / 5, 36 / 5, 98 / 5])
    assert zero_fraction(x) == pytest.approx(0.4)
    np.testing.assert_allclose(quantiles(x, [0, 0.5, 1]), [0, 1, 3])
    bulk, out = split_outliers(np.array([5.0, 1.0, 2.0, 2.03, 2.05]), edge=2.0, rel_tol=0.02)
    np.testing.assert_array_equal(bulk, [1.0, 2.0, 2.03])
    np.testing.assert_array_equal(out, [2.05, 5.0])
    with pytest.raises(ValueError, match="q"):
        quantiles(x, [1.5])


def test_moments_of_huge_eigenvalues_do_not_overflow_or_warn():
    x = np.array([1e170, 3e173, 5e173])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(all="raise"):
            m = moments(x)
            lm = log_moments(x)
    assert np.isfinite(m[0]) and np.all(np.isinf(m[1:]))
    assert lm[1] == pytest.approx(np.log(np.mean(x.astype(np.longdouble) ** 2)), rel=1e-12)
