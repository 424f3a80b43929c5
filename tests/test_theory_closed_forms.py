"""Closed forms reproduced by the general pencil solver: Marchenko–Pastur, Fuss–Catalan, the attention quartic,
the first and second moments of the output, the atom at zero."""

import numpy as np
import pytest

from attnspec.config import MHSAConfig
from attnspec.theory import closed_forms as cf
from attnspec.theory import solve_law
from attnspec.theory.dyson import DysonSolver
from attnspec.theory.law import pencil_moments
from attnspec.theory.pencil import Factor, GaussianBlock, Monomial, build_pencil, pencil_from_monomials


@pytest.mark.parametrize("rows,cols,coef", [(1.0, 1.0, 1.0), (0.5, 1.0, 2.0), (1.0, 0.25, 0.7), (0.3, 0.9, 1.3)])
def test_marchenko_pastur_moments(rows, cols, coef):
    # Y = coef * Z, Z (rows d x cols d) iid N(0, 1/d): Y Y^T = (coef^2 cols) (1/p) X X^T with ratio rows/cols
    p = pencil_from_monomials([Monomial(coef, (Factor("Z"),))], {"Z": GaussianBlock("Z", rows, cols)})
    m, edge = pencil_moments(p)
    ref = cf.marchenko_pastur_moments(rows / cols, 4, scale=coef ** 2 * cols)
    np.testing.assert_allclose(m, ref, rtol=1e-8)
    assert edge == pytest.approx(cf.marchenko_pastur_edges(rows / cols, coef ** 2 * cols)[1], rel=1e-5)


@pytest.mark.parametrize("s", [1, 2, 3])
def test_fuss_catalan_moments(s):
    blocks = {f"X{i}": GaussianBlock(f"X{i}", 1.0, 1.0) for i in range(s)}
    p = pencil_from_monomials([Monomial(1.0, tuple(Factor(f"X{i}") for i in range(s)))], blocks)
    m, edge = pencil_moments(p)
    np.testing.assert_allclose(m, cf.fuss_catalan_moments(s), rtol=1e-8)
    assert edge == pytest.approx((s + 1) ** (s + 1) / s ** s, rel=1e-5)   # Fuss–Catalan edge


def test_transposed_and_shared_blocks_in_a_product():
    # Y = X X^T (one block in two roles): moments of (X X^T)^2 are the MP moments of even order
    p = pencil_from_monomials([Monomial(1.0, (Factor("X"), Factor("X", transpose=True)))], {"X": GaussianBlock("X", 1.0, 0.5)})
    m, _ = pencil_moments(p, k=2)
    mp = cf.marchenko_pastur_moments(2.0, 4, scale=0.5)
    np.testing.assert_allclose(m, [mp[1], mp[3]], rtol=1e-8)


@pytest.mark.parametrize("beta,gamma,psi", [(0.3, 1.0, 1.0), (1.0, 0.5, 0.25), (1.7, 0.8, 1.5), (0.8, 0.2, 0.1)])
def test_attention_matrix_moments_edge_and_stieltjes(beta, gamma, psi):
    d = 400
    cfg = MHSAConfig(seq_len=round(gamma * d), d_model=d, d_qk=(round(psi * d),), d_v=(round(psi * d),), d_out=d,
                     beta=beta, target="attention")
    law = solve_law(cfg)
    np.testing.assert_allclose(law.moments, cf.attention_moments(beta, cfg.gamma, cfg.psi[0]), rtol=1e-8)
    assert law.right_edge == pytest.approx(cf.attention_edge(beta, cfg.gamma, cfg.psi[0]), rel=1e-6)
    solver = DysonSolver(build_pencil(cfg))
    z = np.array([0.3 + 0.5j, 2.0 + 0.01j, -1.0 + 1j]) * law.right_edge
    ours = solver.g_near_axis(z.real, z.imag, y0=10 * law.right_edge)
    np.testing.assert_allclose(ours, cf.attention_stieltjes(z, beta, cfg.gamma, cfg.psi[0]), rtol=1e-8)


def test_mp_edge_never_reached():
    for beta in (0.1, 0.5, 1.0, 1.5, 2.0, 3.0):
        assert cf.attention_edge(beta, 1.0, 1.0) > cf.mp_edge(beta)


@pytest.mark.parametrize("cfg", [
    MHSAConfig(seq_len=100, d_model=200, d_qk=(50, 100), d_v=(25, 75), d_out=150, beta=0.8),
    MHSAConfig(seq_len=160, d_model=200, d_qk=(20, 20, 60), d_v=(40, 40, 10), d_out=60, beta=1.3),
    MHSAConfig.uniform(100, 200, heads=4, d_qk=10, d_v=30, d_out=300, beta=0.6, key_groups=2, value_groups=1),
])
def test_output_first_and_second_moment_closed_forms(cfg):
    law = solve_law(cfg)
    assert law.moments[0] == pytest.approx(cfg.sigma2, rel=1e-9)
    assert law.moments[1] == pytest.approx(cf.second_moment(cfg), rel=1e-8)


@pytest.mark.parametrize("cfg", [
    MHSAConfig(seq_len=200, d_model=200, d_qk=(50,), d_v=(20,), d_out=200, beta=1.0),        # rank d_v
    MHSAConfig(seq_len=200, d_model=200, d_qk=(100, 100), d_v=(100, 100), d_out=60, beta=0.7),  # rank d_out
    MHSAConfig(seq_len=200, d_model=200, d_qk=(30,), d_v=(80,), d_out=200, beta=1.0, values="key-dependent"),
])
def test_atom_at_zero_matches_generic_rank(cfg):
    atom = cf.atom_at_zero(cfg)
    assert atom > 0.05
    solver = DysonSolver(build_pencil(cfg))
    y = 1e-9
    g = solver.g_near_axis(np.array([0.0]), np.array([y]), y0=1e4)
    assert (1j * y * g[0]).real == pytest.approx(atom, abs=2e-3)
    law = solve_law(cfg)
    assert law.mass == pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize("beta,c", [(0.5, 1.0), (1.0, 0.25), (2.0, 3.0)])
def test_quartic_roots_solve_the_quartic_at_real_and_complex_w(beta, c):
    w = np.array([0.3, 1.7, 4.0, 2.0 + 0.5j, 10.0 - 1.0j])
    roots = cf.attention_quartic_roots(w, beta, c)
    s2, a2, b2 = np.expm1(beta ** 2), np.expm1(beta ** 2) - beta ** 2, beta ** 2
    for wi, r in zip(w, roots):
        coeffs = [b2 * a2, -b2 * wi, b2 - c * s2, c * wi, -c]
        scale = np.abs(coeffs).max() * np.maximum(1.0, np.abs(r)) ** 4
        np.testing.assert_array_less(np.abs(np.polyval(coeffs, r)), 1e-9 * scale)


def test_quartic_degree_drops_when_its_leading_coefficient_vanishes():
    assert cf.attention_quartic_roots([1.0, 2.0], 1e-12, 1.0).shape == (2, 3)   # alpha^2 underflows
    np.testing.assert_allclose(cf.attention_quartic_roots([1.0 + 1.0j], 0.0, 1.0), [[1 / (1.0 + 1.0j)]])  # G = 1/w
