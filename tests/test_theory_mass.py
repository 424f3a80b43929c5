"""Mass accounting and edges of the law, checked against an independent route to the CDF: the contour integral
``F(x) = (x/pi) int_0^pi Re[e^{i t} g(x e^{i t})] dt`` (``law._cdf_contour``), exact up to quadrature away from
edges. Issue 10: a small gap between 0 and the bulk was missed (the left-edge search started at 1e-5 times the
squared norm bound) and the law lost mass."""
import numpy as np
import pytest

from attnspec.config import MHSAConfig
from attnspec.theory import build_pencil, solve_law
from attnspec.theory.dyson import DysonSolver
from attnspec.theory.edges import _cdf_contour, _density, _edges

# H = 1, tied W_V = W_K, convention B: gamma 0.94, psi = phi = 0.32, omega 0.88, beta 1.1
GAP = MHSAConfig(d_model=1000, seq_len=940, d_qk=320, d_v=320, d_out=880, beta=1.1, inputs="gaussian",
                 values="tied-to-keys")
GAP_LEFT = 0.1010609904     # k-section with six rounds (the default four agree to 1e-7)
# convention B, gamma 1.683: an atom, a small component whose left edge is below 1e-7 E, a gap, the bulk
TINY = MHSAConfig(d_model=1000, seq_len=1683, d_qk=151, d_v=1635, d_out=1346, beta=0.11166, inputs="gaussian")
H1 = MHSAConfig.uniform(1000, 1000, heads=1, beta=1.0)        # density ~ x^{-3/4} at 0, no gap
ATT = MHSAConfig(seq_len=1000, d_model=1000, d_qk=1000, d_v=1000, d_out=1000, beta=1.0, target="attention")


@pytest.fixture(scope="module")
def gap_law():
    return solve_law(GAP)


def contour(law, x, n=32):
    """``F(x)`` by the contour integral, continued down from ``Im z = 2 E``."""
    return _cdf_contour(DysonSolver(build_pencil(law.config)), x, law.right_edge, n)


def test_issue10_gap_is_found_and_mass_is_one(gap_law):
    cfg, law = GAP, gap_law
    assert (cfg.gamma, cfg.psi[0], cfg.phi[0], cfg.omega, cfg.beta) == pytest.approx((0.94, 0.32, 0.32, 0.88, 1.1))
    assert abs(law.mass - 1) < 1e-6
    assert law.atom_at_zero == pytest.approx(1 - 320 / 940)
    # the gap ends far below the old search's start (1e-5 x the squared norm bound)
    assert law.left_edge == pytest.approx(GAP_LEFT, rel=1e-6)
    assert law.left_edge < 1e-5 * law.checks["norm_bound_squared"]
    # nothing in the gap, and the CDF just above it is the atom
    F = law.cdf(np.array([0.05, 0.5 * law.left_edge, law.left_edge, law.left_edge * (1 + 1e-6)]))
    assert np.all(F[:3] == law.atom_at_zero)
    assert 0 <= F[3] - law.atom_at_zero < 1e-6
    assert law.pdf(0.5 * law.left_edge) == 0 and law.pdf(1.01 * law.left_edge) > 0
    # independently: no mass below 0.9 x the edge, the CDF's mass above it
    assert contour(law, 0.9 * law.left_edge) == pytest.approx(law.atom_at_zero, abs=1e-10)
    i = np.searchsorted(law.grid, 1.1 * law.left_edge)
    assert law._cum[i] - law.atom_at_zero > 1e-4
    assert law._cum[i] == pytest.approx(contour(law, law.grid[i]), abs=1e-7)


@pytest.mark.parametrize("cfg", [GAP, H1, ATT, TINY], ids=["gap", "H1-head", "attention", "tiny-component"])
def test_cdf_matches_contour_integral(cfg, gap_law):
    law = gap_law if cfg is GAP else solve_law(cfg)
    assert abs(law.mass - 1) < 1e-6
    lo, E = law.left_edge or 0.0, law.right_edge
    fractions = [0.03, 0.1, 0.3, 0.6, 0.9] + ([1e-6] if law.left_edge is None else [])
    for f in fractions:
        i = int(np.argmin(np.abs(law.grid - (lo + f * (E - lo)))))
        assert law._cum[i] == pytest.approx(contour(law, law.grid[i]), abs=1e-6), (cfg.describe(), f)
        mid = 0.5 * (law.grid[i] + law.grid[i + 1])        # between grid points: the CDF's interpolant
        assert law.cdf(np.array([mid]))[0] == pytest.approx(contour(law, mid), abs=1e-6), (cfg.describe(), f)
    u = np.linspace(law.atom_at_zero + 1e-6, 1 - 1e-6, 101)
    np.testing.assert_allclose(law.cdf(law.quantile(u)), u, atol=1e-9)


def test_near_degenerate_ranks_stay_on_the_physical_branch():
    # d_out = d_v + 1 at small beta: near 0, in the gap, the Dyson equation has an unphysical solution with
    # "atom" 1 - d_out/l next to the physical one (1 - d_v/l); only the signs of the diagonal of Im G tell
    law = solve_law(MHSAConfig(seq_len=125, d_model=1000, d_qk=50, d_v=50, d_out=51, beta=0.109375))
    assert law.atom_at_zero == pytest.approx(0.6)
    assert abs(law.mass - 1) < 1e-6 and law.left_edge is not None
    for x in (1e-9, 1e-8, 0.5 * law.left_edge / law.right_edge):
        assert contour(law, x * law.right_edge) == pytest.approx(0.6, abs=1e-12)


def test_tiny_component_below_a_gap():
    law = solve_law(TINY)
    assert abs(law.mass - 1) < 1e-6
    assert law.left_edge is not None and law.left_edge < 1e-6 * law.right_edge
    assert contour(law, 0.5 * law.left_edge) == pytest.approx(law.atom_at_zero, abs=1e-9)
    # the small component holds mass; the gap above it (density zero there, not the Poisson tail) none
    above = law.cdf(np.array([1e-3, 1e-2]) * law.right_edge) - law.atom_at_zero
    assert above[0] > 1e-3 and above[1] == pytest.approx(above[0], abs=1e-9)


def test_right_edge_is_square_root_to_the_last_digits():
    # the right-edge k-section once stopped with no support point in its last round (edge off by ~1e-4)
    cfg = MHSAConfig(seq_len=1000, d_model=1000, d_qk=(125, 125, 250, 500), d_v=(250, 125, 250, 125), d_out=1000,
                     beta=1.0)
    pencil = build_pencil(cfg)
    solver = DysonSolver(pencil)
    E, _ = _edges(solver, pencil.norm_bound() ** 2)
    rho = _density(solver, E * np.array([1 - 1e-4, 1 - 1e-5, 1 + 1e-6]), E, 1e-13 * E)
    assert rho[1] / rho[0] == pytest.approx(np.sqrt(0.1), rel=0.02)
    assert rho[2] < 1e-6 * rho[0]
