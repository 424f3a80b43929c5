"""The law against Monte-Carlo of the Gaussian-equivalent surrogate (attnspec.simulation)."""
import numpy as np
import pytest

from attnspec.config import MHSAConfig
from attnspec.simulation import simulate
from attnspec.spectra import moments
from attnspec.theory import closed_forms as cf
from attnspec.theory import law_distances, solve_law


def h4_config(d: int) -> MHSAConfig:
    """Four heads at width d: l = d_out = d, d_qk = d_v = d/4, beta = 1 (docs/theory.md, "Law against Monte-Carlo")."""
    return MHSAConfig.uniform(d, d, heads=4, d_qk=round(d / 4), d_v=round(d / 4), d_out=d, beta=1.0)


def mean_w1(law, cfg, draws, seed=0):
    sim = simulate(cfg, seed=seed, draws=draws, models=("surrogate",))
    return float(np.mean([law_distances(law, e)["w1"] for e in sim.surrogate]))


@pytest.fixture(scope="module")
def h4_law():
    return solve_law(h4_config(400))


def test_w1_to_surrogate_shrinks_with_d(h4_law):
    w = [mean_w1(h4_law, h4_config(d), draws) for d, draws in ((250, 6), (500, 3))]
    assert w[1] < w[0] < 0.06


@pytest.mark.slow
def test_w1_to_surrogate_shrinks_with_d_up_to_1000(h4_law):
    w = [mean_w1(h4_law, h4_config(d), draws) for d, draws in ((250, 6), (500, 3), (1000, 1))]
    assert w[2] < w[1] < w[0]


@pytest.mark.parametrize("cfg", [
    MHSAConfig.uniform(400, 400, heads=1, d_qk=100, d_v=150, d_out=300, beta=0.9, inputs="gaussian"),
    MHSAConfig.uniform(200, 400, heads=2, d_qk=100, d_v=100, d_out=400, beta=0.8, values="key-dependent", value_key_scale=1.3),
    MHSAConfig.uniform(300, 400, heads=1, d_qk=50, d_v=50, d_out=400, beta=1.0, values="tied-to-keys", inputs="gaussian"),
    MHSAConfig(seq_len=300, d_model=300, d_qk=(30,), d_v=(30,), d_out=300, beta=1.2, target="attention", inputs="gaussian"),
    MHSAConfig.uniform(400, 400, heads=2, d_qk=100, d_v=150, d_out=300, beta=0.9, inputs="gaussian"),
    # identical heads coupled through X: solved by their exchange symmetry (attnspec.theory.symmetry)
    MHSAConfig.uniform(400, 400, heads=4, d_qk=100, d_v=100, d_out=400, beta=1.0, inputs="gaussian"),
], ids=["B-output", "key-dependent", "B-tied", "B-attention", "B-output-H2", "B-output-H4"])
def test_law_moments_match_surrogate_monte_carlo(cfg):
    # derived closed forms (convention B, key-dependent, tied) and the pencil agree with simulation
    law = solve_law(cfg)
    assert law.moments[0] == pytest.approx(cf.first_moment(cfg), rel=1e-8)
    sim = simulate(cfg, seed=1, draws=3, models=("surrogate",))
    mc = moments(sim.surrogate, 2)
    assert mc[0] == pytest.approx(law.moments[0], rel=0.04)
    assert mc[1] == pytest.approx(law.moments[1], rel=0.10)
    assert law_distances(law, sim.surrogate)["ks"] < 0.05
