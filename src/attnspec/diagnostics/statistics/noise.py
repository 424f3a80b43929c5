"""Seeded Gaussian noise drawn text by text, so that a diagnosis depends neither on batching nor on tiling.

Every random draw of a diagnosis has a named purpose (:class:`Draw`) and is made for one text at a
time, at the text's own length ``n_b``, from a generator seeded by ``(seed, purpose, layer, text)``
with ``text`` the text's position in the caller's list; the draw is then placed at the text's real
tokens in the padded batch (zeros elsewhere). Draws that have a query axis are made query row by
query row (``(n_rows, *lead, ...)`` in row-major order), so that computing them in query tiles of any
size gives the same numbers; the Gaussian equivalents' noise is drawn on the allowed entries of a text's
rows only (:meth:`TextNoise.on_allowed`: about half a causal text's square), a row's whole blocks of
:data:`BLOCK_PER_WIDTH` ``d_v`` keys as ``d_v`` numbers each (:meth:`TextNoise.on_allowed_blocks`,
:func:`block_factors`: the same law given the values). Bucket sizes, padding, tile
sizes and the order of texts change no drawn number. Draws come from numpy's SFC64 generators (a chaotic
generator that passes BigCrush and PractRand; its float32 normals take about 7.5 ns against PCG64's 14), whose
normal stream is the same however it is cut into calls (torch's CPU normal sampler is not: it switches
algorithm at 16 values).

The *reference draws* (every purpose but ``BOOTSTRAP``: the equivalents' noise, the null heads, the free
rotation, the key null) are part of the statistics' definition: they take the diagnosis' ``reference_seed``
(fixed, 0 by default), and the bootstrap weights its ``seed``, so that a rerun with another ``seed`` changes only
the intervals' Monte-Carlo draws. The reference draws' own sampling variance is inside every interval: the
bootstrap re-weights each text together with its draws (docs/validity.md, *How much a verdict depends on the
seed*).
"""
from __future__ import annotations

from enum import IntEnum
from typing import Sequence

import numpy as np
import torch

from ...seeding import seed_of

__all__ = ["Draw", "TextNoise", "BLOCK_PER_WIDTH", "block_factors"]

#: The Gaussian equivalents' noise takes whole blocks of ``BLOCK_PER_WIDTH d_v`` keys as ``d_v`` numbers each
#: (:meth:`TextNoise.on_allowed_blocks`, :func:`block_factors`): texts shorter than that draw one number per
#: allowed entry; a row of a long causal text draws about ``i / 8 + 4 d_v`` numbers a head, not ``i``.
BLOCK_PER_WIDTH = 8


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
        return self.on_allowed_blocks(rows, lead, allowed, 0, 0, dtype)[0]

    def on_allowed_blocks(self, rows: slice, lead: tuple[int, ...], allowed: torch.Tensor, size: int, width: int,
                          dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor | None]:
        """:meth:`on_allowed` with whole blocks of keys drawn as ``width`` numbers each: ``(Z, G)``.

        A text's real keys fall into consecutive *blocks* of ``size`` keys (in the text's own order; a last
        incomplete block is no block). For a row that may attend every key of block ``m``, the block takes one
        ``(width, *lead)`` draw ``G[b, i, m]`` instead of one number per key, and ``Z`` is zero on its keys; ``Z``
        holds the row's other allowed entries as :meth:`on_allowed` does. The caller turns ``G`` into
        ``sum_m R_m^T G[b, i, m]`` with ``R_m^T R_m = V_m^T V_m`` (the block's values, ``width`` wide): given ``V``
        that has the law of ``sum_{j in block} Z_ij V_j`` (a Gaussian of covariance ``V_m^T V_m``), from ``width``
        numbers instead of ``size``. Row by row, text ``b`` draws the row's full blocks ``(n_blocks, width,
        *lead)`` then its other allowed entries ``(n_entries, *lead)``, so the numbers depend neither on the tiling
        nor on the padding; without a full block (texts shorter than ``size``; ``size = 0``) they are
        :meth:`on_allowed`'s.

        Returns
        -------
        Z : torch.Tensor, shape (B, *lead, r, k)
        G : torch.Tensor, shape (B, r, M, width, *lead), or None
            ``M``: the most blocks of a text of the batch (None when no text has one); zero where row ``i`` does
            not take block ``m`` whole.

        Examples
        --------
        A causal text of 6 tokens in blocks of 2 keys, 1 number a block: row 4 takes blocks 0 and 1 whole and
        draws key 4 alone; 2 + 1 numbers instead of 5:

        >>> import torch
        >>> valid = torch.ones(1, 6, dtype=torch.bool); causal = torch.ones(1, 6, 6, dtype=torch.bool).tril()
        >>> Z, G = TextNoise(0, Draw.GE_NOISE, 0, [0], valid).on_allowed_blocks(slice(4, 5), (), causal[:, 4:5], 2, 1)
        >>> (Z != 0).int().tolist(), (G != 0).int().flatten().tolist()
        ([[[0, 0, 0, 0, 1, 0]]], [1, 1, 0])
        """
        B, L = self.valid.shape
        start, stop = rows.indices(L)[:2]
        r, k = stop - start, allowed.shape[-1]
        nl = len(lead)
        real = allowed.cpu() & self.valid[:, start:stop, None] & self.valid[:, None, :k]
        n_blocks = [idx.numel() // size if size else 0 for idx in self.idx]
        M = max(n_blocks, default=0)
        Z = torch.zeros((B, *lead, r, k), dtype=dtype)
        G = torch.zeros((B, r, M, width, *lead), dtype=dtype) if M else None
        for b, (g, idx, m_b) in enumerate(zip(self.gens, self.idx, n_blocks)):
            entries = real[b]                                       # (r, k)
            if m_b:                                                 # the rows' full blocks, in the text's order
                block = torch.full((k,), -1, dtype=torch.long)      # each key's block (-1: none)
                inside = idx[:m_b * size]
                inside = inside[inside < k]
                block[inside] = torch.arange(inside.numel()) // size
                hit = torch.zeros(r, m_b + 1).index_add_(1, block + 1, entries.to(torch.float32))[:, 1:]
                full = hit == size                                  # (r, m_b): every key of the block allowed
                entries = entries & ~torch.where(block >= 0, full[:, block.clamp(min=0)], False)
                slots = torch.cat([full.repeat_interleave(width, 1), entries], 1)   # (r, m_b width + k)
            else:
                slots = entries
            n = int(slots.sum())
            if not n:
                continue
            buf = torch.zeros((r, slots.shape[1], *lead), dtype=dtype)
            buf[slots] = self._normal(g, (n, *lead), dtype)          # rows in order, each: blocks, then entries
            Z[b] = buf[:, slots.shape[1] - k:].movedim((0, 1), (nl, nl + 1))
            if m_b:
                G[b, :, :m_b] = buf[:, :m_b * width].unflatten(1, (m_b, width))
        return Z.to(self.device), (G.to(self.device) if G is not None else None)


def block_factors(V: torch.Tensor, valid: torch.Tensor, size: int) -> torch.Tensor | None:
    """Factors ``R_m`` ``(d_v, d_v)`` with ``R_m^T R_m = V_m^T V_m`` for each block ``m`` of ``size`` consecutive
    real keys of each text (the blocks of :meth:`TextNoise.on_allowed_blocks`), from a QR factorization of the
    block's values: ``(B, H, M, d_v, d_v)`` (zero past a text's blocks), or None when no text has a block.
    Given ``V``, ``R_m^T g`` with ``g ~ N(0, I)`` has the law of ``sum_{j in block m} Z_j V_j``.

    Parameters
    ----------
    V : torch.Tensor, shape (B, H, L, d_v)
        Values (padded).
    valid : torch.Tensor, shape (B, L)
        Real tokens.
    size : int
        Keys a block (>= ``d_v``).

    Examples
    --------
    >>> import torch
    >>> V = torch.randn(1, 2, 10, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    >>> R = block_factors(V, torch.ones(1, 10, dtype=torch.bool), 4)          # 2 blocks of 4 keys (and 2 left)
    >>> R.shape, bool(torch.allclose(R[0, 1, 1].T @ R[0, 1, 1], V[0, 1, 4:8].T @ V[0, 1, 4:8]))
    (torch.Size([1, 2, 2, 3, 3]), True)
    """
    B, H, _, dv = V.shape
    if size < dv:
        raise ValueError(f"size must be >= d_v = {dv}, got {size}")
    n_blocks = [int(v.sum()) // size for v in valid]
    M = max(n_blocks, default=0)
    if not M:
        return None
    R = torch.zeros(B, H, M, dv, dv, dtype=V.dtype, device=V.device)
    for b, m_b in enumerate(n_blocks):
        if m_b:
            Vb = V[b][:, valid[b]][:, :m_b * size].unflatten(1, (m_b, size))       # (H, m_b, size, d_v)
            R[b, :, :m_b] = torch.linalg.qr(Vb, mode="r").R
    return R
