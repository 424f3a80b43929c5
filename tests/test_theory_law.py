"""Law API: CDF/quantile, JSON, distances, errors; identical-head reduction and full pencils agree."""
import json

import numpy as np
import pytest

from attnspec.config import MHSAConfig
from attnspec.theory import Law, LawSolverError, build_pencil, law_distances, solve_law
from attnspec.theory.dyson import DysonSolver
from attnspec.theory.pencil import heads_coupled


@pytest.fixture(scope="module")
def law4():
    return solve_law(MHSAConfig.uniform(400, 400, heads=4, d_qk=100, d_v=100, d_out=400, beta=1.0))


def test_cdf_quantile_and_json(law4):
    assert isinstance(law4, Law)
    x = np.linspace(-1, law4.right_edge * 1.1, 500)
    F = law4.cdf(x)
    assert F[0] == 0 and F[-1] == 1 and np.all(np.diff(F) >= -1e-12)
    u = np.linspace(0.01, 0.99, 50)
    np.testing.assert_allclose(law4.cdf(law4.quantile(u)), u, atol=2e-3)
    # the mean from the quantile function matches m1
    uu = (np.arange(20000) + 0.5) / 20000
    assert np.mean(law4.quantile(uu)) == pytest.approx(law4.moments[0], rel=5e-3)
    d = json.loads(json.dumps(law4.to_dict()))
    assert len(d["moments"]) == 4 and d["right_edge"] > 0 and d["atom_at_zero"] == 0
    assert len(d["grid"]) == len(d["density"])
    assert np.all(law4.density >= 0)


def test_law_with_atom_and_left_edge():
    # l < d_out: Y Y^T is l x l with full rank, the bulk separates from 0 (MP-like with ratio < 1)
    cfg = MHSAConfig.uniform(100, 400, heads=2, d_qk=200, d_v=200, d_out=400, beta=0.7)
    law = solve_law(cfg)
    assert law.left_edge is not None and 0 < law.left_edge < law.right_edge
    assert law.cdf(np.array([0.5 * law.left_edge]))[0] == pytest.approx(0.0, abs=1e-9)
    assert law.mass == pytest.approx(1, abs=1e-3)
    # rank-deficient: atom at zero from d_v
    cfg = MHSAConfig.uniform(400, 400, heads=2, d_qk=100, d_v=50, d_out=400, beta=1.0)
    law = solve_law(cfg)
    assert law.atom_at_zero == pytest.approx(0.75)
    assert law.cdf(np.array([0.0]))[0] == pytest.approx(0.75)
    assert law.quantile(np.array([0.5, 0.74]))[0] == 0.0
    assert law.mass == pytest.approx(1, abs=1e-3)


def test_law_distances_keys_and_outliers(law4):
    rng = np.random.default_rng(0)
    sample = law4.quantile(rng.uniform(size=4000))
    d = law_distances(law4, np.concatenate([sample, [3 * law4.right_edge]]))
    assert set(d) >= {"w1", "ks", "w1_bulk", "n_outliers"}
    assert d["n_outliers"] == 1 and d["ks"] < 0.03 and d["w1_bulk"] < d["w1"]


def test_reduction_matches_full_pencil_and_coupling_detection():
    cfg = MHSAConfig(seq_len=200, d_model=400, d_qk=(100, 100, 40, 40), d_v=(50, 50, 120, 120), d_out=300, beta=1.1,
                     key_groups=2, value_groups=2)
    full, red = build_pencil(cfg, reduce=False), build_pencil(cfg)
    assert red.size < full.size and not heads_coupled(full)
    a, b = solve_law(cfg, reduce=False), solve_law(cfg)
    np.testing.assert_allclose(a.moments, b.moments, rtol=1e-9)
    assert a.right_edge == pytest.approx(b.right_edge, rel=1e-6)
    # convention B: every head reads the same X, so heads are coupled and never merged
    cfgb = MHSAConfig.uniform(100, 200, heads=2, d_qk=50, d_v=50, d_out=200, beta=0.8, inputs="gaussian")
    assert heads_coupled(build_pencil(cfgb, reduce=False)) and build_pencil(cfgb).size == build_pencil(cfgb, reduce=False).size


def test_solver_error_names_points_and_residuals():
    cfg = MHSAConfig.uniform(100, 100, heads=1, beta=1.0)
    solver = DysonSolver(build_pencil(cfg), maxit=1, max_depth=0, fixed_point_iters=0)
    with pytest.raises(LawSolverError) as info:
        solver.g_near_axis(np.array([1.0, 5.0]), np.array([1e-9, 1e-9]), y0=100.0)
    msg = str(info.value)
    assert "z=" in msg and "residual" in msg and info.value.z.size >= 1
    assert isinstance(info.value, RuntimeError)


def test_beta_zero_is_a_clear_error():
    with pytest.raises(ValueError, match="beta = 0"):
        solve_law(MHSAConfig.uniform(100, 100, beta=0.0))


def test_schur_block_solve_matches_dense():
    cfg = MHSAConfig(seq_len=400, d_model=400, d_qk=tuple(25 * (1 + h % 4) for h in range(8)),
                     d_v=tuple(25 * (1 + (h + 1) % 3) for h in range(8)), d_out=400, beta=1.0)
    solver = DysonSolver(build_pencil(cfg))
    assert solver.block_plan is not None
    nz = np.zeros((solver.nu, solver.nu), bool)
    jj, kk = np.divmod(solver.S.indices, solver.nu)
    nz[jj, kk] = True
    rng = np.random.default_rng(0)
    J = (rng.normal(size=(3, solver.nu, solver.nu)) + 1j * rng.normal(size=(3, solver.nu, solver.nu))) * nz
    J += 5 * np.eye(solver.nu)
    F = rng.normal(size=(3, solver.nu)) + 0j
    np.testing.assert_allclose(solver._solve(J, F), np.linalg.solve(J, F[..., None])[..., 0], atol=1e-12)
    law = solve_law(cfg)
    assert law.moments[0] == pytest.approx(cfg.sigma2, rel=1e-9)
    from attnspec.theory.closed_forms import second_moment
    assert law.moments[1] == pytest.approx(second_moment(cfg), rel=1e-8)
