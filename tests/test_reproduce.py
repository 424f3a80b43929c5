"""``attnspec reproduce hayase2025``: the bulk of sqrt(d) A against the Gaussian-equivalent law and Marchenko-Pastur.

Reduced size (d = 200, 2 draws) in the default suite; the published size (d = 1000, 10 draws) is slow-marked."""
import csv
import json

import numpy as np
import pytest

from attnspec.cli import main
from attnspec.reproduce import STUDIES, hayase2025
from attnspec.reproduce.hayase2025 import attention_config, squared_singular_values
from attnspec.simulation import simulate
from attnspec.spectra import ks_to_cdf
from attnspec.theory import closed_forms as cf
from attnspec.theory import solve_law


@pytest.fixture(scope="module")
def small():
    return hayase2025(d=200, draws=2, seed=0)


def test_reduced_size_numbers_side_with_the_law(small):
    s = small.summary
    assert s["law"]["right_edge"] == pytest.approx(cf.attention_edge(1.0, 1.0, 1.0), rel=1e-6)
    assert s["marchenko_pastur"]["right_edge"] == pytest.approx(cf.mp_edge(1.0))
    lin, soft = s["linear"], s["softmax"]
    # the linear model sampled on the same draws follows the law closely, and MP not at all
    assert lin["ks_to_law"] < 0.03 and lin["ks_to_mp"] > 0.045 and lin["w1_to_law"] < 0.4 * lin["w1_to_mp"]
    # softmax, at this small d, is still clearly closer to the law than to MP
    assert soft["ks_to_law"] < 0.75 * soft["ks_to_mp"] and soft["w1_to_law"] < 0.75 * soft["w1_to_mp"]
    # the law of the wrong input convention (iid Gaussian inputs, edge 14.06) is far from the linear model's bulk
    wrong = solve_law(attention_config(200, 1.0, "gaussian"))
    assert ks_to_cdf(small.bulk["linear"], wrong.cdf) > 2 * lin["ks_to_law"]
    # removed: the rank-one mean (squared singular value about d) first, then values above the bulk
    for name in ("softmax", "linear"):
        top = s[name]["removed_mean"]
        assert len(top) == 3 and 0.9 * 200 < top[0] < 1.1 * 200 and top[1] >= top[2] >= s[name]["bulk_max_mean"]
    assert small.bulk["softmax"].shape == (2, 197) and small.removed["linear"].shape == (2, 3)


def test_uncentered_spectrum_is_the_simulators_plus_the_mean():
    # same seeds as attnspec.simulation.simulate: sqrt(d) A and Y = sqrt(l)(A - 1 1^T/l) differ by the rank-one
    # mean, orthogonal to Y for softmax (rows of A sum to 1), so sum of squared singular values = tr(Y Y^T) + l;
    # (the linear model's rows do not sum to 1, so its spectrum is checked by the distances above); seeds matter
    cfg = attention_config(64, 1.0)
    ours = squared_singular_values(cfg, seed=3, draws=2)
    sim = simulate(cfg, seed=3, draws=2)
    np.testing.assert_allclose(ours["softmax"].sum(axis=1), sim.softmax.sum(axis=1) + 64, rtol=1e-10)
    assert not np.allclose(ours["linear"].sum(axis=1), ours["softmax"].sum(axis=1))
    ours_other = squared_singular_values(cfg, seed=4, draws=2)
    assert not np.allclose(ours_other["softmax"], ours["softmax"])


def test_histogram_masses(small):
    h = small.histogram(bins=50)
    width = h["bin_hi"] - h["bin_lo"]
    for name in ("softmax", "linear", "law", "marchenko_pastur"):
        assert np.sum(h[name] * width) == pytest.approx(1.0, abs=1e-6), name


def test_marchenko_pastur_closed_forms():
    x = np.linspace(0.01, 4 * 1.7 - 0.01, 7)
    np.testing.assert_allclose(cf.marchenko_pastur_quantile(cf.marchenko_pastur_cdf(x, 1.7), 1.7), x, rtol=1e-8)
    grid = np.linspace(0.0, 4 * 1.7, 200001)
    F = np.concatenate([[0.0], np.cumsum(np.diff(grid) * cf.marchenko_pastur_density(0.5 * (grid[1:] + grid[:-1]), 1.7))])
    assert np.max(np.abs(F - cf.marchenko_pastur_cdf(grid, 1.7))) < 2e-3   # midpoint rule vs the x^(-1/2) head
    np.testing.assert_allclose(cf.marchenko_pastur_moments(1.0, 2, 1.7),
                               [np.trapezoid(grid * np.gradient(cf.marchenko_pastur_cdf(grid, 1.7), grid), grid),
                                2 * 1.7 ** 2], rtol=1e-3)
    with pytest.raises(ValueError, match="scale"):
        cf.marchenko_pastur_cdf(1.0, scale=0.0)


@pytest.mark.parametrize("kw,name", [(dict(d=8), "d"), (dict(beta=0.0), "beta"), (dict(draws=0), "draws"),
                                     (dict(n_remove=100), "n_remove"), (dict(seed=-1), "seed"),
                                     (dict(inputs="uniform"), "inputs")])
def test_bad_parameters_name_themselves(kw, name):
    with pytest.raises(ValueError, match=f"^{name} must"):
        hayase2025(**{"d": 64, **kw})


def test_cli_writes_figure_json_csv_and_prints_numbers(tmp_path, capsys):
    assert "hayase2025" in STUDIES
    out = tmp_path / "rep"
    assert main(["reproduce", "hayase2025", "--d", "96", "--draws", "2", "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "sqrt(d) A" in printed and "linear model" in printed and "KS law" in printed and "9.0095" in printed
    png = (out / "hayase2025.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    summary = json.loads((out / "hayase2025.json").read_text())
    assert summary["d"] == 96 and summary["draws"] == 2 and summary["n_remove"] == 3
    assert set(summary["softmax"]) >= {"w1_to_law", "ks_to_law", "w1_to_mp", "ks_to_mp", "removed_mean"}
    rows = list(csv.DictReader((out / "hayase2025.csv").open()))
    assert len(rows) == 80 and set(rows[0]) == {"bin_lo", "bin_hi", "softmax", "linear", "law", "marchenko_pastur"}
    assert main(["reproduce", "hayase2025", "--draws", "0", "--out", str(out)]) == 2


@pytest.mark.slow
def test_published_size():
    r = hayase2025()
    s = r.summary
    soft, lin = s["softmax"], s["linear"]
    assert soft["ks_to_law"] < 0.025 and soft["w1_to_law"] < 0.06 and soft["ks_to_mp"] > 0.05
    assert lin["ks_to_law"] < 0.006 and lin["w1_to_law"] < 0.025
    # the bulk reaches the law's edge (9.01), far beyond Marchenko-Pastur's (6.87)
    assert soft["bulk_max_mean"] == pytest.approx(s["law"]["right_edge"], rel=0.03)
    assert soft["beyond_mp_edge"] > 100
