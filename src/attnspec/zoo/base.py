"""Common base of the zoo models: configuration, input normalization, attention-block access.

Every zoo model implements :class:`attnspec.CustomAttention` (:meth:`ZooModel.attention_blocks`,
:meth:`ZooModel.functional_output`), so ``attnspec.diagnose(model, X)`` diagnoses it with its structure
masks, measuring head removal on the pooled pre-classifier features.

Every zoo model takes raw EEG epochs ``x`` [B, C, T] in volts and returns class logits
[B, n_classes]. Input normalization (per-channel mean and standard deviation, fitted on the
training set by :meth:`ZooModel.prepare`) is part of the model (buffers), so a saved checkpoint
applies to raw recordings. ``config`` holds exactly the constructor arguments (JSON-serializable),
which is what a checkpoint stores next to the weights.
"""
from __future__ import annotations

from typing import ClassVar, Iterator

import numpy as np
import torch
from torch import nn

from .attention import MHA, attention_blocks

__all__ = ["ZooModel", "FeedForward"]


class ZooModel(nn.Module):
    """Base of the zoo models: raw EEG epochs x [B, C, T] (volts) -> class logits [B, n_classes].

    Subclasses set ``arch``, define ``tokens`` (and ``layers``, ``norm``, ``head``, or override
    :meth:`features`). :meth:`attention_blocks` and :meth:`functional_output` are the
    :class:`attnspec.CustomAttention` protocol.

    Examples
    --------
    >>> import torch
    >>> from attnspec.zoo.staged import StagedLocalTemporalNet
    >>> _ = torch.manual_seed(0)
    >>> m = StagedLocalTemporalNet(3, 64, 2, scales=(7,), n_filters=2, pool=16, stride=16, d_model=8, n_heads=2,
    ...                            n_layers=1).eval()
    >>> x = torch.randn(2, 3, 64)
    >>> m(x).shape, m.functional_output(x).shape, [name for name, _ in m.attention_blocks()]
    (torch.Size([2, 2]), torch.Size([2, 8]), ['layers.0.attn'])
    >>> print(m.describe())
    StagedLocalTemporalNet (staged): 720 parameters
      layers.0.attn: path=time, 2 heads x 4, beta=1.0
    """

    arch: ClassVar[str] = ""

    def __init__(self, n_channels: int, n_times: int, n_classes: int, **config):
        super().__init__()
        self.config = dict(n_channels=n_channels, n_times=n_times, n_classes=n_classes, **config)
        self.register_buffer("input_mean", torch.zeros(n_channels))
        self.register_buffer("input_std", torch.ones(n_channels))

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """[B, C, T] volts -> per-channel standardized."""
        return (x - self.input_mean[:, None]) / self.input_std[:, None]

    @torch.no_grad()
    def prepare(self, X: np.ndarray | torch.Tensor) -> None:
        """Fit data-dependent buffers on training epochs X [n, C, T] (normalization; SPD reference)."""
        X = torch.as_tensor(np.asarray(X), dtype=torch.float32)
        self.input_mean.copy_(X.mean(dim=(0, 2)))
        self.input_std.copy_(X.std(dim=(0, 2)).clamp_min(1e-12))

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, C, T] -> pooled features [B, D] (the classifier's input): ``tokens``, then ``layers``,
        the final ``norm`` and the mean over tokens. Models with another structure override it."""
        z = self.tokens(x)
        for layer in self.layers:
            z = layer(z)
        return self.norm(z).mean(1)

    def functional_output(self, x: torch.Tensor) -> torch.Tensor:
        """What head removal is measured on (:class:`attnspec.CustomAttention`): the pooled features
        [B, F] before the classifier; the removal effect of a head is ``1 - cos`` of this vector."""
        return self.features(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))

    def attention_blocks(self) -> Iterator[tuple[str, MHA]]:
        """``(qualified name, block)`` for every attention block (see :mod:`attnspec.zoo.attention`)."""
        return attention_blocks(self)

    def describe(self) -> str:
        n = sum(p.numel() for p in self.parameters())
        lines = [f"{type(self).__name__} ({self.arch}): {n} parameters"]
        for name, b in self.attention_blocks():
            lines.append(f"  {name}: path={b.path}, {b.n_heads} heads x {b.d_head}, beta={b.beta}")
        return "\n".join(lines)


class FeedForward(nn.Module):
    """Pre-norm position-wise MLP: x + W2 gelu(W1 LN(x)); x [..., D], hidden width ``mult * D``.

    Examples
    --------
    >>> import torch
    >>> FeedForward(8, mult=2)(torch.randn(2, 5, 8)).shape
    torch.Size([2, 5, 8])
    """

    def __init__(self, d_model: int, mult: int = 2, dropout: float = 0.0):
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(d_model), nn.Linear(d_model, mult * d_model), nn.GELU(),
                                 nn.Dropout(dropout), nn.Linear(mult * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.net(x)
