"""``attnspec law`` and ``attnspec figures`` command lines."""
import json

import pytest

from attnspec.cli import main


def test_law_json_and_plot(tmp_path, capsys):
    js, png = tmp_path / "law.json", tmp_path / "law.png"
    rc = main(["law", "--seq-len", "400", "--d-model", "400", "--heads", "4", "--beta", "1", "--kv-groups", "2",
               "--json", str(js), "--plot", str(png)])
    assert rc == 0 and png.stat().st_size > 1000
    d = json.loads(js.read_text())
    for key in ("moments", "right_edge", "atom_at_zero", "grid", "density"):
        assert key in d
    assert d["moments"][1] == pytest.approx(10.5956, rel=1e-4) and d["right_edge"] == pytest.approx(14.816, rel=1e-4)
    assert "10.5956" in capsys.readouterr().out


def test_law_attention_target_and_tying(tmp_path):
    js = tmp_path / "a.json"
    assert main(["law", "--target", "attention", "--beta", "0.5", "--json", str(js)]) == 0
    assert json.loads(js.read_text())["moments"][0] == pytest.approx(0.2840254167, rel=1e-8)
    assert main(["law", "--heads", "1", "--tie-values-to-keys", "--json", str(js)]) == 0
    assert json.loads(js.read_text())["moments"][0] == pytest.approx(2.7182818285, rel=1e-8)
    assert main(["law", "--heads", "1", "--key-dependent-values", "0.5", "--input", "gaussian", "--d-model", "200",
                 "--seq-len", "100", "--json", str(js)]) == 0


@pytest.mark.slow
def test_figures_quick(tmp_path):
    assert main(["figures", "--quick", "--out", str(tmp_path), "--no-progress"]) == 0
    res = json.loads((tmp_path / "figures.json").read_text())
    for name in ("law_vs_montecarlo", "edge_vs_beta", "sharing", "tying"):
        assert (tmp_path / res[name]["figure"]).stat().st_size > 1000
    assert res["tying"]["tied W_V = W_K"]["law_moments"][0] == pytest.approx(5.71828, rel=1e-5)
    assert res["sharing"]["MQA"]["law_max_rel_moment_change"] < 1e-9
