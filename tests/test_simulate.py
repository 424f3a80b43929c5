"""Simulator: the foundation's acceptance figures, determinism, numerics and structure."""
import math
import warnings

import numpy as np
import pytest

from attnspec import MHSAConfig
from attnspec.simulation import draw_blocks, simulate, simulate_outputs, softmax_rows, surrogate_attention
from attnspec.spectra import moments, wasserstein1

E_MINUS_1 = math.e - 1


def softmax_m1_finite_l(beta: float, l: int) -> float:
    """E[l sum_j A_ij^2] - 1 for one softmax row of l iid N(0,1) scores, to second order in 1/l.

    With w = e^{beta s}, the ratio l sum w^2 / (sum w)^2 has the delta-method expansion
    e^{b^2} [1 + (3 Var w / m1^2 - 2 Cov(w^2, w) / (m2 m1)) / l], Var w / m1^2 = e^{b^2} - 1 and
    Cov(w^2, w) / (m2 m1) = e^{2 b^2} - 1: softmax's row normalization biases m1 by about -12/l at
    beta = 1 (-1.2% at l = 1000), which the Gaussian surrogate does not have.
    """
    e1, e2 = math.expm1(beta**2), math.expm1(2 * beta**2)
    return e1 + (1 + e1) * (3 * e1 - 2 * e2) / l


def test_attention_matrix_l1000_beta1():
    c = MHSAConfig.uniform(1000, 1000, 1, 1000, target="attention", beta=1.0)
    r = simulate(c, seed=11, draws=3)
    assert r.surrogate.mean() == pytest.approx(E_MINUS_1, rel=0.01)
    assert r.softmax.mean() == pytest.approx(softmax_m1_finite_l(1.0, 1000), rel=0.01)
    assert softmax_m1_finite_l(1.0, 1000) == pytest.approx(E_MINUS_1 * (1 - 0.01206), rel=1e-3)
    assert r.distances()["w1_bulk"] < 0.06


@pytest.fixture(scope="module")
def h4():
    return MHSAConfig.uniform(1000, 1000, heads=4, d_qk=250, d_v=250, d_out=1000, beta=1.0)


def test_multihead_softmax_vs_surrogate(h4):
    r = simulate(h4, seed=1)
    assert r.distances()["w1_bulk"] < 0.06
    assert r.surrogate.mean() == pytest.approx(E_MINUS_1, rel=0.01)


def test_sharing_preserves_and_tying_moves_the_spectrum(h4):
    indep = simulate(h4, seed=2, models=("surrogate",)).surrogate
    shared = simulate(h4.replace(key_groups=1, value_groups=1), seed=3, models=("surrogate",)).surrogate
    assert wasserstein1(indep, shared) < 0.03
    tied = simulate(h4.replace(values="tied-to-keys"), seed=4)
    assert tied.softmax.mean() > 5 and tied.surrogate.mean() > 5
    assert indep.mean() == pytest.approx(1.72, abs=0.03)


def test_query_sharing_control_is_not_what_kv_sharing_is(h4):
    """Sanity: the spectrum is sensitive enough to see a real change (tying) that sharing does not make."""
    indep = simulate(h4.replace(seq_len=400, d_model=400, d_qk=(100,) * 4, d_v=(100,) * 4, d_out=400),
                     seed=5, draws=2, models=("surrogate",)).surrogate
    tied = simulate(h4.replace(seq_len=400, d_model=400, d_qk=(100,) * 4, d_v=(100,) * 4, d_out=400,
                               values="tied-to-keys"), seed=6, draws=2, models=("surrogate",)).surrogate
    assert wasserstein1(indep, tied) > 1.0


@pytest.mark.parametrize("target", ["attention", "output"])
def test_beta_20_no_overflow_nan_or_warning(target):
    c = MHSAConfig.uniform(200, 200, 1, 200, target=target, beta=20.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(over="raise", invalid="raise", divide="raise"):
            r = simulate(c, seed=0)
            r.summary()
    assert np.all(np.isfinite(r.softmax)) and np.all(np.isfinite(r.surrogate))
    A = softmax_rows(np.random.default_rng(0).standard_normal((5, 50)) * 5, beta=20.0)
    assert np.all(np.isfinite(A)) and np.allclose(A.sum(-1), 1.0)


def test_same_seed_same_bits_different_seed_differs(h4):
    c = h4.replace(seq_len=120, d_model=160, d_qk=(40,) * 4, d_v=(40,) * 4, d_out=100)
    a, b, other = simulate(c, seed=7, draws=3), simulate(c, seed=7, draws=3), simulate(c, seed=8, draws=3)
    assert a.softmax.tobytes() == b.softmax.tobytes() and a.surrogate.tobytes() == b.surrogate.tobytes()
    assert not np.array_equal(a.softmax, other.softmax) and not np.array_equal(a.surrogate, other.surrogate)
    # a draw does not depend on batching nor on which models run
    tiny_batches = simulate(c, seed=7, draws=3, batch_bytes=1)
    np.testing.assert_array_equal(tiny_batches.softmax, a.softmax)
    np.testing.assert_allclose(tiny_batches.surrogate, a.surrogate, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(simulate(c, seed=7, draws=3, models=("softmax",)).softmax, a.softmax)


def test_blocks_share_and_tie():
    c = MHSAConfig.uniform(50, 100, heads=4, d_qk=20, key_groups=2, value_groups=4)
    b = draw_blocks(c, np.random.default_rng(0))
    assert b.K[0] is b.K[1] and b.K[1] is not b.K[2] and b.V[0] is not b.V[1]
    assert b.Q[0] is not b.Q[1] and b.W_O.shape == (80, 100)
    assert b.W_O.std() == pytest.approx(1 / math.sqrt(80), rel=0.05)
    t = draw_blocks(c.replace(values="tied-to-keys", value_groups=2), np.random.default_rng(0))
    assert all(t.V[h] is t.K[h] for h in range(4))
    kd = draw_blocks(c.replace(values="key-dependent", value_key_scale=3.0), np.random.default_rng(0))
    M = np.linalg.lstsq(kd.K[0], kd.V[0], rcond=None)[0]  # V = K M exactly
    np.testing.assert_allclose(kd.K[0] @ M, kd.V[0], atol=1e-9)
    assert M.std() == pytest.approx(3 / math.sqrt(20), rel=0.1)


def test_surrogate_is_the_gaussian_equivalent_of_softmax_entries():
    """l A - 1 regressed on beta S has slope ~1 and residual variance ~alpha^2, for softmax and surrogate."""
    rng = np.random.default_rng(3)
    l, beta = 800, 0.7
    S = rng.standard_normal((l, 400)) @ rng.standard_normal((400, l)) / 20.0
    for A in (softmax_rows(S, beta), surrogate_attention(S, beta, rng)):
        y, x = (l * A - 1).ravel(), (beta * S).ravel()
        slope = (x @ y) / (x @ x)
        resid = y - slope * x
        assert slope == pytest.approx(1.0, abs=0.03)
        assert resid.var() == pytest.approx(math.expm1(beta**2) - beta**2, rel=0.08)


def test_gaussian_inputs_and_value_centering_run():
    """Convention B: the attention matrix keeps m1 = e^{beta^2} - 1 (docs/theory.md, Input conventions A and B), while the output's
    linear path sees K^T V = W_K^T X^T X W_V and gets m1 = alpha^2 + beta^2 (1 + gamma); l > d allowed."""
    att = simulate(MHSAConfig.uniform(400, 400, 1, 400, inputs="gaussian", target="attention"), seed=0)
    assert att.surrogate.mean() == pytest.approx(math.e - 1, rel=0.03)
    c = MHSAConfig.uniform(300, 200, heads=2, d_qk=100, inputs="gaussian", beta=0.5)
    r = simulate(c, seed=0)
    assert r.surrogate.mean() == pytest.approx(math.expm1(0.25) - 0.25 + 0.25 * (1 + 1.5), rel=0.05)
    c2 = MHSAConfig.uniform(300, 300, heads=2, centering="values", beta=0.5)
    r2 = simulate(c2, seed=0)
    assert r2.surrogate.mean() == pytest.approx(math.expm1(0.25), rel=0.05)


def test_simulate_outputs_shapes_and_centering():
    c = MHSAConfig.uniform(60, 80, heads=2, d_qk=20, d_out=30)
    b = draw_blocks(c, np.random.default_rng(0))
    from attnspec.simulation import stack_blocks
    Y = simulate_outputs(c, stack_blocks([b]), [np.random.default_rng(1)])
    assert Y["softmax"].shape == (1, 60, 30) and Y["surrogate"].shape == (1, 60, 30)
    np.testing.assert_allclose(Y["softmax"].sum(axis=1), 0.0, atol=1e-10)  # P O: columns centered over tokens


def test_bad_arguments():
    c = MHSAConfig.uniform(20, 20)
    with pytest.raises(ValueError, match="draws"):
        simulate(c, draws=0)
    with pytest.raises(ValueError, match="seed"):
        simulate(c, seed=-1)
    with pytest.raises(ValueError, match="models"):
        simulate(c, models=("exact",))
    with pytest.raises(TypeError, match="MHSAConfig"):
        simulate({"seq_len": 20})
    with pytest.raises(ValueError, match="mask"):
        softmax_rows(np.zeros((2, 3)), 1.0, mask=np.array([[True, False, False], [False, False, False]]))


def test_moments_are_sane_for_the_attention_matrix():
    c = MHSAConfig.uniform(400, 400, 1, 400, target="attention", beta=0.5)
    m = moments(simulate(c, seed=1, draws=2, models=("surrogate",)).surrogate)
    # docs/theory.md, Checked figures (attention matrix, beta = 1/2): m1 = 0.28403, m2 = 0.22384 (finite-size within a few %)
    assert m[0] == pytest.approx(0.2840254167, rel=0.02) and m[1] == pytest.approx(0.2238408746, rel=0.05)
