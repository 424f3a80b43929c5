"""Step 2, fit: sufficient statistics of the Gaussian-equivalent fit and the baselines, per layer.

Every statistic of this step is a sum over texts (float64), so the accumulators merge by addition and
the fits depend only on the multiset of texts:

* score sums ``N, sum S^2, sum S y, sum y^2`` per head (:func:`..statistics.identification.score_sums`), giving
  ``score_scale``, ``beta_hat``, ``alpha_hat``, ``R^2``; and the same sums under the Poisson bootstrap
  weights of the texts (:mod:`..statistics.bootstrap`, ``(n_boot, H)`` each), giving the replicates of those fits;
* entropy / confidence sums (:func:`..statistics.selection.baseline_sums`);
* the value-path power ``sum_b ||P V_h W_O^h||_F^2`` and ``sum_b l_b d_out`` (:mod:`..statistics.spectral`);
* the sum of each head's context over real tokens (mean ablation);
* the head-pair Gram sum of the centered contexts (:func:`..statistics.dependence.gram_blocks`), which the spectra
  step needs to accumulate each text's influence on the CKA (its bootstrap, :mod:`..result.intervals`), and the
  numerators of the CKA null in closed form (:func:`..statistics.dependence.free_null_sums`, ``(H, H)``);
* per-query selection: each head's attention mass on the keys of each positional and content rule, its
  expectation under the null and its capacity, with their bootstrap replicates
  (:class:`..statistics.query_selection.QuerySelectionSums`), from the same tiles.

The null heads are fitted the same way, pooled over all texts, once the heads' score scales are known
(:class:`NullFitSums`; they need only the allowed sets, kept by :class:`MaskStore`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ...models.rule_mask import RuleMask, same_mask
from ..statistics import dependence as dep
from ..statistics import identification as ident
from ..statistics import selection as sel
from ..statistics import spectral
from ..statistics.bootstrap import N_BOOT, weighted, weights
from ..statistics.devices import host
from ..statistics.noise import Draw, TextNoise
from ..statistics.query_selection import QuerySelectionSums
from .resources import _layer_pool
from .collect import LayerBatch, tiles_of

__all__ = ["LayerFitSums", "NullFitSums", "MaskStore", "CorpusStats", "null_tile_weights", "null_sums"]


def _add(a: dict | None, b: dict) -> dict:
    return dict(b) if a is None else {k: a[k] + b[k] for k in a}


def _add_per_text(total: dict | None, boot: dict | None, per_text: dict, w: np.ndarray) -> tuple[dict, dict]:
    """Add per-text sums ``(B, H)`` to the totals and, weighted by ``w`` ``(n_boot, B)``, to the replicates."""
    return (_add(total, {k: v.sum(0) for k, v in per_text.items()}),
            _add(boot, {k: weighted(w, v) for k, v in per_text.items()}))


@dataclass
class LayerFitSums:
    """Mergeable per-layer sums of step 2 (see module docstring).

    :meth:`update` adds a layer batch, :meth:`merge` adds another accumulator (sums over texts, so the
    order of batches does not matter); :meth:`fit` gives ``score_scale``, ``beta_hat``, ``alpha_hat``,
    ``r2`` per head and :meth:`fit_replicates` the same on each bootstrap replicate.

    Examples
    --------
    >>> import numpy as np
    >>> from attnspec.diagnostics.pipeline.collect import tiny_layer
    >>> ad, batch, lb = tiny_layer()             # layer 0 of a 2-layer, 2-head GPT-2 on 2 texts of 6 tokens
    >>> sums = LayerFitSums().update(lb, ad.sites[0].w_out(), seed=0, n_boot=5)
    >>> sorted(sums.fit()), sums.fit_replicates()["beta_hat"].shape, sums.n_tokens
    (['alpha_hat', 'beta_hat', 'r2', 'score_scale'], (5, 2), 12.0)

    Text by text, merged, gives the same fit:

    >>> from attnspec.diagnostics.pipeline.collect import collect
    >>> one = lambda i: {k: v[i:i + 1] for k, v in batch.items()}
    >>> parts = [LayerFitSums().update(collect(ad, one(i))[0], ad.sites[0].w_out(), 0, 5) for i in (0, 1)]
    >>> np.allclose(parts[0].merge(parts[1]).fit()["beta_hat"], sums.fit()["beta_hat"])
    True
    """

    scores: dict | None = None
    baselines: dict | None = None
    value_power: np.ndarray | float = 0.0
    value_count: float = 0.0
    context_sum: np.ndarray | float = 0.0
    n_tokens: float = 0.0
    boot_scores: dict | None = None
    gram: np.ndarray | float = 0.0
    query: QuerySelectionSums | None = None
    free_null: np.ndarray | float = 0.0

    def update(self, lb: LayerBatch, W: torch.Tensor, seed: int = 0, n_boot: int = N_BOOT,
               reference_seed: int = 0) -> "LayerFitSums":
        """Add one layer batch; ``W`` is the layer's ``W_O`` ``(H d_head, d_out)``; ``seed`` and ``n_boot``
        key the texts' bootstrap weights, ``reference_seed`` the key null's random queries."""
        W = W.to(lb.device, lb.dtype)
        H = lb.site.n_heads
        B, _, L, dv = lb.values.shape
        ctx = torch.zeros((H, dv), dtype=torch.float64, device=lb.device)
        C = torch.empty((B, H, L, dv), dtype=lb.dtype, device=lb.device)     # every row tile is written below
        w = weights(seed, lb.order, n_boot)
        K = lb.keys if lb.group_size else lb.grouped_keys()   # the key null (identification.key_null_weights)
        noise = None if K is None else TextNoise(reference_seed, Draw.KEY_NULL, lb.index, lb.order, lb.valid)
        if self.query is None:
            self.query = QuerySelectionSums(H, n_boot)
        for rows, keys in lb.tiles():           # (B, H, r, k) tiles: the keys that hold the rows' allowed keys
            A, al, q = lb.weights_of(rows, keys), lb.allowed[:, rows][..., keys], lb.valid[:, rows]
            null = () if noise is None else (K[:, :, keys], noise.rows(rows, (H,), (K.shape[-1],), dtype=lb.dtype))
            self.scores, self.boot_scores = _add_per_text(self.scores, self.boot_scores,
                                                          ident.score_sums(A, al, True, *null), w)
            self.baselines = _add(self.baselines, sel.baseline_sums(A, al, q, lb.special[:, rows]))
            self.query.update(A, rows, al, lb.valid, lb.tokens, w, lb.special)
            C[:, :, rows] = lb.attend(A, keys)
            real = (C[:, :, rows] * q[:, None, :, None]).transpose(0, 1)       # (H, B, r, d_v)
            ctx += real.reshape(H, -1, real.shape[-1]).double().sum(1)   # one reduced axis: 3x faster
        p, c = spectral.value_power(lb.values, lb.groups, W, lb.valid)
        self.value_power = self.value_power + p
        self.value_count += c
        self.context_sum = self.context_sum + host(ctx)
        Mc = spectral.center(C, lb.valid, inplace=True)
        self.gram = self.gram + dep.gram_blocks(Mc)
        self.free_null = self.free_null + dep.free_null_sums(Mc, lb.valid)
        self.n_tokens += float(lb.valid.sum())
        return self

    def merge(self, other: "LayerFitSums") -> "LayerFitSums":
        if other.scores is None:
            return self
        if self.scores is None:
            return other
        return LayerFitSums(_add(self.scores, other.scores), _add(self.baselines, other.baselines),
                            self.value_power + other.value_power, self.value_count + other.value_count,
                            self.context_sum + other.context_sum, self.n_tokens + other.n_tokens,
                            _add(self.boot_scores, other.boot_scores), self.gram + other.gram,
                            self.query.merge(other.query), self.free_null + other.free_null)

    def fit(self) -> dict[str, np.ndarray]:
        """``score_scale``, ``beta_hat``, ``alpha_hat``, ``r2`` per head."""
        return ident.fit_from_sums(self.scores)

    def fit_replicates(self) -> dict[str, np.ndarray]:
        """The same fits on every bootstrap replicate: ``(n_boot, H)`` each."""
        return ident.fit_from_sums(self.boot_scores)

    def head_power(self) -> np.ndarray:
        """Value-path power ``c_h`` per head (mean squared entry of ``P V_h W_O^h``)."""
        return self.value_power / max(self.value_count, 1.0)

    def context_means(self) -> torch.Tensor:
        """Mean context of each head over real tokens ``(H, d_head)`` (mean ablation)."""
        return torch.as_tensor(self.context_sum / max(self.n_tokens, 1.0))


def null_tile_weights(allowed: torch.Tensor, valid: torch.Tensor, order, layer: int, H: int, d: int,
                      scale: np.ndarray, seed: int, tiles, dtype: torch.dtype = torch.float32):
    """Null-head weights of one layer batch, tile by tile: yields ``(rows, keys, A0)`` with ``A0``
    ``(B, H, r, k)`` on the tile's keys (:func:`..statistics.identification.null_weights`; ``K`` drawn first,
    then ``Q`` row by row).

    Parameters
    ----------
    allowed : torch.Tensor of bool, shape (B, L, L)
        The heads' allowed sets (the null heads attend within them).
    valid : torch.Tensor of bool, shape (B, L)
    order : sequence of int
        The texts' positions (the draws are per text, :class:`..statistics.noise.TextNoise`).
    layer, H, d : int
        Layer index, heads, head width of ``Q, K``.
    scale : numpy.ndarray, shape (H,)
        Score scale ``s_h`` of each null head: ``A0 = softmax(s_h Q K^T / sqrt(d))`` over the allowed keys.
    seed : int
        Seed of the draws.
    tiles : iterable of (slice, slice)
        The tiles ``(rows, keys)`` (:func:`.collect.tiles_of`; the null heads attend within ``allowed``, so the
        keys beyond a tile's ``keys`` hold no weight).
    dtype : torch.dtype

    Yields
    ------
    rows, keys : slice
    A0 : torch.Tensor, shape (B, H, rows, k)

    Examples
    --------
    >>> import numpy as np, torch
    >>> from attnspec.diagnostics.pipeline.collect import tiny_layer
    >>> lb = tiny_layer()[2]                     # causal layer 0 of the tiny GPT-2: 2 texts, 6 tokens
    >>> scale = np.array([1.0, 2.0])             # s_h of the 2 null heads (width d = 16)
    >>> tiles = list(null_tile_weights(lb.allowed, lb.valid, lb.order, 0, 2, 16, scale, 0, tiles_of(lb.allowed, 4)))
    >>> [(r, k, tuple(A0.shape)) for r, k, A0 in tiles]          # causal: the first tile's rows see keys 0..3
    [(slice(0, 4, None), slice(0, 4, None), (2, 2, 4, 4)), (slice(4, 6, None), slice(0, 6, None), (2, 2, 2, 6))]
    >>> A0 = tiles[0][2]
    >>> torch.allclose(A0.sum(-1), torch.ones(())), bool((A0[:, :, 0, 1:] == 0).all())   # causal rows
    (True, True)
    """
    noise = TextNoise(seed, Draw.NULL_SCORES, layer, order, valid)
    K = noise.full((H,), (d,), dtype=dtype)
    for rows, keys in tiles:
        Q = noise.rows(rows, (H,), (d,), dtype=dtype)
        yield rows, keys, ident.null_weights(allowed[:, rows][..., keys], scale, Q, K[:, :, keys])


@dataclass
class MaskStore:
    """The allowed sets of every (batch, layer), dense ones bit-packed, rules (:class:`~attnspec.models.rule_mask.RuleMask`)
    as they are, identical masks of a batch stored once.

    Iterating yields ``(valid, order, allowed_of_layer)`` per batch, ``allowed_of_layer(i)`` the unpacked
    ``(B, L, L)`` mask of layer ``i`` (or its rule).

    Examples
    --------
    >>> import torch
    >>> from attnspec.diagnostics.pipeline.collect import collect
    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> store, lbs = MaskStore(), collect(*tiny_causal_lm())        # both layers of the tiny GPT-2
    >>> store.add(lbs)
    >>> (valid, order, allowed_of), = store
    >>> order, same_mask(allowed_of(1), lbs[1].allowed), len(store.batches[0][4])   # both causal: one mask
    ([0, 1], True, 1)
    """

    batches: list = field(default_factory=list)   # (valid, order, L, [mask index per layer], [packed masks])

    def add(self, layer_batches: list[LayerBatch]) -> None:
        lb0 = layer_batches[0]
        kept, packed, which = [], [], []
        for lb in layer_batches:
            k = next((k for k, m in enumerate(kept) if m is lb.allowed or same_mask(m, lb.allowed)), None)
            if k is None:
                kept.append(lb.allowed)
                rule = isinstance(lb.allowed, RuleMask)
                packed.append(lb.allowed if rule else np.packbits(host(lb.allowed), axis=-1))
                k = len(kept) - 1
            which.append(k)
        self.batches.append((lb0.valid, list(lb0.order), lb0.valid.shape[1], which, packed))

    def __iter__(self):
        """Yields ``(valid, order, allowed_of_layer)`` per batch; ``allowed_of_layer(i)`` ``(B, L, L)``."""
        for valid, order, L, which, packed in self.batches:
            yield valid, order, (lambda i, w=which, p=packed, L=L, d=valid.device: _unpacked(p[w[i]], L, d))


def _unpacked(kept: "np.ndarray | RuleMask", L: int, device: torch.device) -> "torch.Tensor | RuleMask":
    """A stored allowed set as the steps read it, on ``device``: bit-packed ``(B, L, ceil(L / 8))`` bytes unpacked,
    a rule as it is."""
    if isinstance(kept, RuleMask):
        return kept
    return torch.from_numpy(np.unpackbits(kept, axis=-1, count=L).astype(bool)).to(device)


@dataclass
class NullFitSums:
    """Score sums of the null heads of one layer (mergeable), at the heads' fitted score scales.

    Examples
    --------
    >>> from attnspec.diagnostics.pipeline.collect import tiny_layer
    >>> ad, batch, lb = tiny_layer()             # layer 0 of the tiny GPT-2 (2 heads of width 16)
    >>> f = LayerFitSums().update(lb, ad.sites[0].w_out(), 0, 5).fit()
    >>> null = NullFitSums().update(lb.allowed, lb.valid, lb.order, 0, 2, 16, f["score_scale"], 0, 6, n_boot=5)
    >>> null.fit()["r2"].round(3), null.fit_replicates()["beta_hat"].shape
    (array([1., 1.]), (5, 2))
    """

    scores: dict | None = None
    boot_scores: dict | None = None

    def update(self, allowed: torch.Tensor, valid: torch.Tensor, order, layer: int, H: int, d: int,
               scale: np.ndarray, seed: int, tile_rows: int, dtype: torch.dtype = torch.float32,
               n_boot: int = N_BOOT, reference_seed: int | None = None) -> "NullFitSums":
        """Add the null heads of one layer batch at the score scales ``scale``: their scores drawn with
        ``reference_seed`` (default ``seed``), the bootstrap weights with ``seed``."""
        w = weights(seed, order, n_boot)
        ref = seed if reference_seed is None else reference_seed
        for rows, keys, A0 in null_tile_weights(allowed, valid, order, layer, H, d, scale, ref,
                                                tiles_of(allowed, tile_rows), dtype):
            self.scores, self.boot_scores = _add_per_text(self.scores, self.boot_scores,
                                                          ident.score_sums(A0, allowed[:, rows][..., keys], per_text=True), w)
        return self

    def merge(self, other: "NullFitSums") -> "NullFitSums":
        if self.scores is None:
            return other
        return self if other.scores is None else NullFitSums(_add(self.scores, other.scores),
                                                             _add(self.boot_scores, other.boot_scores))

    def fit(self) -> dict[str, np.ndarray]:
        return ident.fit_from_sums(self.scores)

    def fit_replicates(self) -> dict[str, np.ndarray]:
        """The null fits on every bootstrap replicate (same text weights as the heads'): ``(n_boot, H)``."""
        return ident.fit_from_sums(self.boot_scores)


def null_sums(sites, masks: MaskStore, fits: list[dict], seed: int, tile_bytes: int, dtype: torch.dtype = torch.float32,
              n_boot: int = N_BOOT, threads: int | None = None, reference_seed: int | None = None) -> list[NullFitSums]:
    """The null heads' fit sums of every layer over the batches of ``masks``, at the heads' fitted score scales.

    One task per layer (its batches in order: the sums of a serial pass, bit for bit), at most ``threads``
    layers at a time (default ``torch.get_num_threads()``), each running torch single-threaded: small per-tile
    operations split over threads only wait for each other, badly so on a shared machine. Tiles of
    ``max(1, tile_bytes / (4 B H L))`` query rows.

    Parameters
    ----------
    sites : list of AttentionSite
    masks : MaskStore
        The allowed sets kept by the fit step.
    fits : list of dict
        Per layer the heads' fit (``score_scale`` is used).
    seed, tile_bytes, n_boot : int
        ``seed`` keys the bootstrap weights.
    dtype : torch.dtype
    threads : int, optional
    reference_seed : int, optional
        Seed of the null heads' scores (default ``seed``; the diagnosis passes its ``reference_seed``). The null heads'
        equivalents are fitted on the very draws whose spectra step 3 takes: fitted on other draws (another seed, or
        a grid of score scales shared by the heads), their departure ``D_null`` grew by up to 37 % at score
        scales below 1.5 on MiniLM, since one draw's own slope differs from another's by a few percent.

    Returns
    -------
    list of NullFitSums
        One per layer.

    Examples
    --------
    >>> import numpy as np
    >>> from attnspec.diagnostics.pipeline.collect import collect
    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> ad, batch = tiny_causal_lm(); lbs = collect(ad, batch)       # a 2-layer, 2-head GPT-2
    >>> store = MaskStore(); store.add(lbs)
    >>> fits = [{"score_scale": np.array([1.0, 2.0])}] * 2
    >>> out = null_sums(ad.sites, store, fits, seed=0, tile_bytes=2 ** 20, n_boot=5, threads=2)
    >>> one = NullFitSums().update(lbs[1].allowed, lbs[1].valid, lbs[1].order, 1, 2, 16, fits[1]["score_scale"], 0, 6,
    ...                            n_boot=5)
    >>> len(out), all(np.array_equal(out[1].scores[k], one.scores[k]) for k in one.scores)
    (2, True)
    """
    out = [NullFitSums() for _ in sites]

    def layer(i: int) -> None:
        s = sites[i]
        for valid, order, allowed_of in masks:
            B, L = valid.shape
            rows = max(1, min(L, tile_bytes // max(1, 4 * B * s.n_heads * L)))
            out[i].update(allowed_of(i), valid, order, i, s.n_heads, s.head_dim, fits[i]["score_scale"], seed, rows,
                          dtype, n_boot, reference_seed)
    with _layer_pool(threads or torch.get_num_threads()) as pool:
        for done in [pool.submit(layer, i) for i in range(len(sites))]:
            done.result()
    return out


@dataclass
class CorpusStats:
    """Texts, real tokens and the longest text seen (mergeable).

    Examples
    --------
    >>> import torch
    >>> mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    >>> CorpusStats().update({"attention_mask": mask}).merge(CorpusStats(1, 2, 2))
    CorpusStats(n_texts=3, n_tokens=9, max_tokens=4)
    """

    n_texts: int = 0
    n_tokens: int = 0
    max_tokens: int = 0

    def update(self, batch: dict) -> "CorpusStats":
        lengths = batch["attention_mask"].sum(1)
        self.n_texts += int(lengths.numel())
        self.n_tokens += int(lengths.sum())
        self.max_tokens = max(self.max_tokens, int(lengths.max()))
        return self

    def merge(self, other: "CorpusStats") -> "CorpusStats":
        return CorpusStats(self.n_texts + other.n_texts, self.n_tokens + other.n_tokens,
                           max(self.max_tokens, other.max_tokens))
