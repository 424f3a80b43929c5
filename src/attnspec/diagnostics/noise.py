"""Seeded Gaussian noise drawn text by text, so that a diagnosis does not depend on batching.

Every random draw of a diagnosis (Gaussian-equivalent noise, null heads, free rotations) is made for
one text at a time, at the text's own length ``n_b``, from a generator seeded by ``(seed, purpose,
layer, text)`` with ``text`` the text's position in the caller's list; the draw is then placed at the
text's real tokens in the padded batch (zeros elsewhere). Bucket sizes, padding and the order of
texts change no number of the diagnosis.
"""
from __future__ import annotations

from typing import Sequence

import torch

from ..seeding import seed_of

__all__ = ["TextNoise"]


class TextNoise:
    """Per-text generators for one purpose and layer of a batch.

    Parameters
    ----------
    seed, purpose, layer : int
        Seed parts; ``purpose`` tells the draws of one layer apart.
    text_ids : sequence of int
        Position of each row of the batch in the caller's list of texts.
    valid : bool tensor ``(B, L)``
        Real tokens of each row.
    """

    def __init__(self, seed: int, purpose: int, layer: int, text_ids: Sequence[int], valid: torch.Tensor):
        self.valid = valid.bool()
        self.gens = [torch.Generator().manual_seed(seed_of(seed, purpose, layer, t)) for t in text_ids]

    def randn(self, lead: tuple[int, ...], tail: tuple[int, ...] = (), square: bool = False,
              dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Standard normal ``(B, *lead, L, *tail)`` (``(B, *lead, L, L)`` when ``square``), zero outside
        the real tokens; row ``b`` is drawn as ``(*lead, n_b, *tail)`` (or ``(*lead, n_b, n_b)``)."""
        B, L = self.valid.shape
        out = torch.zeros((B, *lead, L, *((L,) if square else tail)), dtype=dtype)
        nl = len(lead)
        for b, g in enumerate(self.gens):
            idx = self.valid[b].nonzero().squeeze(1)
            n = idx.numel()
            z = torch.randn((*lead, n, *((n,) if square else tail)), generator=g, dtype=dtype)
            if square:
                out[b][(slice(None),) * nl + (idx[:, None], idx[None, :])] = z
            else:
                out[b][(slice(None),) * nl + (idx,)] = z
        return out
