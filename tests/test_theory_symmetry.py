"""Identical heads coupled through shared inputs (convention B): the solver works on one unknown per orbit of
head exchanges and inverts by symmetry; the scalar transform is that of the full, unreduced equation."""
import numpy as np
import pytest

from attnspec.config import MHSAConfig
from attnspec.theory import build_pencil, solve_law
from attnspec.theory import closed_forms as cf
from attnspec.theory.dyson import DysonSolver
from attnspec.theory.edges import _edges
from attnspec.theory.symmetry import head_symmetries


def gaussian(heads, **kw):
    base = dict(d_qk=250, d_v=250, d_out=1000, beta=1.0, inputs="gaussian")
    base.update(kw)
    return MHSAConfig.uniform(1000, 1000, heads=heads, **base)


def test_exchanges_found_only_between_equivalent_heads():
    pairs = lambda cfg: [(h, h2) for h, h2, _ in head_symmetries(build_pencil(cfg, reduce=False))]  # noqa: E731
    assert pairs(gaussian(3)) == [(0, 1), (0, 2), (1, 2)]
    # GQA with two key groups: the terms that tie heads of one group read entries of G that stay zero
    # (inactive), so heads of different groups are alike too
    assert len(pairs(gaussian(4, key_groups=2))) == 6
    # unequal widths: only heads 0 and 1 are alike
    cfg = MHSAConfig(seq_len=700, d_model=1000, d_qk=(100, 100, 300), d_v=(200, 200, 100), d_out=800, beta=0.9,
                     inputs="gaussian")
    assert pairs(cfg) == [(0, 1)]
    # one head, or the attention matrix: nothing to exchange
    assert pairs(gaussian(1)) == [] and pairs(MHSAConfig(seq_len=100, d_model=100, d_qk=100, d_v=100, d_out=100,
                                                          beta=1.0, target="attention", inputs="gaussian")) == []


def test_unknowns_do_not_grow_with_identical_heads():
    sizes = [DysonSolver(build_pencil(gaussian(h))) for h in (2, 4, 8)]
    assert len({s.nu for s in sizes}) == 1 and len({s.K for s in sizes}) == 1
    full = DysonSolver(build_pencil(gaussian(8)), symmetric=False)
    assert full.nu > 5 * sizes[-1].nu


@pytest.mark.parametrize("cfg", [
    gaussian(4),
    gaussian(4, key_groups=2, value_groups=2, d_v=300, d_out=900, beta=0.8),
    gaussian(3, values="tied-to-keys", beta=1.2),
    MHSAConfig.uniform(500, 1000, heads=4, d_qk=250, d_v=200, d_out=700, beta=0.7, inputs="gaussian",
                       values="key-dependent", value_key_scale=1.3),
    MHSAConfig(seq_len=700, d_model=1000, d_qk=(100, 100, 300), d_v=(200, 200, 100), d_out=800, beta=0.9,
               inputs="gaussian"),
    MHSAConfig.uniform(400, 400, heads=4, d_qk=100, d_v=100, d_out=400, beta=1.0),   # convention A, not merged
], ids=["B-H4", "B-GQA", "B-tied", "B-key-dependent", "B-unequal", "A-unreduced"])
def test_symmetric_solver_matches_full_equation(cfg):
    pencil = build_pencil(cfg, reduce=False)
    sym, full = DysonSolver(pencil), DysonSolver(pencil, symmetric=False)
    assert sym.nu < full.nu
    E, _ = _edges(sym, pencil.norm_bound() ** 2)
    x = E * np.array([1e-6, 1e-3, 0.05, 0.3, 0.7, 0.99, 1.2, 0.5])
    y = E * np.array([1e-9, 1e-9, 1e-9, 1e-9, 1e-9, 1e-9, 1e-9, 0.5])
    np.testing.assert_allclose(sym.g_near_axis(x, y, y0=10 * E), full.g_near_axis(x, y, y0=10 * E), rtol=1e-9, atol=1e-12)
    # the whole resolvent, not only g: every read entry agrees with its representative
    z = x + 1j * y
    u_sym = sym.solve_near_axis(x, y, y0=10 * E)[1]
    G_full = full.resolvent(np.sqrt(z), full.solve_near_axis(x, y, y0=10 * E)[1])
    np.testing.assert_allclose(u_sym, G_full[:, full.where[sym.uc, sym.ud]], rtol=1e-8, atol=1e-12)


def test_convention_b_law_with_eight_heads():
    cfg = gaussian(8, d_qk=125, d_v=125)
    law = solve_law(cfg)
    assert abs(law.mass - 1) < 1e-6
    assert law.moments[0] == pytest.approx(cf.first_moment(cfg), rel=1e-9)
