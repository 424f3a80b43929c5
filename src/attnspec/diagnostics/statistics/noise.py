"""Seeded Gaussian noise drawn text by text, so that a diagnosis depends neither on batching nor on tiling.

Every random draw of a diagnosis has a named purpose (:class:`Draw`) and is made for one text at a
time, at the text's own length ``n_b``, from a generator seeded by ``(seed, purpose, layer, text)``
with ``text`` the text's position in the caller's list; the draw is then placed at the text's real
tokens in the padded batch (zeros elsewhere). Draws that have a query axis are made query row by
query row (``(n_rows, *lead, ...)`` in row-major order), so that computing them in query tiles of any
size gives the same numbers; the Gaussian equivalents' noise is drawn on the allowed entries of a text's
rows only (:meth:`TextNoise.on_allowed`: about half a causal text's square). Bucket sizes, padding, tile
sizes and the order of texts change no drawn number. Draws come from numpy's SFC64 generators (a chaotic
generator that passes BigCrush and PractRand; its float32 normals take about 7.5 ns against PCG64's 14), whose
normal stream is the same however it is cut into calls (torch's CPU normal sampler is not: it switches
algorithm at 16 values).
"""
from __future__ import annotations

from enum import IntEnum
from typing import Sequence

import numpy as np
import torch

from ...seeding import seed_of

__all__ = ["Draw", "TextNoise"]


class Draw(IntEnum):
    """Purposes of the random draws of a diagnosis (one part of each draw's seed).

    A draw for purpose ``p`` of layer ``i`` and text ``t`` comes from a generator seeded by
    ``(seed, int(p), i, t)``, so draws of different purposes are independent.

    Examples
    --------
    >>> int(Draw.GE_NOISE), Draw(5).name
    (1, 'BOOTSTRAP')
    """

    #: ``Z`` of each head's Gaussian equivalent ``(1 + beta S + alpha Z) / n``.
    GE_NOISE = 1
    #: ``Q, K`` of the null heads ``softmax(s_h Q K^T / sqrt(d))``.
    NULL_SCORES = 2
    #: ``Z`` of the null heads' Gaussian equivalent.
    NULL_GE_NOISE = 3
    #: Gaussian frames of the free rotation (free sum of the heads).
    FREE_ROTATION = 4
    #: Poisson(1) bootstrap weights of a text (:mod:`.bootstrap`; layer part 0).
    BOOTSTRAP = 5
    #: Random queries of each head's key null (:func:`.identification.key_null_weights`).
    KEY_NULL = 6


class TextNoise:
    """Per-text generators for one purpose and layer of a batch.

    Parameters
    ----------
    seed : int
    purpose : Draw
        What the draws are for.
    layer : int
    text_ids : sequence of int
        Position of each row of the batch in the caller's list of texts.
    valid : bool tensor ``(B, L)``
        Real tokens of each row; the draws are made on the host and returned on ``valid``'s device.

    Draws advance each text's generator: call :meth:`full` draws first, then :meth:`rows` or
    :meth:`on_allowed` on consecutive query tiles in increasing order.

    Examples
    --------
    Text 7 has 2 real tokens in a batch padded to 3; its draw over its allowed entries (here every real key)
    is the same wherever it sits and however the query rows are tiled:

    >>> import torch
    >>> valid = torch.tensor([[True, True, True], [False, True, True]])
    >>> allowed = valid[:, None, :] & valid[:, :, None]                  # (B, L, L): real rows and keys
    >>> z = TextNoise(0, Draw.GE_NOISE, 0, [3, 7], valid).on_allowed(slice(0, 3), (1,), allowed)
    >>> z.shape, z[1, 0, 0].tolist()                       # (B, heads, rows, keys); padding row is 0
    (torch.Size([2, 1, 3, 3]), [0.0, 0.0, 0.0])
    >>> alone = TextNoise(0, Draw.GE_NOISE, 0, [7], torch.tensor([[True, True]]))
    >>> square = torch.ones(1, 2, 2, dtype=torch.bool)
    >>> tiles = torch.cat([alone.on_allowed(slice(r, r + 1), (1,), square[:, r:r + 1]) for r in (0, 1)], dim=2)
    >>> torch.equal(tiles[0], z[1][:, 1:, 1:])
    True
    """

    def __init__(self, seed: int, purpose: Draw, layer: int, text_ids: Sequence[int], valid: torch.Tensor):
        self.device = valid.device
        self.valid = valid.bool().cpu()
        self.idx = [v.nonzero().squeeze(1) for v in self.valid]
        #: ``(first, stop)`` of each text whose real tokens are one run (right or left padding): its draws
        #: are placed by slicing instead of index lists (same numbers, fewer copies)
        self.runs = [(int(i[0]), int(i[-1]) + 1) if i.numel() and int(i[-1]) - int(i[0]) + 1 == i.numel() else None
                     for i in self.idx]
        self.gens = [np.random.Generator(np.random.SFC64(seed_of(seed, int(purpose), layer, t))) for t in text_ids]

    @staticmethod
    def _normal(g: np.random.Generator, shape: tuple, dtype: torch.dtype) -> torch.Tensor:
        npd = np.float64 if dtype == torch.float64 else np.float32
        return torch.from_numpy(g.standard_normal(shape, dtype=npd)).to(dtype)

    def draw(self, b: int, shape: tuple[int, ...]) -> np.ndarray:
        """Standard normal float64 ``shape`` from text ``b``'s generator (a draw of any shape)."""
        return self.gens[b].standard_normal(shape)

    def full(self, lead: tuple[int, ...], tail: tuple[int, ...] = (), dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Standard normal ``(B, *lead, L, *tail)``, zero outside the real tokens; text ``b`` draws
        ``(*lead, n_b, *tail)``."""
        B, L = self.valid.shape
        out = torch.zeros((B, *lead, L, *tail), dtype=dtype)
        nl = len(lead)
        for b, (g, idx, run) in enumerate(zip(self.gens, self.idx, self.runs)):
            z = self._normal(g, (*lead, idx.numel(), *tail), dtype)
            out[b][(slice(None),) * nl + (slice(*run) if run else idx,)] = z
        return out.to(self.device)

    def rows(self, rows: slice, lead: tuple[int, ...], tail: tuple[int, ...],
             dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Standard normal for the query rows ``rows``: ``(B, *lead, r, *tail)``. Text ``b`` draws its real rows
        in the tile as ``(n_rows, *lead, *tail)``, row-major."""
        B, L = self.valid.shape
        start, stop = rows.indices(L)[:2]
        out = torch.zeros((B, *lead, stop - start, *tail), dtype=dtype)
        nl = len(lead)
        for b, (g, idx, run) in enumerate(zip(self.gens, self.idx, self.runs)):
            if run is not None:                     # one run of real tokens: a slice
                q0, q1 = max(start, run[0]), min(stop, run[1])
                nq, qi = q1 - q0, slice(q0 - start, q1 - start)
            else:
                q = idx[(idx >= start) & (idx < stop)]
                nq, qi = q.numel(), q - start
            if nq > 0:
                out[b][(slice(None),) * nl + (qi,)] = self._normal(g, (nq, *lead, *tail), dtype).movedim(0, nl)
        return out.to(self.device)

    def on_allowed(self, rows: slice, lead: tuple[int, ...], allowed: torch.Tensor,
                   dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Standard normal on the allowed entries of the query rows ``rows``: ``(B, *lead, r, k)`` for the tile's
        allowed set ``allowed`` ``(B, r, k)`` over its first ``k`` keys (which must hold every allowed key of
        those rows, as :func:`..pipeline.collect.tiles_of` gives them), zero elsewhere. Text ``b`` draws
        ``(n_allowed, *lead)``, one ``lead``-shaped draw per allowed entry of its real rows, the entries in
        row-major order (row by row, keys in increasing order): a causal text of ``n`` tokens draws
        ``n (n + 1) / 2`` of them, not ``n^2``, and the numbers depend neither on the tiling nor on the padding
        (the allowed keys of a text's row are its own, in key order).

        Examples
        --------
        A causal text of 3 tokens draws 6 numbers per head; tiled by rows, the same ones:

        >>> import torch
        >>> valid = torch.ones(1, 3, dtype=torch.bool); causal = torch.ones(1, 3, 3, dtype=torch.bool).tril()
        >>> z = TextNoise(0, Draw.GE_NOISE, 0, [0], valid).on_allowed(slice(0, 3), (2,), causal)
        >>> z.shape, int((z != 0).sum())
        (torch.Size([1, 2, 3, 3]), 12)
        >>> tiled = TextNoise(0, Draw.GE_NOISE, 0, [0], valid)
        >>> parts = [tiled.on_allowed(slice(r, r + 1), (2,), causal[:, r:r + 1, :r + 1]) for r in range(3)]
        >>> all(torch.equal(p, z[:, :, r:r + 1, :r + 1]) for r, p in enumerate(parts))
        True
        """
        B, L = self.valid.shape
        start, stop = rows.indices(L)[:2]
        r, k = stop - start, allowed.shape[-1]
        out = torch.zeros((B, *lead, r, k), dtype=dtype)
        nl = len(lead)
        real = allowed.cpu() & self.valid[:, start:stop, None] & self.valid[:, None, :k]
        counts = real.sum((1, 2)).tolist()
        for b, (g, n) in enumerate(zip(self.gens, counts)):
            if n:                                   # out[b] seen as (r, k, *lead): entries row-major, lead inner
                out[b].movedim((nl, nl + 1), (0, 1))[real[b]] = self._normal(g, (n, *lead), dtype)
        return out.to(self.device)
