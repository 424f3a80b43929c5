"""Adaptive anisotropic attention over (electrode, time-patch) tokens.

Architecture (input x [B, C, T] volts, P = T // patch time patches, L = C * P tokens)::

    tokenizer   per electrode: Conv1d(1, F, k) temporal filters -> square -> mean over each patch
                -> log  => [B, C, P, F]; Linear(F, D) + electrode embedding [C, D] + patch
                embedding [P, D]  => tokens [B, L, D], token index l = c * P + p (electrode-major)
    n_layers x  block:
                  h = LN(x)
                  t = temporal(h, mask_T)   MHA, mask_T[l, l'] = (c == c')   own electrode, all patches
                  s = spatial(h, mask_S)    MHA, mask_S[l, l'] = (p == p')   same patch, all electrodes
                  g = sigmoid(w_g . h + b_g)                [B, L, 1], learned per-token mixing gate
                  x = x + g * t + (1 - g) * s               adaptive combination of the two paths
                  x = FeedForward(x)
    head        LN -> mean over the patches of each electrode -> flatten [B, C*D] -> Linear(C*D, n_classes)

The temporal and spatial paths are full-sequence MHA blocks restricted by block-diagonal structure
masks, so their attention matrices are [B, H, L, L] with zeros outside the allowed blocks and the
diagnosis sees each path as its own block: ``blocks.{i}.temporal`` and ``blocks.{i}.spatial``.
After each forward, each path keeps its mixing weight per token in ``block.extra["gate"]``
([B, L]: g for the temporal path, 1 - g for the spatial one).
"""
from __future__ import annotations

import torch
from torch import nn

from .attention import MHA, block_diagonal_mask
from .base import FeedForward, ZooModel

__all__ = ["AnisotropicAttentionNet", "AnisotropicBlock", "LogPowerTokenizer"]


class LogPowerTokenizer(nn.Module):
    """x [B, C, T] -> log band-power tokens [B, C, P, F] from learned temporal filters.

    ``P = T // patch`` patches; each token is ``log(mean power + 1e-4)`` of the F filtered signals.

    Examples
    --------
    >>> import torch
    >>> LogPowerTokenizer(n_filters=2, kernel=7, patch=16)(torch.randn(2, 3, 64)).shape
    torch.Size([2, 3, 4, 2])
    """

    def __init__(self, n_filters: int, kernel: int, patch: int):
        super().__init__()
        self.patch = patch
        self.conv = nn.Conv1d(1, n_filters, kernel, padding=kernel // 2, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, C, T = x.shape
        P = T // self.patch
        z = self.conv(x[:, :, : P * self.patch].reshape(B * C, 1, P * self.patch))  # [B*C, F, P*patch]
        z = z.reshape(B * C, -1, P, self.patch).pow(2).mean(-1)                     # [B*C, F, P]
        return torch.log(z + 1e-4).reshape(B, C, -1, P).transpose(2, 3)             # [B, C, P, F]


class AnisotropicBlock(nn.Module):
    """Temporal path + spatial path + learned gate, then a feed-forward layer (see module doc).

    Examples
    --------
    >>> import torch
    >>> from attnspec.zoo.attention import block_diagonal_mask
    >>> tok = torch.arange(12)                                   # 3 electrodes x 4 patches
    >>> blk = AnisotropicBlock(8, 2)
    >>> y = blk(torch.randn(2, 12, 8), block_diagonal_mask(tok // 4), block_diagonal_mask(tok % 4))
    >>> y.shape, float(blk.temporal.extra["gate"].mean())      # the gate starts at 1/2
    (torch.Size([2, 12, 8]), 0.5)
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.temporal = MHA(d_model, n_heads, path="temporal")
        self.spatial = MHA(d_model, n_heads, path="spatial")
        self.gate = nn.Linear(d_model, 1)
        nn.init.zeros_(self.gate.weight)
        nn.init.zeros_(self.gate.bias)
        self.ff = FeedForward(d_model, dropout=dropout)

    def forward(self, x, mask_t, mask_s):
        h = self.norm(x)
        t = self.temporal(h, mask_t)
        s = self.spatial(h, mask_s)
        g = torch.sigmoid(self.gate(h))
        self.temporal.extra["gate"] = g[..., 0].detach()          # weight of each path in the mix, [B, L]
        self.spatial.extra["gate"] = 1 - g[..., 0].detach()
        return self.ff(x + g * t + (1 - g) * s)


class AnisotropicAttentionNet(ZooModel):
    """Adaptive anisotropic attention network (see module docstring for the architecture).

    Examples
    --------
    >>> import torch
    >>> m = AnisotropicAttentionNet(3, 64, 2, patch=16, n_filters=2, kernel=7, d_model=8, n_heads=2)
    >>> m(torch.randn(2, 3, 64)).shape, [(name, b.path) for name, b in m.attention_blocks()]
    (torch.Size([2, 2]), [('blocks.0.temporal', 'temporal'), ('blocks.0.spatial', 'spatial')])
    """

    arch = "anisotropic"

    def __init__(self, n_channels: int, n_times: int, n_classes: int, patch: int = 32, n_filters: int = 8,
                 kernel: int = 33, d_model: int = 32, n_heads: int = 4, n_layers: int = 1, dropout: float = 0.1):
        super().__init__(n_channels, n_times, n_classes, patch=patch, n_filters=n_filters, kernel=kernel,
                         d_model=d_model, n_heads=n_heads, n_layers=n_layers, dropout=dropout)
        P = n_times // patch
        self.n_patches = P
        self.tokenizer = LogPowerTokenizer(n_filters, kernel, patch)
        self.embed = nn.Linear(n_filters, d_model)
        self.electrode_emb = nn.Parameter(0.02 * torch.randn(n_channels, 1, d_model))
        self.patch_emb = nn.Parameter(0.02 * torch.randn(1, P, d_model))
        self.blocks = nn.ModuleList([AnisotropicBlock(d_model, n_heads, dropout) for _ in range(n_layers)])
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(n_channels * d_model, n_classes)
        tok = torch.arange(n_channels * P)
        self.register_buffer("mask_temporal", block_diagonal_mask(tok // P), persistent=False)
        self.register_buffer("mask_spatial", block_diagonal_mask(tok % P), persistent=False)

    def tokens(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, C, T] -> tokens [B, C*P, D]."""
        z = self.embed(self.tokenizer(self.normalize(x)))          # [B, C, P, D]
        z = z + self.electrode_emb + self.patch_emb
        return z.reshape(z.shape[0], -1, z.shape[-1])

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, C, T] -> pooled features [B, C*D] (the classifier's input)."""
        z = self.tokens(x)
        for blk in self.blocks:
            z = blk(z, self.mask_temporal, self.mask_spatial)
        B, _, D = z.shape
        return self.norm(z).reshape(B, -1, self.n_patches, D).mean(2).flatten(1)    # [B, C*D]
