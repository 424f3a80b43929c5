"""attnspec.CustomAttention: any model with attention_blocks() and functional_output() is diagnosed by
attnspec.diagnose with its structure masks (not only the zoo's)."""
import numpy as np
import pytest
import torch
from torch import nn

import attnspec
from attnspec.models.custom import custom_adapter


class Block(nn.Module):
    """Per-block protocol of attnspec.models.protocol, with a causal structure mask of its own."""

    attnspec_protocol, path = 1, "time"

    def __init__(self, d=16, H=2, L=12):
        super().__init__()
        self.n_heads, self.head_dim = H, d // H
        self.qkv, self.out_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.attn_probe, self.value_probe = nn.Identity(), nn.Identity()
        self.structure_mask = torch.ones(L, L, dtype=torch.bool).tril()

    def forward(self, x):
        B, L, _ = x.shape
        q, k, v = self.qkv(x).view(B, L, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        s = (q @ k.transpose(-1, -2) / self.head_dim ** 0.5).masked_fill(~self.structure_mask, float("-inf"))
        A = self.attn_probe(s.softmax(-1))
        return self.out_proj((A @ self.value_probe(v)).transpose(1, 2).reshape(B, L, -1))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])

    def attention_blocks(self):
        return [(f"blocks.{i}", b) for i, b in enumerate(self.blocks)]

    def functional_output(self, x):
        for b in self.blocks:
            x = x + b(x)
        return x.mean(1)


def test_structure_mask_and_functional_output_of_a_user_model():
    torch.manual_seed(0)
    net = Net()
    X = torch.randn(6, 12, 16, generator=torch.Generator().manual_seed(1))
    d = attnspec.diagnose(net, X, seed=0)
    assert list(d.heads.block) == ["blocks.0"] * 2 + ["blocks.1"] * 2 and set(d.heads.path) == {"time"}
    # query i may attend keys 0..i: the uniform baseline is the mean of log(i + 1), not log 12
    np.testing.assert_allclose(d.heads.entropy_uniform, np.mean(np.log(np.arange(1, 13))), rtol=1e-12)
    # removal is measured on the functional output: removing head h changes the pooled output by 1 - cos
    assert (d.heads.removal_effect > 0).all()
    # same seed, same tables; the model's own output is untouched by the diagnosis
    before = net.functional_output(X)
    d2 = attnspec.diagnose(net, X.numpy(), seed=0)
    torch.testing.assert_close(net.functional_output(X), before)
    np.testing.assert_array_equal(d2.heads.beta_hat, d.heads.beta_hat)


def test_bad_structure_mask_and_output_are_named():
    net = Net()
    net.blocks[0].structure_mask = torch.ones(3, 3, dtype=torch.bool)
    adapter = custom_adapter(net)
    with pytest.raises(ValueError, match="blocks.0: structure_mask has shape"):
        adapter.sites[0].allowed(torch.ones(2, 12))
    net = Net()
    net.functional_output = lambda x: x.sum()          # runs no attention block
    with pytest.raises(ValueError, match="no attention block ran during functional_output"):
        attnspec.diagnose(net, torch.randn(2, 12, 16))
    net.functional_output = lambda x: Net.functional_output(net, x).sum()
    with pytest.raises(attnspec.models.AdapterError, match="must return a \\(B, F\\) or \\(B, L, F\\) tensor"):
        attnspec.diagnose(net, torch.randn(2, 12, 16))


def test_a_model_in_training_mode_is_left_unchanged():
    torch.manual_seed(0)
    net = Net()
    net.norm = nn.BatchNorm1d(12)                         # running statistics move on a training-mode forward
    inner = net.functional_output

    def with_norm(x):
        return inner(net.norm(x))
    net.functional_output = with_norm
    net.train()
    state = {k: v.clone() for k, v in net.state_dict().items()}
    attnspec.diagnose(net, torch.randn(4, 12, 16), removal="none", gradient=False)
    assert net.training
    for k, v in net.state_dict().items():
        assert torch.equal(v, state[k]), k
