"""diagnose() on models without a tokenizer: a custom-protocol module and nn.MultiheadAttention."""
import numpy as np
import pytest
import torch
from torch import nn

from attnspec.diagnostics import diagnose
from attnspec.models import adapt


class _Custom(nn.Module):
    """Per-block custom protocol with separate query, key and value projections; masks padded keys."""
    attnspec_protocol = 1

    def __init__(self, d=16, H=4):
        super().__init__()
        self.n_heads, self.head_dim = H, d // H
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.out_proj = nn.Linear(d, d)
        self.attn_probe, self.value_probe = nn.Identity(), nn.Identity()

    def forward(self, x, key_padding_mask=None):
        B, L, _ = x.shape
        heads = [p(x).view(B, L, self.n_heads, self.head_dim).transpose(1, 2) for p in (self.q, self.k, self.v)]
        logits = heads[0] @ heads[1].transpose(-1, -2) * self.head_dim ** -0.5
        if key_padding_mask is not None:
            logits = logits.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
        weights = self.attn_probe(torch.softmax(logits, dim=-1))
        context = weights @ self.value_probe(heads[2])
        return self.out_proj(context.transpose(1, 2).reshape(B, L, self.n_heads * self.head_dim))


class _Net(nn.Module):
    """Two custom attention layers with residuals, EEG-style input (B, L, d) and a padding mask."""

    def __init__(self, d=16, H=4):
        super().__init__()
        self.a1, self.a2 = _Custom(d, H), _Custom(d, H)

    def forward(self, x, key_padding_mask=None):
        x = x + self.a1(x, key_padding_mask)
        return x + self.a2(x, key_padding_mask)


class _MHANet(nn.Module):
    def __init__(self, d=16, H=4):
        super().__init__()
        self.att = nn.MultiheadAttention(d, H, batch_first=True)

    def forward(self, x, key_padding_mask=None):
        return x + self.att(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)[0]


@pytest.mark.parametrize("net", [_Net, _MHANet])
def test_diagnose_generic(net):
    torch.manual_seed(0)
    model = net().eval()
    x = torch.randn(6, 20, 16)
    mask = torch.ones(6, 20, dtype=torch.long)
    mask[3:, 15:] = 0
    kpm = mask == 0
    before = [p.clone() for p in model.parameters()]
    d = diagnose(model, {"args": (x,), "kwargs": {"key_padding_mask": kpm}, "attention_mask": mask})
    n_layers = len(adapt(model).sites)
    assert len(d.heads) == 4 * n_layers and d.summary["kind"] == "generic"
    assert np.isfinite(d.heads["beta_hat"]).all() and np.isfinite(d.heads["removal_effect"]).all()
    assert (d.heads["michel_importance_raw"] > 0).all()
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
