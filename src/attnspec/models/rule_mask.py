"""An allowed set given by its rules, built a tile of query rows at a time.

When a model hands its attention function no mask tensor (causal SDPA, FlashAttention's padding vector),
the allowed set of a batch is a rule, not data: key ``j`` is allowed for query ``i`` of text ``b`` when

    keys[b, j] and queries[b, i] and (j <= i + Lk - Lq, if causal) and (i - j < w, or |i - j| < w bidirectionally)

with ``keys`` the real (unpadded) keys, ``queries`` the real queries and ``w`` the sliding window. A
:class:`RuleMask` keeps those ``B (Lq + Lk)`` booleans instead of the ``B Lq Lk`` of a dense mask, and
``mask[:, rows]`` builds the ``(B, r, Lk)`` rows of one tile, so that no step keeps an ``L^2`` tensor for a
batch (the model's own explicit masks stay dense: they exist anyway).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["RuleMask", "same_mask"]


@dataclass(frozen=True, eq=False)
class RuleMask:
    """The allowed set ``(B, Lq, Lk)`` of the module docstring's rule, indexable like a boolean tensor.

    ``mask[:, rows]`` (``(B, r, Lk)``) and ``mask[:, None, rows]`` (``(B, 1, r, Lk)``) build only the rows asked
    for; any other index goes through :meth:`dense`.

    Examples
    --------
    >>> import torch
    >>> m = RuleMask(keys=torch.tensor([[True, True, True, False]]), queries=torch.tensor([[True, True, True, False]]),
    ...              causal=True, window=2)
    >>> m.shape, m[:, 2:4].int().tolist()                   # the last query is padding; window of 2: keys 1, 2
    ((1, 4, 4), [[[0, 1, 1, 0], [0, 0, 0, 0]]])
    >>> bool(torch.equal(m[:, None, 1:3][:, 0], m.dense()[:, 1:3])), m[0, 1].tolist()
    (True, [True, True, False, False])
    """

    keys: torch.Tensor            # (B, Lk) bool: real keys
    queries: torch.Tensor         # (B, Lq) bool: real queries
    causal: bool
    window: int | None = None
    dtype = torch.bool

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.keys.shape[0], self.queries.shape[1], self.keys.shape[1])

    @property
    def device(self) -> torch.device:
        return self.keys.device

    def to(self, device: "torch.device | str") -> "RuleMask":
        """The same rule with its booleans on ``device`` (the tiles are built there); itself when already there."""
        if torch.device(device) == self.device:
            return self
        return RuleMask(self.keys.to(device), self.queries.to(device), self.causal, self.window)

    def rows(self, rows: slice) -> torch.Tensor:
        """The allowed set of the query rows ``rows``: ``(B, r, Lk)`` bool."""
        B, Lq, Lk = self.shape
        i = torch.arange(Lq, device=self.device)[rows][:, None] + (Lk - Lq)
        j = torch.arange(Lk, device=self.device)[None, :]
        ok = self.queries[:, rows, None] & self.keys[:, None, :]
        if self.causal:
            ok &= (j <= i)[None]
        if self.window is not None:
            ok &= (((i - j) if self.causal else (i - j).abs()) < self.window)[None]
        return ok

    def dense(self) -> torch.Tensor:
        """The whole ``(B, Lq, Lk)`` boolean tensor."""
        return self.rows(slice(None))

    def __getitem__(self, key: Any) -> torch.Tensor:
        if isinstance(key, tuple) and key[:1] == (slice(None),):
            if len(key) == 2 and isinstance(key[1], slice):
                return self.rows(key[1])
            if len(key) == 3 and key[1] is None and isinstance(key[2], slice):
                return self.rows(key[2])[:, None]
        return self.dense()[key]

    def numpy(self):
        return self.dense().cpu().numpy()

    def texts(self, idx: torch.Tensor) -> "RuleMask":
        """The same rule for the texts ``idx`` of the batch (``(len(idx), Lq, Lk)``).

        Examples
        --------
        >>> m = RuleMask(torch.tensor([[True, True], [True, False]]), torch.tensor([[True, True], [True, False]]), True)
        >>> m.texts(torch.tensor([1])).dense().int().tolist()
        [[[1, 0], [0, 0]]]
        """
        idx = idx.to(self.device)
        return RuleMask(self.keys[idx], self.queries[idx], self.causal, self.window)

    def equals(self, other: "RuleMask") -> bool:
        return (self.causal == other.causal and self.window == other.window and self.shape == other.shape
                and torch.equal(self.keys, other.keys) and torch.equal(self.queries, other.queries))


def same_mask(a: "torch.Tensor | RuleMask", b: "torch.Tensor | RuleMask") -> bool:
    """Whether two allowed sets (dense boolean tensors or :class:`RuleMask`) are the same set.

    Examples
    --------
    >>> import torch
    >>> v = torch.ones(1, 3, dtype=torch.bool)
    >>> m = RuleMask(v, v, causal=True)
    >>> same_mask(m, RuleMask(v, v, causal=True)), same_mask(m, m.dense()), same_mask(m, RuleMask(v, v, False))
    (True, True, False)
    """
    if isinstance(a, RuleMask) and isinstance(b, RuleMask):
        return a.equals(b)
    if tuple(a.shape) != tuple(b.shape):
        return False
    return torch.equal(a.dense() if isinstance(a, RuleMask) else a, b.dense() if isinstance(b, RuleMask) else b)
