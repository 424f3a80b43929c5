"""weighted_w1: the integer-weight path (Poisson replicates, exact integer sums) and the general path agree."""
import numpy as np

from attnspec.diagnostics.statistics.bootstrap import weighted_w1, weights
from attnspec.spectra import wasserstein1


def test_integer_and_fractional_weights_give_the_same_distances():
    rng = np.random.default_rng(0)
    ix = np.repeat(np.arange(12), rng.integers(1, 9, 12))
    x, y = rng.gamma(2.0, size=ix.size), rng.gamma(2.2, size=ix.size)
    w = weights(0, range(12), 50)
    integer = weighted_w1(x, ix, y, ix, w)
    fractional = weighted_w1(x, ix, y, ix, 0.5 * w)             # each replicate's law is unchanged by a common factor
    np.testing.assert_allclose(integer, fractional, rtol=1e-12)
    np.testing.assert_allclose(weighted_w1(x, ix, y, ix, np.ones((1, 12)))[0], wasserstein1(x, y), rtol=1e-12)
    replicate = np.repeat(x, w[3, ix].astype(int)), np.repeat(y, w[3, ix].astype(int))
    np.testing.assert_allclose(integer[3], wasserstein1(*replicate), rtol=1e-12)
