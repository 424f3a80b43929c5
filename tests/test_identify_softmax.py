"""Identification on softmax spectra: softmax bootstrap (model error in the intervals and the GOF null), law tables."""
import json
import math

import numpy as np
import pytest
import torch

from attnspec import MHSAConfig
from attnspec.identify import MHSAFamily, TabulatedFamily, identify
from attnspec.simulation import simulate

torch.set_num_threads(1)


def _softmax(beta, l=300, seed=11):
    cfg = MHSAConfig.uniform(l, l, target="attention", beta=beta)
    return cfg, simulate(cfg, seed=seed, models=("softmax",)).softmax


def test_law_table_interpolates_the_exact_law_off_nodes():
    fam = MHSAFamily(MHSAConfig.uniform(300, 300, target="attention"), free=("beta", "psi", "scale"))
    tab = TabulatedFamily(fam, {"beta": 1.0, "psi": 0.5}, {"beta": 0.1, "psi": 0.3}, nodes=7)
    assert tab.solves == 49 and tab.bounds["psi"] == pytest.approx((0.5 * math.exp(-0.3), 0.5 * math.exp(0.3)))
    u = np.linspace(0.01, 0.99, 99)
    th = {"beta": 1.037, "psi": 0.61, "scale": 2.0}            # between nodes in both coordinates
    np.testing.assert_allclose(tab.quantiles(th, u), fam.quantiles(th, u), rtol=2e-3)
    assert tab.right_edge(th) == pytest.approx(fam.right_edge(th), rel=1e-3)
    assert not tab.on_border(th)
    assert tab.on_border({"beta": 1.0999, "psi": 0.5}) and tab.on_border({"beta": 1.0, "psi": 0.5 * math.exp(-0.3)})


def test_law_table_edge_at_an_exact_bound_is_not_a_border():
    fam = MHSAFamily(MHSAConfig.uniform(200, 200, target="attention"), free=("beta", "psi"))
    tab = TabulatedFamily(fam, {"beta": 1.0, "psi": 3.9}, {"beta": 0.1, "psi": 0.2}, nodes=4)
    assert tab.bounds["psi"][1] == 4.0                          # clipped to the family's bound
    assert not tab.on_border({"beta": 1.0, "psi": 4.0}) and tab.on_border({"beta": 1.0, "psi": 3.9 * math.exp(-0.2)})
    with pytest.raises(ValueError, match="nodes must be >= 4"):
        TabulatedFamily(fam, {"beta": 1.0, "psi": 1.0}, {"beta": 0.1, "psi": 0.2}, nodes=3)


def test_bad_model_names_the_parameter_and_choices():
    cfg, eigs = _softmax(1.0, l=100)
    with pytest.raises(ValueError, match="model must be one of softmax, surrogate, got 'gaussian'"):
        identify(eigs, cfg, n_boot=0, model="gaussian")
    with pytest.raises(ValueError, match="model must be one of softmax, surrogate"):
        MHSAFamily(cfg).sample({"beta": 1.0}, np.random.default_rng(0), model="softmx")
    with pytest.raises(ValueError, match="level must be in"):
        identify(eigs, cfg, n_boot=0, level=1.5)


def test_sample_draws_the_requested_model():
    cfg = MHSAConfig.uniform(120, 120, target="attention", beta=1.0)
    fam = MHSAFamily(cfg)
    soft = fam.sample({"beta": 1.0}, np.random.default_rng(3), model="softmax")
    sur = fam.sample({"beta": 1.0}, np.random.default_rng(3), model="surrogate")
    ref = simulate(cfg, seed=int(np.random.default_rng(3).integers(2 ** 62)), models=("softmax", "surrogate"))
    np.testing.assert_allclose(soft, ref.softmax.ravel())
    np.testing.assert_allclose(sur, ref.surrogate.ravel())


def test_softmax_bootstrap_covers_and_accepts_where_surrogate_bootstrap_fails():
    """beta = 1.3, l = d = 300: the law fitted to a softmax spectrum is ~5% low. The surrogate bootstrap gives a
    narrow interval around that offset and its GOF test rejects the spectrum of its own family; the softmax
    bootstrap corrects the offset, covers beta and does not reject."""
    cfg, eigs = _softmax(1.3)
    sur = identify(eigs, cfg.replace(beta=1.0), n_boot=19, seed=2, model="surrogate")
    soft = identify(eigs, cfg.replace(beta=1.0), n_boot=19, seed=2, model="softmax")
    es, ef = sur.estimates["beta"], soft.estimates["beta"]
    assert es["best_fit"] == ef["best_fit"] < 1.26                 # same fit, biased low
    assert es["ci_high"] < 1.3                                      # surrogate interval misses
    assert ef["ci_low"] < 1.3 < ef["ci_high"] and abs(ef["estimate"] - 1.3) < 0.02
    assert sur.gof["p_value"] <= 0.05 < 0.2 < soft.gof["p_value"]
    assert soft.model == "softmax" and soft.to_dict()["bootstrap_model"] == "softmax"
    assert ef["simulated_at"] > ef["best_fit"]                      # simulated at the pilot-corrected point
    assert "softmax spectra" in soft.summary()


def test_joint_beta_psi_fit_on_law_tables_corrects_the_width_offset():
    """Joint (beta, psi) fit to a softmax attention spectrum (beta = psi = 1): the law alone puts psi near 0.7;
    the two-stage softmax bootstrap's interval covers 1."""
    cfg, eigs = _softmax(1.0, seed=7)
    res = identify(eigs, cfg, free=("beta", "psi"), n_boot=9, seed=1)
    b, p = res.estimates["beta"], res.estimates["psi"]
    assert p["best_fit"] < 0.8
    assert p["ci_low"] < 1.0 < p["ci_high"] and b["ci_low"] < 1.0 < b["ci_high"]
    assert res.timing["law_solves"] >= 49 + 81 and "tabulated" in res.family
    assert res.gof["p_value"] > 0.1
    json.dumps(res.to_dict())


def test_cli_identify_model_flag(tmp_path, capsys):
    from attnspec.cli import main

    cfg = MHSAConfig.uniform(150, 150, target="attention", beta=0.8)
    sim = simulate(cfg, seed=4)
    (tmp_path / "s.json").write_text(json.dumps({"config": cfg.to_dict(),
                                                 "softmax_eigenvalues": sim.softmax.ravel().tolist(),
                                                 "surrogate_eigenvalues": sim.surrogate.ravel().tolist()}))
    for model in ("softmax", "surrogate"):
        assert main(["identify", str(tmp_path / "s.json"), "--model", model, "--boot", "5", "--no-progress",
                     "--json", str(tmp_path / f"{model}.json")]) == 0
        out = json.loads((tmp_path / f"{model}.json").read_text())
        assert out["bootstrap_model"] == model and abs(out["estimates"]["beta"]["estimate"] - 0.8) < 0.05
        assert f"{model} spectra" in capsys.readouterr().out
