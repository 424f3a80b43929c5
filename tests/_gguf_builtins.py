"""Checks shared by the tests of the GGUF built-in language models (``test_models_qwen.py``,
``test_models_smollm2.py``): the diagnosis of two short texts, and the cached safetensors copy's config,
tokenizer and weights."""
from __future__ import annotations

import math


def check_small_diagnosis(model, tok, n_layers: int, n_heads: int) -> None:
    """Two built-in texts, removal off: one finite row per head, the GQA note, the model left unchanged."""
    import torch

    import attnspec
    from attnspec.data import builtin_texts
    before = {k: v.clone() for k, v in list(model.state_dict().items())[:12]}
    d = attnspec.diagnose(model, tok, builtin_texts(2), removal=False, gradient=False, min_tokens=0)
    h = d.heads
    assert len(h) == n_layers * n_heads
    assert not h["score_scale"].isna().any() and not h["beta_hat"].isna().any()
    assert all(math.isfinite(x) and x > 0 for x in h["score_scale"])
    assert any("grouped-query" in n for n in d.summary["notes"])
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())


def check_cached_copy(target, model_type: str, architecture: str, n_layers: int, n_heads: int, n_kv: int,
                      d_head: int, width: int, vocab: int):
    """The copy's config (architecture, heads, width, vocabulary, no quantization), its tokenizer's size and its
    float32 attention weights; returns ``(config, tokenizer, weight names)`` for the model's own checks."""
    import transformers
    from safetensors import safe_open
    cfg = transformers.AutoConfig.from_pretrained(target, local_files_only=True)
    assert cfg.model_type == model_type and cfg.architectures == [architecture]
    assert (cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads) == (n_layers, n_heads, n_kv)
    assert cfg.hidden_size == width and cfg.vocab_size == vocab
    assert not getattr(cfg, "quantization_config", None)
    tok = transformers.AutoTokenizer.from_pretrained(target, local_files_only=True)
    assert len(tok) == cfg.vocab_size
    with safe_open(str(target / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
        assert f.get_slice("model.layers.0.self_attn.k_proj.weight").get_shape() == [n_kv * d_head, width]
        assert f.get_slice("model.layers.0.self_attn.q_proj.weight").get_shape() == [n_heads * d_head, width]
        assert f.get_slice("model.embed_tokens.weight").get_dtype() == "F32"
    return cfg, tok, keys
