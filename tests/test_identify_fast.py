"""Identification: closed-form laws, the bulk-W1 fitter, bootstrap intervals, calibrated GOF, identifiability."""
import json

import numpy as np
import pytest

from attnspec import MHSAConfig
from attnspec.identify import (Family, MarchenkoPasturFamily, MHSAFamily, attention_law, fisher_report, fit_family,
                               identify, marchenko_pastur_law)
from attnspec.simulation import simulate
from attnspec.sweeps.closed_form import closed_form_moments


@pytest.mark.parametrize("beta,psi", [(0.5, 1.0), (1.0, 0.25), (1.0, 1.0)])
def test_attention_law_matches_closed_form_moments(beta, psi):
    law = attention_law(beta, gamma=1.0, psi=psi)
    cf = closed_form_moments(MHSAConfig.uniform(400, 400, d_qk=int(400 * psi), target="attention", beta=beta))
    np.testing.assert_allclose(law.moments[:2], [cf["m1"], cf["m2"]], rtol=2e-3)
    assert law.right_edge == pytest.approx(cf["right_edge"])
    u = np.array([0.1, 0.5, 0.9])
    np.testing.assert_allclose(law.cdf(law.quantile(u)), u, atol=1e-3)


def test_marchenko_pastur_law():
    law = marchenko_pastur_law(0.5, 2.0)
    np.testing.assert_allclose(law.moments[:2], [2.0, 4.0 * 1.5], rtol=1e-3)


def _surrogate(beta, l=300, seed=0):
    cfg = MHSAConfig.uniform(l, l, target="attention", beta=beta)
    return cfg, simulate(cfg, seed=seed, models=("surrogate",)).surrogate


@pytest.mark.parametrize("beta", [0.5, 1.0])
def test_fit_recovers_beta(beta):
    cfg, eigs = _surrogate(beta)
    fit = fit_family(eigs, MHSAFamily(cfg.replace(beta=0.3)))
    assert fit.theta["beta"] == pytest.approx(beta, rel=0.02)
    assert fit.n_outliers == 0 and fit.n == 300


def test_scale_is_profiled_exactly():
    rng = np.random.default_rng(1)
    W = rng.standard_normal((300, 600))
    x = 2.5 * np.linalg.eigvalsh(W @ W.T / 600)
    fit = fit_family(x, MarchenkoPasturFamily(300, 600))
    assert fit.theta["scale"] == pytest.approx(2.5, rel=0.02) and fit.evaluations == 2


def test_outliers_reported_apart():
    cfg, eigs = _surrogate(1.0)
    spiked = np.concatenate([eigs.ravel()[:-3], [40.0, 50.0, 60.0]])
    fit = fit_family(spiked, MHSAFamily(cfg))
    assert fit.n_outliers == 3 and fit.outliers.tolist() == [40.0, 50.0, 60.0]
    assert fit.theta["beta"] == pytest.approx(1.0, rel=0.02)


def test_identify_interval_and_json():
    cfg, eigs = _surrogate(0.8, l=200, seed=3)
    res = identify(eigs, cfg.replace(beta=1.0), n_boot=9, seed=1)
    e = res.estimates["beta"]
    assert e["ci_low"] < e["estimate"] < e["ci_high"] and abs(e["estimate"] - 0.8) < 0.03
    assert 0 < res.gof["p_value"] <= 1
    json.dumps(res.to_dict())
    assert "beta" in res.summary()


@pytest.mark.slow  # 99 softmax bootstrap draws: about 40 s on a shared 2-core box
def test_gof_rejects_marchenko_pastur_at_1_percent():
    """A pure Marchenko-Pastur spectrum against the attention family (beta free, scale known): p = 1/(B+1)."""
    l = 300
    rng = np.random.default_rng(7)
    W = rng.standard_normal((l, l))
    mp = np.expm1(1.0) * np.linalg.eigvalsh(W @ W.T / l)     # same first moment as beta = 1
    res = identify(mp, MHSAConfig.uniform(l, l, target="attention"), n_boot=99, seed=2)
    assert res.gof["p_value"] <= 0.01
    # and a genuine surrogate spectrum is not rejected
    cfg, eigs = _surrogate(1.0, l=l, seed=5)
    assert identify(eigs, cfg, n_boot=19, seed=3).gof["p_value"] > 0.05


class _ProductFamily(Family):
    """Quantiles depend on a*b only: the direction (log a, log b) ~ (1, -1) is not identifiable."""

    names = ("a", "b")
    bounds = {"a": (0.01, 100.0), "b": (0.01, 100.0)}
    log_scale = frozenset({"a", "b"})

    def quantiles(self, theta, u):
        return theta["a"] * theta["b"] * marchenko_pastur_law(1.0).quantile(u)


def test_fisher_flags_non_identifiable_direction():
    class F:
        theta = {"a": 2.0, "b": 3.0}

    rng = np.random.default_rng(0)
    boot_q = 6.0 * marchenko_pastur_law(1.0).quantile(np.linspace(0.02, 0.97, 40)) + 0.01 * rng.standard_normal((30, 40))
    rep = fisher_report(_ProductFamily(), F(), boot_q)
    assert rep["not_identified"] == ["a", "b"]
    (d,) = rep["non_identifiable"]
    assert abs(d["direction"]["a"] + d["direction"]["b"]) < 1e-3   # along log a - log b


def test_cli_identify(tmp_path, capsys):
    from attnspec.cli import main

    cfg, eigs = _surrogate(1.0, l=200, seed=4)
    np.save(tmp_path / "e.npy", eigs)
    assert main(["identify", str(tmp_path / "e.npy"), "--target", "attention", "--boot", "9", "--no-progress",
                 "--json", str(tmp_path / "r.json")]) == 0
    out = json.loads((tmp_path / "r.json").read_text())
    assert abs(out["estimates"]["beta"]["estimate"] - 1.0) < 0.03
    assert "beta" in capsys.readouterr().out
