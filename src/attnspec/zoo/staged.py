"""Staged local-temporal MI-EEG decoder: multi-scale convolutions, then attention over time.

Architecture (input x [B, C, T] volts)::

    stage 1 (local, per scale k in ``scales``):
        Conv2d(1, F, (1, k))            temporal filters of length k (several temporal scales)
        Conv2d(F, F, (C, 1))            spatial filter across all electrodes
        BatchNorm -> square -> AvgPool(1, pool, stride) -> log        local log band power
      concatenate the scales             [B, S*F, T'],  T' = (T - pool) // stride + 1
    tokens: Conv1d(S*F, D, 1) + learned positional embedding          [B, T', D]
    stage 2 (global): n_layers x pre-norm transformer layer
        x = x + MHA(LN(x))  (attention over the T' time tokens; block ``layers.{i}.attn``, path "time")
        x = FeedForward(x)
    head: LN -> mean over time -> Linear(D, n_classes)
"""
from __future__ import annotations

import torch
from torch import nn

from .attention import MHA
from .base import FeedForward, ZooModel

__all__ = ["StagedLocalTemporalNet", "MultiScaleLocal", "TransformerLayer"]


class MultiScaleLocal(nn.Module):
    """x [B, C, T] -> log local band power [B, S*F, T'] at several temporal scales.

    Per scale k: a temporal convolution (kernel k, F filters), a spatial one over all C channels, batch
    normalization, then the log of the squared output averaged over windows of ``pool`` samples every
    ``stride`` (``T' = (T - pool) // stride + 1``).

    Examples
    --------
    >>> import torch
    >>> MultiScaleLocal(3, scales=(7, 15), n_filters=2, pool=16, stride=16)(torch.randn(2, 3, 64)).shape
    torch.Size([2, 4, 4])
    """

    def __init__(self, n_channels: int, scales: tuple[int, ...], n_filters: int, pool: int, stride: int):
        super().__init__()
        self.branches = nn.ModuleList([
            nn.Sequential(nn.Conv2d(1, n_filters, (1, k), padding=(0, k // 2), bias=False),
                          nn.Conv2d(n_filters, n_filters, (n_channels, 1), bias=False),
                          nn.BatchNorm2d(n_filters))
            for k in scales])
        self.pool = nn.AvgPool2d((1, pool), stride=(1, stride))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = x[:, None]                                                     # [B, 1, C, T]
        T = x.shape[-1]
        outs = [self.pool(b(z)[..., :T].pow(2)) for b in self.branches]    # each [B, F, 1, T']
        return torch.log(torch.cat(outs, 1).squeeze(2) + 1e-4)             # [B, S*F, T']


class TransformerLayer(nn.Module):
    """Pre-norm layer: x + MHA(LN x), then FeedForward; x [B, L, D].

    Examples
    --------
    >>> import torch
    >>> layer = TransformerLayer(8, 2, path="time")
    >>> layer(torch.randn(2, 5, 8)).shape, layer.attn.path
    (torch.Size([2, 5, 8]), 'time')
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, path: str = "time", attn: MHA | None = None):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.attn = attn if attn is not None else MHA(d_model, n_heads, path=path)
        self.drop = nn.Dropout(dropout)
        self.ff = FeedForward(d_model, dropout=dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.ff(x + self.drop(self.attn(self.norm(x), mask)))


class StagedLocalTemporalNet(ZooModel):
    """Staged local-temporal decoder (see module docstring for the architecture).

    Examples
    --------
    >>> import torch
    >>> m = StagedLocalTemporalNet(3, 64, 2, scales=(7,), n_filters=2, pool=16, stride=16, d_model=8, n_heads=2,
    ...                            n_layers=1)
    >>> m.n_tokens, m.tokens(torch.randn(2, 3, 64)).shape, m(torch.randn(2, 3, 64)).shape
    (4, torch.Size([2, 4, 8]), torch.Size([2, 2]))
    """

    arch = "staged"

    def __init__(self, n_channels: int, n_times: int, n_classes: int, scales: tuple[int, ...] = (15, 31, 63),
                 n_filters: int = 8, pool: int = 32, stride: int = 16, d_model: int = 32, n_heads: int = 4,
                 n_layers: int = 2, dropout: float = 0.2):
        scales = tuple(int(k) for k in scales)
        super().__init__(n_channels, n_times, n_classes, scales=list(scales), n_filters=n_filters, pool=pool,
                         stride=stride, d_model=d_model, n_heads=n_heads, n_layers=n_layers, dropout=dropout)
        self.local = MultiScaleLocal(n_channels, scales, n_filters, pool, stride)
        n_tok = (n_times - pool) // stride + 1
        self.n_tokens = n_tok
        self.proj = nn.Conv1d(len(scales) * n_filters, d_model, 1)
        self.pos = nn.Parameter(0.02 * torch.randn(1, n_tok, d_model))
        self.layers = nn.ModuleList([TransformerLayer(d_model, n_heads, dropout) for _ in range(n_layers)])
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, n_classes)

    def tokens(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, C, T] -> time tokens [B, T', D]."""
        return self.proj(self.local(self.normalize(x))).transpose(1, 2) + self.pos
