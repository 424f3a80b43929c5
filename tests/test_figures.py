"""attnspec.figures: files are written and what is drawn is the data (law densities, histogram densities, sweep
means), checked on the matplotlib artists rather than on pixels."""
import json

import numpy as np
import pandas as pd
import pytest

from attnspec.cli import main
from attnspec.config import MHSAConfig
from attnspec.figures import law_label, plot_law, plot_spectra, png_data_uri, pyplot, save_figure
from attnspec.figures.diagnosis import interval_figure, layer_spectra_figure
from attnspec.figures.reproduce import _density_panel
from attnspec.figures.sweeps import plot_sweep, sweep_plot
from attnspec.reproduce import hayase2025
from attnspec.simulation import simulate
from attnspec.theory import solve_law


@pytest.fixture(scope="module")
def law4():
    return solve_law(MHSAConfig.uniform(200, 200, heads=4, beta=1.0))


@pytest.fixture(scope="module")
def law_atom():      # d_out < l: an atom at zero (1 - 3/4 = 1/4) and a left edge
    return solve_law(MHSAConfig.uniform(400, 400, heads=1, d_out=300, beta=0.5))


@pytest.fixture(autouse=True)
def _close_all():
    yield
    pyplot().close("all")


def test_law_alone_draws_its_density_edges_and_moments(law4, law_atom):
    ax = plot_law(law4)
    x, y = ax.lines[0].get_data()
    np.testing.assert_array_equal(x, law4.grid)
    np.testing.assert_array_equal(y, law4.density)
    assert ax.lines[1].get_xdata()[0] == law4.right_edge                 # the right edge, dotted
    assert ax.get_xlim() == pytest.approx((0, 1.05 * law4.right_edge))
    assert f"{law4.moments[1]:.5g}" in ax.get_title() and law4.config.describe() in ax.get_title()
    assert ax.get_legend().get_texts()[0].get_text() == law_label(law4) == f"law (edge {law4.right_edge:.4g})"
    ax = plot_law(law_atom)
    assert law_atom.atom_at_zero == pytest.approx(0.25) and law_atom.left_edge is not None
    assert [line.get_xdata()[0] for line in ax.lines[1:]] == [law_atom.right_edge, law_atom.left_edge]
    assert "atom 0.250" in ax.get_legend().get_texts()[0].get_text()


def test_law_over_samples_histograms_normalized_to_the_whole_sample(law4):
    sim = simulate(law4.config, seed=0)
    ax = plot_law(law4, None, {"softmax": sim.softmax, "surrogate": sim.surrogate}, bins=40, title="t")
    top = ax.get_xlim()[1]
    assert top == pytest.approx(1.05 * max(np.quantile(np.concatenate([sim.softmax.ravel(), sim.surrogate.ravel()]),
                                                        0.999), law4.right_edge))
    stairs = ax.patches
    assert len(stairs) == 2
    for patch, x in zip(stairs, (sim.softmax.ravel(), sim.surrogate.ravel())):
        values, edges, _ = patch.get_data()
        nonzero = x[x > 1e-9 * x.max()]     # numerical zeros (the atom) are left out, as the figure does
        expected = np.histogram(nonzero, bins=np.linspace(0, top, 41))[0] / (x.size * (top / 40))
        np.testing.assert_allclose(values, expected, rtol=1e-12)
        np.testing.assert_allclose(edges, np.linspace(0, top, 41))
    lx, ly = ax.lines[-1].get_data()
    keep = law4.grid <= top
    np.testing.assert_array_equal(lx, law4.grid[keep])
    np.testing.assert_array_equal(ly, law4.density[keep])
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    # token centering leaves one zero eigenvalue in 200: an atom of 0.005, reported in the legend
    assert labels == ["softmax (n=200, atom 0.005)", "surrogate (n=200, atom 0.005)", law_label(law4)]
    assert ax.get_title() == "t"


def test_law_as_a_bare_line_and_spectra_without_law(law4):
    fig, ax = pyplot().subplots()
    plot_law(law4, ax, label="mine", frame=False, color="red")
    assert len(ax.lines) == 1 and ax.get_title() == "" and ax.get_legend() is None
    assert ax.lines[0].get_label() == "mine" and ax.lines[0].get_color() == "red"
    x = np.concatenate([np.zeros(50), np.random.default_rng(0).exponential(size=150)])
    ax = plot_spectra(None, {"sample": x})
    assert ax.get_legend().get_texts()[0].get_text() == "sample (n=200, atom 0.250, 1 beyond plot)"
    assert not ax.lines                                              # no law, no line


def test_save_figure_writes_atomically_and_inline_png(tmp_path):
    fig, ax = pyplot().subplots()
    ax.plot([0, 1], [1, 0])
    path = save_figure(fig, tmp_path / "sub" / "f.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and sorted(p.name for p in path.parent.iterdir()) == ["f.png"]
    fig, ax = pyplot().subplots()
    assert png_data_uri(fig).startswith("data:image/png;base64,iVBOR")


def test_sweep_plot_draws_the_means_per_axis_value(tmp_path):
    df = pd.DataFrame({"tag.beta": [0.5, 0.5, 1.0], "law.m2": [1.0, 1.0, 3.0], "softmax.m2": [1.0, 2.0, 4.0]})
    path = sweep_plot(df, "tag.beta", ["law.m2", "softmax.m2", "missing"], "s", tmp_path / "p.png")
    assert path.stat().st_size > 1000
    ax = plot_sweep(pyplot().subplots()[1], df, "tag.beta", ["law.m2", "softmax.m2", "missing"], "s")
    assert [line.get_label() for line in ax.lines] == ["law.m2", "softmax.m2"]
    np.testing.assert_array_equal(ax.lines[1].get_xdata(), [0.5, 1.0])
    np.testing.assert_array_equal(ax.lines[1].get_ydata(), [1.5, 4.0])
    assert ax.lines[0].get_marker() == "None" and ax.lines[1].get_marker() == "o"   # law: a line; MC: markers


def test_layer_spectra_panels_are_density_histograms():
    rng = np.random.default_rng(1)
    spectra = {k: {"actual": rng.exponential(size=300), "gaussian_equivalent": rng.exponential(size=300),
                   "free_sum": np.array([])} for k in range(4)}
    fig = layer_spectra_figure(spectra)
    axes = fig.axes
    assert [a.get_title() for a in axes[:4]] == [f"layer {k}" for k in range(4)] and len(axes) == 6
    assert not axes[4].axison and not axes[5].axison                  # two empty panels switched off
    assert len(axes[0].patches) == 2                                   # empty free sum: nothing drawn
    step = axes[0].patches[1].get_xy()                                 # the actual spectrum, drawn last
    pos = np.concatenate([spectra[0]["actual"], spectra[0]["gaussian_equivalent"]])
    bins = np.logspace(np.log10(np.quantile(pos, 0.005)), np.log10(pos.max()), 40)
    np.testing.assert_allclose(step[1:-1:2, 1][:39], np.histogram(spectra[0]["actual"], bins=bins, density=True)[0])
    np.testing.assert_allclose(np.unique(step[:, 0]), bins)
    assert [t.get_text() for t in axes[0].get_legend().get_texts()] == ["gaussian equivalent", "actual"]


def test_interval_figure_points_and_bars_are_the_table():
    h = pd.DataFrame({"layer": [0, 0, 1], "selection": ["selective", "diffuse", "undetermined"],
                      "selection_score": [1.2, -0.1, 0.3], "selection_score_lo": [0.9, -0.3, np.nan],
                      "selection_score_hi": [1.5, 0.1, np.nan], "beta_hat": [1.5, 0.4, 0.8],
                      "beta_hat_lo": [1.3, 0.3, 0.6], "beta_hat_hi": [1.7, 0.5, 1.0], "score_scale": [1.0, 1.0, 1.0],
                      "beta_null": [0.7, 0.7, 0.7]})
    top, bottom = interval_figure(h, 0.69).axes
    np.testing.assert_array_equal(top.collections[1].get_offsets()[:, 1], h["selection_score"])
    segments = top.collections[0].get_segments()          # NaN bounds: a bar of zero length at the point
    assert [tuple(seg[:, 1]) for seg in segments] == [(0.9, 1.5), (-0.3, 0.1), (0.3, 0.3)]
    assert top.lines[0].get_ydata()[0] == 0.69                            # the threshold
    np.testing.assert_array_equal(bottom.collections[1].get_offsets()[:, 1], h["beta_hat"])
    assert bottom.get_yscale() == "log" and [t.get_text() for t in bottom.get_legend().get_texts()] == [
        "score scale", "random head (beta_null)"]


def test_hayase_panel_draws_the_law_and_the_histograms(tmp_path):
    r = hayase2025(d=64, draws=1)
    hist = r.histogram()
    fig, ax = pyplot().subplots()
    _density_panel(ax, r, hist)
    law_line = next(line for line in ax.lines if line.get_label().startswith("Gaussian-equivalent law"))
    np.testing.assert_array_equal(law_line.get_ydata(), r.law.density)
    np.testing.assert_array_equal(ax.patches[0].get_data()[0], hist["softmax"])
    paths = r.write(tmp_path)
    assert [p.name for p in paths] == ["hayase2025.png", "hayase2025.json", "hayase2025.csv"]


def test_demo_figures_and_summary(tmp_path, capsys):
    assert main(["demo", "--skip-diagnosis", "--d", "64", "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())["law_vs_simulation"]
    assert list(summary) == ["attention_matrix", "four_heads", "four_heads_tied"]
    for name, r in summary.items():
        assert r["figure"] == f"figures/{name}.png" and (tmp_path / r["figure"]).stat().st_size > 10_000
    assert summary["four_heads_tied"]["law_moments"][0] == pytest.approx(5.718281828, rel=1e-6)
    assert "four_heads_tied" in capsys.readouterr().out
