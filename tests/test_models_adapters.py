"""Adapters on small random models of every supported family: hooks reproduce the layer output,
exact removal with activation reuse equals one full forward pass per head, the model is untouched."""
import pytest
import torch
from torch import nn

transformers = pytest.importorskip("transformers")

from attnspec.models import (AdapterError, FunctionalMetric, HeadEdit, ablate, adapt, capture, exact_removal,  # noqa: E402
                             config_of)


def _tiny(family):
    torch.manual_seed(0)
    common = dict(vocab_size=97, attn_implementation="eager")
    if family == "gpt2":
        cfg = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=64, **common)
        return transformers.GPT2LMHeadModel(cfg).eval()
    if family == "llama":
        cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, **common)
        return transformers.LlamaForCausalLM(cfg).eval()
    if family == "qwen2":
        cfg = transformers.Qwen2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=1, **common)
        return transformers.Qwen2ForCausalLM(cfg).eval()
    if family == "mistral":  # window 4 < the batch's 9 tokens: the window binds
        cfg = transformers.MistralConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, sliding_window=4, **common)
        return transformers.MistralForCausalLM(cfg).eval()
    if family == "gemma3":
        cfg = transformers.Gemma3TextConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                            num_attention_heads=4, num_key_value_heads=1, head_dim=8,
                                            sliding_window=4, layer_types=["sliding_attention", "sliding_attention",
                                                                           "full_attention"], **common)
        return transformers.Gemma3ForCausalLM(cfg).eval()
    if family == "bert":
        cfg = transformers.BertConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, **common)
        return transformers.BertModel(cfg).eval()
    raise ValueError(family)


def _batch(B=3, L=9, pad=True):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 97, (B, L), generator=g)
    mask = torch.ones(B, L, dtype=torch.long)
    if pad:
        mask[1, 6:] = 0
        mask[2, 4:] = 0
    return {"input_ids": ids, "attention_mask": mask, "special": torch.zeros(B, L, dtype=torch.bool),
            "order": list(range(B))}


FAMILIES = ["bert", "gpt2", "llama", "qwen2", "mistral", "gemma3"]


@pytest.mark.parametrize("family", FAMILIES)
def test_contexts_reproduce_layer_output(family):
    model = _tiny(family)
    ad = adapt(model)
    b = _batch()
    outs = {}
    hooks = [s.out_proj.register_forward_hook(lambda m, a, o, i=i: outs.__setitem__(i, o)) for i, s in enumerate(ad.sites)]
    with torch.no_grad(), capture(ad.sites) as cap:
        ad.run(b)
    for h in hooks:
        h.remove()
    for i, s in enumerate(ad.sites):
        C = cap.contexts[i]
        bias = s.out_proj.bias if getattr(s.out_proj, "bias", None) is not None else 0
        torch.testing.assert_close(C @ s.w_out() + bias, outs[i], atol=1e-5, rtol=1e-5)
        A, V = cap.weights[i], cap.values[i]
        groups = torch.tensor([s.kv_group(h) for h in range(s.n_heads)])
        ctx = (A @ V[:, groups]).transpose(1, 2).reshape(C.shape)
        torch.testing.assert_close(ctx, C, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_reuse_removal_equals_naive(family):
    model = _tiny(family)
    ad = adapt(model)
    assert ad.can_reuse
    b = _batch()
    last = {}
    hk = ad.sites[-1].block.register_forward_hook(lambda m, a, o: last.__setitem__("h", o[0] if isinstance(o, tuple) else o))
    with torch.inference_mode(), capture(ad.sites, blocks=True) as cap:
        ad.run_base(b)
    hk.remove()
    metric = FunctionalMetric(ad, b, ad.tail)
    with torch.inference_mode():
        metric.reference(last["h"], from_hidden=True)
    fast, n1 = exact_removal(ad, b, cap.block_inputs, metric, reuse=True)
    # naive: full model forward per head, metric from the model's own output
    ref = FunctionalMetric(ad, b, ad.tail)
    with torch.inference_mode():
        ref.reference(ad.run(b), from_hidden=False)
    slow, n2 = exact_removal(ad, b, None, ref, reuse=False)
    torch.testing.assert_close(torch.tensor(fast / n1), torch.tensor(slow / n2), atol=2e-5, rtol=1e-4)
    assert (abs(fast) > 0).all()


def test_gqa_and_window_geometry():
    ad = adapt(_tiny("gemma3"))
    assert [s.n_kv_heads for s in ad.sites] == [1, 1, 1]
    assert [s.window for s in ad.sites][:2] == [4, 4] and ad.sites[2].window is None
    assert all(s.causal for s in ad.sites)
    cfg = config_of(ad.sites[0], seq_len=16)
    assert cfg.key_groups == cfg.value_groups == 1 and cfg.n_heads == 4
    allowed = ad.sites[0].allowed(torch.ones(1, 8))
    assert allowed[0, 7].tolist() == [False] * 4 + [True] * 4  # window of 4, causal


def test_mistral_window_from_config():
    """Mistral keeps its window on the config only (not on the attention module)."""
    ad = adapt(_tiny("mistral"))
    assert [s.window for s in ad.sites] == [4, 4] and all(s.causal for s in ad.sites)
    b = _batch()
    with torch.no_grad(), capture(ad.sites) as cap:
        ad.run(b)
    for i, s in enumerate(ad.sites):
        want = s.allowed(b["attention_mask"])
        assert torch.equal(cap.allowed[i] & b["attention_mask"].bool()[:, :, None], want)


def test_zeroing_head_equals_manual_bert():
    model = _tiny("bert")
    ad = adapt(model)
    b = _batch(pad=False)
    layer = model.encoder.layer[0]
    got = {}
    hk = layer.attention.register_forward_hook(lambda m, a, o: got.__setitem__("out", o[0] if isinstance(o, tuple) else o))
    with torch.no_grad(), capture(ad.sites, blocks=True) as cap:
        ad.run(b)
    with torch.no_grad(), ablate(ad.sites[0], HeadEdit([2])):
        ad.run(b)
    hk.remove()
    C = cap.contexts[0].clone()
    C.view(*C.shape[:2], 4, 8)[:, :, 2] = 0
    x = cap.block_inputs[0][0][0]
    with torch.no_grad():
        manual = layer.attention.output.LayerNorm(C @ ad.sites[0].w_out() + layer.attention.output.dense.bias + x)
    torch.testing.assert_close(got["out"], manual, atol=1e-6, rtol=1e-6)


class _Custom(nn.Module):
    attnspec_protocol = 1

    def __init__(self, d=16, H=4):
        super().__init__()
        self.n_heads, self.head_dim = H, d // H
        self.qkv = nn.Linear(d, 3 * d)
        self.out_proj = nn.Linear(d, d)
        self.attn_probe, self.value_probe = nn.Identity(), nn.Identity()

    def forward(self, x, key_padding_mask=None):
        B, L, _ = x.shape
        q, k, v = self.qkv(x).view(B, L, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        s = q @ k.transpose(-1, -2) / self.head_dim ** 0.5
        if key_padding_mask is not None:
            s = s.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
        A = self.attn_probe(s.softmax(-1))
        v = self.value_probe(v)
        return self.out_proj((A @ v).transpose(1, 2).reshape(B, L, -1))


class _MHAModel(nn.Module):
    def __init__(self, d=16, H=4):
        super().__init__()
        self.att = nn.MultiheadAttention(d, H, batch_first=True)

    def forward(self, x):
        return self.att(x, x, x, need_weights=False)[0]


@pytest.mark.parametrize("kind", ["custom", "mha"])
def test_generic_modules(kind):
    torch.manual_seed(0)
    model = (_Custom() if kind == "custom" else _MHAModel()).eval()
    ad = adapt(model)
    assert len(ad.sites) == 1 and ad.kind == "generic"
    x = torch.randn(2, 7, 16)
    with torch.no_grad(), capture(ad.sites) as cap:
        y = model(x)
    s = ad.sites[0]
    torch.testing.assert_close(cap.contexts[0] @ s.w_out() + s.out_proj.bias, y, atol=1e-5, rtol=1e-5)
    with torch.no_grad(), ablate(s, HeadEdit([1])):
        y1 = model(x)
    C = cap.contexts[0].clone()
    C.view(2, 7, 4, 4)[:, :, 1] = 0
    torch.testing.assert_close(y1, C @ s.w_out() + s.out_proj.bias, atol=1e-5, rtol=1e-5)


def test_no_attention_raises():
    with pytest.raises(AdapterError, match="no supported attention"):
        adapt(nn.Sequential(nn.Linear(3, 3)))


def test_per_block_protocol_is_attention_block_and_names_what_is_missing():
    import attnspec
    from attnspec.models import AttentionBlock, protocol

    assert isinstance(_Custom(), AttentionBlock) and not hasattr(protocol, "CustomAttention")
    assert attnspec.CustomAttention is not AttentionBlock                    # the model-level protocol is another thing

    class Half(nn.Module):
        attnspec_protocol = 1

        def __init__(self):
            super().__init__()
            self.n_heads, self.out_proj = 2, nn.Linear(4, 4)

    with pytest.raises(AdapterError, match="lacks head_dim, attn_probe, value_probe"):
        adapt(Half())


def test_site_structure_intersects_the_allowed_set():
    site = adapt(_Custom()).sites[0]
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    assert site.structure is None and site.path == ""
    plain = site.allowed(mask)
    assert int(plain[0].sum()) == 9 and bool(plain[1].all())
    band = (torch.arange(4)[:, None] - torch.arange(4)[None]).abs() <= 1      # (L, L): each token and its neighbours
    site.structure = lambda: band
    torch.testing.assert_close(site.allowed(mask), plain & band[None])
    per_item = torch.stack([band, ~band])                                    # (B, L, L): one mask per input
    site.structure = lambda: per_item
    torch.testing.assert_close(site.allowed(mask), plain & per_item)
    site.structure = lambda: None
    assert torch.equal(site.allowed(mask), plain)
    for bad in (torch.ones(3, 3, dtype=torch.bool), torch.ones(3, 4, 4, dtype=torch.bool), torch.ones(4, dtype=torch.bool)):
        site.structure = lambda b=bad: b
        with pytest.raises(ValueError, match=r"structure_mask has shape .* expected \(L, L\) or \(B, L, L\)"):
            site.allowed(mask)
