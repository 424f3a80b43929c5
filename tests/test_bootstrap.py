"""The Poisson bootstrap over texts: weights keyed by the text, weighted W1, agreement with a plain
nonparametric bootstrap, mergeable replicate sums, labels as tests."""
import math

import numpy as np
import pytest

from attnspec.diagnostics.statistics import selection as sel
from attnspec.diagnostics.statistics.bootstrap import interval, weighted, weighted_w1, weights
from attnspec.diagnostics.pipeline.head_removal import RatioSums
from attnspec.spectra import wasserstein1


def test_weights_depend_only_on_the_text_and_seed():
    w = weights(3, [7, 2, 11], 50)
    assert w.shape == (50, 3)
    np.testing.assert_array_equal(w[:, 1], weights(3, [2], 50)[:, 0])       # any batch, any position
    np.testing.assert_array_equal(w[:, [2, 0]], weights(3, [11, 7], 50))
    assert not np.array_equal(w, weights(4, [7, 2, 11], 50))
    big = weights(0, range(400), 200)
    assert abs(big.mean() - 1) < 0.01 and abs(big.var() - 1) < 0.02            # Poisson(1)
    with pytest.raises(ValueError, match="n_boot"):
        weights(0, [1], -1)


def test_weighted_w1_equals_w1_with_unit_weights_and_duplicates_with_integer_weights():
    rng = np.random.default_rng(0)
    x, y = rng.gamma(2.0, size=37), rng.gamma(2.5, size=23)
    ix, iy = rng.integers(0, 5, 37), rng.integers(0, 5, 23)           # the text of each value
    w1 = weighted_w1(x, ix, y, iy, np.ones((1, 5)))[0]
    assert w1 == pytest.approx(wasserstein1(x, y), rel=1e-12)
    k = rng.integers(0, 3, (4, 5)).astype(float)
    k[:, 0] = 1                                                        # no replicate without texts
    w2 = weighted_w1(x, ix, y, iy, k)
    for b in range(4):
        ref = wasserstein1(np.repeat(x, k[b, ix].astype(int)), np.repeat(y, k[b, iy].astype(int))) \
            if k[b, ix].sum() and k[b, iy].sum() else np.nan
        np.testing.assert_allclose(w2[b], ref, rtol=1e-12)
    same = weighted_w1(x[:23], ix[:23], y, ix[:23], k)                 # same texts and counts: one scale
    for b in range(4):
        kk = k[b, ix[:23]].astype(int)
        if kk.sum():
            assert same[b] == pytest.approx(wasserstein1(np.repeat(x[:23], kk), np.repeat(y, kk)), rel=1e-12)


def _texts(rng, m=60):
    n = rng.integers(5, 60, m).astype(float)                   # scored positions per text
    e = n * (0.3 + 0.2 * rng.standard_normal(m)) + rng.standard_normal(m) * np.sqrt(n)
    return e, n


def test_poisson_bootstrap_matches_a_nonparametric_bootstrap():
    """Ratio estimate sum e / sum n over 60 texts: the Poisson-bootstrap interval (RatioSums, 200 replicates)
    is as wide as a multinomial resampling bootstrap's (4000 resamples) and as the delta-method SE says,
    within the sampling error of 200 replicates (widths agree to 25 %, the interval ends to 0.3 SE)."""
    rng = np.random.default_rng(1)
    e, n = _texts(rng)
    acc = RatioSums().update(e[None, None, :], n, weights(5, range(60), 200))
    lo, hi = (v[0, 0] for v in acc.interval())
    idx = rng.integers(0, 60, (4000, 60))
    reps = e[idx].sum(1) / n[idx].sum(1)
    lo_np, hi_np = np.quantile(reps, [0.025, 0.975])
    se = acc.se()[0, 0]
    assert (hi - lo) / (hi_np - lo_np) == pytest.approx(1.0, abs=0.25)
    assert (hi - lo) / (2 * 1.96 * se) == pytest.approx(1.0, abs=0.25)
    assert abs(lo - lo_np) < 0.3 * se and abs(hi - hi_np) < 0.3 * se


def test_replicate_sums_merge_by_addition():
    rng = np.random.default_rng(2)
    e, n = _texts(rng, 30)
    w = weights(0, range(30), 64)
    one = RatioSums().update(e[None, None], n, w)
    two = RatioSums().update(e[None, None, :12], n[:12], w[:, :12]).merge(
        RatioSums().update(e[None, None, 12:], n[12:], w[:, 12:]))
    for a, b in zip(one.interval(), two.interval()):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    np.testing.assert_allclose(weighted(w, e), w @ e)


def test_interval_needs_replicates():
    lo, hi = interval(np.zeros((0, 3)))
    assert np.isnan(lo).all() and np.isnan(hi).all()
    lo, hi = interval(np.arange(200.0)[:, None])
    assert lo[0] == pytest.approx(4.975) and hi[0] == pytest.approx(194.025)


@pytest.mark.parametrize("lo, hi, scale, expected", [
    (1.0, 2.0, 1.0, "selective"), (0.1, 0.6, 1.0, "diffuse"), (0.1, 0.6, 2.0, "sparse"),
    (0.5, 0.9, 1.0, "undetermined")])
def test_labels_are_tests_against_the_interval(lo, hi, scale, expected):
    t = math.log(2)
    assert sel.label((lo + hi) / 2, scale, t, lo=lo, hi=hi) == expected
    assert sel.label((lo + hi) / 2, scale, t, n_tokens=10, lo=lo, hi=hi) == "undetermined"


def test_linearized_cka_replicates_match_exact_weighted_cka():
    """The CKA bootstrap re-weights each text's first-order influence (cka_influence) instead of re-forming
    the Gram sum per replicate. On 40 synthetic texts (3 heads, heads 0 and 1 sharing a component) its
    replicates track the exact weighted CKA of the dependent pair (correlation > 0.9, spread within 20 %);
    for the independent pairs (CKA near 0) its intervals are as wide as the exact bootstrap's (within 25 %)
    but centred on the estimate, where the exact replicates of a squared norm drift upwards."""
    import torch

    from attnspec.diagnostics.statistics import dependence as dep
    from attnspec.diagnostics.result.intervals import cka_excess_replicates
    from attnspec.diagnostics.pipeline.spectra import LayerSpectra, cka_influence
    rng = np.random.default_rng(3)
    T, H, L, dh = 40, 3, 12, 4
    M = rng.standard_normal((T, H, L, dh))
    M[:, 1] += 0.8 * M[:, 0]
    M = torch.from_numpy(M - M.mean(2, keepdims=True))
    grams = np.stack([dep.gram_blocks(M[t:t + 1]) for t in range(T)])
    C = grams.sum(0)
    w = weights(0, range(T), 300)
    sp = LayerSpectra(H, gram=C, boot_cka=weighted(w, cka_influence(M, C)))
    lin = cka_excess_replicates(sp, np.zeros((H, H)))    # a null of 0: the replicates of the CKA itself
    exact = np.stack([dep.cka_matrix(np.tensordot(wb, grams, 1), H) for wb in w])
    assert np.isfinite(lin).all()
    assert np.corrcoef(lin[:, 0, 1], exact[:, 0, 1])[0, 1] > 0.9
    assert lin[:, 0, 1].std() / exact[:, 0, 1].std() == pytest.approx(1.0, abs=0.2)
    point = dep.cka_matrix(C, H)
    for g, h in ((0, 2), (1, 2)):
        (lo, hi), (elo, ehi) = np.quantile(lin[:, g, h], [0.025, 0.975]), np.quantile(exact[:, g, h], [0.025, 0.975])
        assert (hi - lo) / (ehi - elo) == pytest.approx(1.0, abs=0.25)
        assert lo < point[g, h] < hi


def test_cka_null_in_closed_form_is_the_mean_over_rotations():
    """The null CKA of a real layer (MiniLM layer 0, 8 texts) in closed form against 300 drawn free rotations of
    the same contexts: for every pair the drawn mean is within 4.5 standard errors of it (no bias), the
    standardized differences average about 0, and the drawn values scatter on both sides of it."""
    import torch

    from attnspec.diagnostics.pipeline.collect import collect
    from attnspec.diagnostics.statistics import dependence as dep
    from attnspec.diagnostics.statistics.noise import Draw, TextNoise
    from attnspec.diagnostics.statistics.spectral import center, free_rotation
    from attnspec.models import adapt, load_model, make_batches
    from attnspec.data import builtin_texts
    model, tok = load_model("minilm")
    ad = adapt(model)
    lb = collect(ad, make_batches(tok, builtin_texts(8), max_length=32, bucket_size=8)[0])[0]
    M = center(torch.stack([lb.weights_of(slice(None))[:, h] @ lb.grouped_values()[:, h]
                            for h in range(lb.site.n_heads)], 1).double(), lb.valid)
    C = dep.gram_blocks(M)
    closed = dep.cka_free_null(C, dep.free_null_sums(M, lb.valid), lb.site.n_heads)
    drawn = np.stack([dep.cka_matrix(dep.gram_blocks(free_rotation(M, lb.valid, TextNoise(s, Draw.FREE_ROTATION, 0,
                                                                                         lb.order, lb.valid))),
                                     lb.site.n_heads) for s in range(300)])
    off = ~np.eye(lb.site.n_heads, dtype=bool)
    z = ((drawn.mean(0) - closed) / (drawn.std(0) / np.sqrt(len(drawn))))[off]
    assert np.abs(z).max() < 4.5 and abs(z.mean()) < 1.0, (np.abs(z).max(), z.mean())
    assert 0.2 < (drawn[:, off] > closed[off]).mean() < 0.8
