"""Spectra on a seeded sample of the texts (``spectra_texts``): the spectral columns come from the sampled texts
exactly as a diagnosis of those texts alone gives them, every other statistic from the whole corpus, and the
sample does not depend on how the texts are batched."""
import copy
import numpy as np
import pytest
import torch
import transformers

from attnspec.data import builtin_texts
from attnspec.diagnostics import DiagnoseOptions, OptionError, diagnose
from attnspec.diagnostics.pipeline.removal_plan import sample_texts
from attnspec.models import load_model

torch.set_num_threads(1)

N = 20
SPECTRAL = ("spec_w1", "spec_w1_rel", "spec_ks", "spec_m1", "spec_m1_ge", "null_w1_rel", "selection_score",
            "removal_spec_shift", "removal_spec_shift_ge")
WHOLE_CORPUS = ("score_scale", "beta_hat", "alpha_hat", "r2", "beta_hat_lo", "beta_hat_hi", "cka_mean", "cka_max",
                "cka_null_mean", "cka_excess", "cka_excess_lo", "cka_excess_hi", "energy_share", "entropy_ratio",
                "query_selection_score", "query_selection_score_lo")


@pytest.fixture(scope="module")
def model_tok():
    tok = load_model("minilm")[1]
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64,
                                  num_attention_heads=4, num_hidden_layers=2, max_position_embeddings=160)
    return transformers.BertModel(cfg).eval(), tok


def _run(model_tok, texts, seed=1, **kw):
    model, tok = model_tok
    return diagnose(model, tok, texts, removal=False, gradient=False, seed=seed, min_tokens=0, **kw)


@pytest.fixture(scope="module")
def runs(model_tok):
    texts = builtin_texts(N)
    return {"all": _run(model_tok, texts, spectra_texts="all"), "sample": _run(model_tok, texts, spectra_texts=8),
            "rebatched": _run(model_tok, texts, spectra_texts=8, bucket_size=3)}


def test_the_spectra_come_from_the_seeded_sample_and_the_rest_from_every_text(runs, model_tok):
    full, sample = runs["all"], runs["sample"]
    assert (full.summary["spectra_texts"]["texts_used"], sample.summary["spectra_texts"]["texts_used"]) == (N, 8)
    for col in WHOLE_CORPUS:
        assert np.array_equal(full.heads[col].to_numpy(), sample.heads[col].to_numpy(), equal_nan=True), col
    numeric = [c for c in full.pairs.columns if full.pairs[c].dtype.kind in "fi"]
    assert np.array_equal(full.pairs[numeric].to_numpy(), sample.pairs[numeric].to_numpy(), equal_nan=True)
    assert not np.allclose(full.heads["spec_w1_rel"], sample.heads["spec_w1_rel"])
    # the layer's own spectrum is that of the 8 sampled texts diagnosed alone, but for its normalization (the
    # value-path power of the texts diagnosed)
    chosen = [builtin_texts(N)[t] for t in sorted(sample_texts(N, 8, seed=1))]
    alone = _run(model_tok, chosen, spectra_texts="all")
    for layer, spectra in alone.spectra.items():
        x, y = sample.spectra[layer]["actual"], spectra["actual"]
        assert x.shape == y.shape and np.allclose(x * (y.sum() / x.sum()), y, rtol=1e-5, atol=1e-6 * y.max())
    # the paired-comparison material still names every text of the corpus
    assert sample.replicate_meta["text_ids"].tolist() == list(range(N))


def test_the_sample_does_not_depend_on_the_batches(runs):
    """Other buckets, the same sampled texts: the same pooled spectra (float32 rounding apart; the relative
    distances between a random head's nearly equal spectra amplify that rounding, with or without a sample)."""
    a, b = runs["sample"], runs["rebatched"]
    for layer, spectra in a.spectra.items():
        for name, x in spectra.items():
            assert np.allclose(x, b.spectra[layer][name], rtol=1e-4, atol=1e-5 * x.max()), (layer, name)
    for col in ("spec_ks", "spec_m1", "spec_m1_ge", "removal_spec_shift") + WHOLE_CORPUS:
        assert np.allclose(a.heads[col], b.heads[col], rtol=1e-4, atol=1e-6, equal_nan=True), col


def test_auto_grows_the_sample_in_stages_to_the_same_tables_as_one_sample_of_that_size(model_tok, monkeypatch):
    """'auto' on 160 texts of the random model (heads of width 8): its floor of 2,048 eigenvalues a head spectrum
    takes every text. Without the floor, from a first stage of a fifth of the corpus and with a target no head may
    miss, a second stage adds the texts its open heads are predicted to need, and the tables equal those of one sample of that
    size (the same texts, the spectra of the second stage's texts added to the first's). Seed and reference seed 2: draws with which
    a head stays open after the first stage and the second stage stays below the corpus (of seeds 0-7, 4 and 6
    decide every head on 32 texts, 0 and 5 take every text). The model runs
    in float64: a later stage computes its texts in batches cut to them, whose float32 row reductions over fewer
    padded keys may round a surrogate weight one ulp apart (4 of 392 tiles in float32), and the distances between a
    random head's nearly equal spectra magnify that to 1e-4 relative."""
    from attnspec.diagnostics.pipeline import spectra_plan
    model_tok = (copy.deepcopy(model_tok[0]).double(), model_tok[1])
    texts = builtin_texts(160)
    assert _run(model_tok, texts).summary["spectra_texts"]["rule"] == "all"        # 8 eigenvalues a text
    monkeypatch.setattr(spectra_plan, "MIN_EIGENVALUES", 0)
    monkeypatch.setattr(spectra_plan, "TARGET", 1.0)
    monkeypatch.setattr(spectra_plan, "FIRST_SHARE", 0.2)
    auto = _run(model_tok, texts, seed=2, reference_seed=2)
    plan = auto.summary["spectra_texts"]
    assert plan["rule"] == "auto" and plan["stages"][0] == 32 and len(plan["stages"]) == 2, plan
    n = plan["stages"][1]
    assert 32 < n < 160 and plan["predicted_agreement"] == 1.0, plan
    assert any(f"from a seeded sample of {n} of the 160 texts" in note for note in auto.summary["notes"])
    fixed = _run(model_tok, texts, seed=2, reference_seed=2, spectra_texts=n)
    numeric = [c for c in auto.heads.columns if auto.heads[c].dtype.kind in "fi"]
    assert np.allclose(auto.heads[numeric].to_numpy(float), fixed.heads[numeric].to_numpy(float), rtol=1e-6,
                       atol=1e-9, equal_nan=True)
    assert (auto.heads["selection"] == fixed.heads["selection"]).all()
    # a corpus no larger than the first stage takes every text
    assert _run(model_tok, texts[:30]).summary["spectra_texts"]["rule"] == "all"


def test_spectra_texts_is_checked_and_covers_the_interval_minimum():
    with pytest.raises(OptionError, match="spectra_texts must be an integer >= 8 or one of 'auto', 'all', got 7"):
        DiagnoseOptions(spectra_texts=7)
    assert DiagnoseOptions().spectra_texts == "auto" and DiagnoseOptions(spectra_texts="all").spectra_texts == "all"
