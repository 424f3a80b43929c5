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


def test_every_replicate_of_every_block_is_the_w1_of_its_resample(monkeypatch):
    """Blocks of a few replicates (the budget shrunk to force several): each replicate equals the plain W1 of the
    sample its weights repeat, for the same texts and counts (one scale) and for different ones (two)."""
    import attnspec.diagnostics.statistics.bootstrap as bs
    monkeypatch.setattr(bs, "W1_BLOCK_BYTES", 3 * 8 * 200)             # 3 replicates a block at n + m = 200
    rng = np.random.default_rng(1)
    ix = np.repeat(np.arange(10), 10)
    iy = np.repeat(np.arange(10), rng.integers(5, 16, 10))
    for y_texts in (ix, iy[:100]):
        x, y = rng.gamma(2.0, size=ix.size), rng.gamma(2.2, size=y_texts.size)
        w = weights(3, range(10), 20)
        got = bs.weighted_w1(x, ix, y, y_texts, w)
        for b in range(20):
            keep = w[b].astype(int)
            ref = wasserstein1(np.repeat(x, keep[ix]), np.repeat(y, keep[y_texts]))
            np.testing.assert_allclose(got[b], ref, rtol=1e-12)
