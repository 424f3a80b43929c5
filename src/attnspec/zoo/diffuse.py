"""Diffuse-attention correction: detect near-uniform attention per head and query, sharpen it.

:class:`DiffuseCorrectedMHA` is an :class:`~attnspec.zoo.attention.MHA` with a second pass::

    pass 1   S = Q K^T / sqrt(d_h);  A1 = softmax(beta * S)                       [B, H, L, L]
    detect   gap = entropy_gap(A1, allowed, beta)                                 [B, H, L]
             (normalized attention entropy against the Gaussian-equivalent null, see
             :mod:`attnspec.zoo.entropy_gap`; gap <= margin means "as flat as a random head")
             w = sigmoid((margin - gap) / width)        soft flatness indicator, no gradient
    pass 2   sd  = std of S_i. over the allowed keys      (no gradient)           [B, H, L]
             t   = max(1, (1 + g_h) / sd),  g_h = softplus(rho_h) >= 0 learned per head (init ``init_gain``
                                                        = 1: target spread 2, above the score scale 1.5
                                                        up to which attnspec.diagnostics calls a
                                                        noise-like head diffuse)
             S'  = S * (1 + w * (t - 1))                score refinement of diffuse queries only:
                                                        their scores are rescaled to the spread
                                                        (1 + g_h) x that of the null's N(0, 1) scores
             A = softmax(beta * S')
    output   C_h = A_h V_h, out_proj(concat_h C_h)

With ``correction=False`` (or :meth:`DiffuseCorrectionNet.set_correction(False)`) pass 2 is skipped
and the block is a plain MHA with the same parameters. The attention the block applies (and the
diagnosis reads) is softmax(beta * S') in both modes; after each forward ``block.extra`` keeps
``pass1_probs``, ``diffuse_weight`` and ``gain`` of that call.

:class:`DiffuseCorrectionNet` (input x [B, C, T] volts)::

    local   Conv2d(1, F, (1, k)) -> Conv2d(F, F, (C, 1)) -> BN -> square -> AvgPool -> log   [B, F, T']
    tokens  Conv1d(F, D, 1) + positional embedding                                           [B, T', D]
    n_layers x pre-norm transformer layer with DiffuseCorrectedMHA (block ``layers.{i}.attn``, path "time")
    head    LN -> mean over time -> Linear(D, n_classes)
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .entropy_gap import DEFAULT_MARGIN, entropy_gap
from .attention import MHA, masked_softmax
from .base import ZooModel
from .staged import MultiScaleLocal, TransformerLayer

__all__ = ["DiffuseCorrectedMHA", "DiffuseCorrectionNet"]


class DiffuseCorrectedMHA(MHA):
    """MHA with detection and temperature correction of diffuse attention (see module docstring).

    Examples
    --------
    >>> import torch
    >>> att = DiffuseCorrectedMHA(8, 2, init_gain=1.0)
    >>> att.gains().tolist()
    [1.0, 1.0]
    >>> _ = att(torch.randn(1, 5, 8))
    >>> sorted(att.extra), att.extra["gain"].shape
    (['diffuse_weight', 'gain', 'pass1_probs'], torch.Size([1, 2, 5]))
    """

    def __init__(self, d_model: int, n_heads: int, correction: bool = True, margin: float = DEFAULT_MARGIN,
                 width: float = 0.02, init_gain: float = 1.0, path: str = "time"):
        super().__init__(d_model, n_heads, path=path)
        self.correction, self.margin, self.width = bool(correction), float(margin), float(width)
        self.rho = nn.Parameter(torch.full((n_heads,), math.log(math.expm1(init_gain))))

    def gains(self) -> torch.Tensor:
        """g_h [H]: diffuse queries get score spread 1 + g_h (the null's is 1)."""
        return nn.functional.softplus(self.rho)

    def refine(self, scores: torch.Tensor, allowed: torch.Tensor):
        if not self.correction:
            return scores, {}
        with torch.no_grad():
            p1 = masked_softmax(self.beta * scores, allowed)
            gap = entropy_gap(p1, allowed, self.beta)
            w = torch.sigmoid((self.margin - gap) / self.width).nan_to_num(0.0)       # [B, H, L]
            a = allowed.expand_as(scores)
            n = a.sum(-1).clamp_min(1)
            mean = (scores * a).sum(-1) / n
            sd = (((scores - mean[..., None]) ** 2 * a).sum(-1) / n).sqrt().clamp_min(1e-3)
        t = torch.clamp((1.0 + self.gains()[None, :, None]) / sd, min=1.0)
        gain = 1.0 + w * (t - 1.0)
        return scores * gain[..., None], dict(pass1_probs=p1, diffuse_weight=w, gain=gain)


class DiffuseCorrectionNet(ZooModel):
    """Convolutional tokens over time + diffuse-corrected attention (see module docstring).

    Examples
    --------
    >>> import torch
    >>> m = DiffuseCorrectionNet(3, 64, 2, kernel=7, n_filters=2, pool=16, stride=16, d_model=8, n_heads=2,
    ...                          n_layers=1)
    >>> m(torch.randn(2, 3, 64)).shape
    torch.Size([2, 2])
    >>> m.set_correction(False).config["correction"], [b.correction for _, b in m.attention_blocks()]
    (False, [False])
    """

    arch = "diffuse"

    def __init__(self, n_channels: int, n_times: int, n_classes: int, correction: bool = True, kernel: int = 31,
                 n_filters: int = 16, pool: int = 32, stride: int = 16, d_model: int = 32, n_heads: int = 4,
                 n_layers: int = 2, dropout: float = 0.2, margin: float = DEFAULT_MARGIN,
                 init_gain: float = 1.0):
        super().__init__(n_channels, n_times, n_classes, correction=bool(correction), kernel=kernel,
                         n_filters=n_filters, pool=pool, stride=stride, d_model=d_model, n_heads=n_heads,
                         n_layers=n_layers, dropout=dropout, margin=margin, init_gain=init_gain)
        self.local = MultiScaleLocal(n_channels, (kernel,), n_filters, pool, stride)
        n_tok = (n_times - pool) // stride + 1
        self.n_tokens = n_tok
        self.proj = nn.Conv1d(n_filters, d_model, 1)
        self.pos = nn.Parameter(0.02 * torch.randn(1, n_tok, d_model))
        self.layers = nn.ModuleList([
            TransformerLayer(d_model, n_heads, dropout,
                             attn=DiffuseCorrectedMHA(d_model, n_heads, correction, margin, init_gain=init_gain))
            for _ in range(n_layers)])
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, n_classes)

    def set_correction(self, on: bool) -> "DiffuseCorrectionNet":
        """Switch the second pass on or off in every block (weights unchanged)."""
        self.config["correction"] = bool(on)
        for _, b in self.attention_blocks():
            b.correction = bool(on)
        return self

    def tokens(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.local(self.normalize(x))).transpose(1, 2) + self.pos
