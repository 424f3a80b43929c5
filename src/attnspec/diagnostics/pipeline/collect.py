"""Step 1, collect: one forward pass of a batch, and per attention layer what the other steps read.

For transformers models the inputs of every attention call are recorded whatever the kernel (eager,
SDPA, FlashAttention; :mod:`attnspec.models.attention_calls`): queries and keys after the position
encoding, values, and the allowed set from the mask the model itself built (causal, padding, sliding
window, per-layer patterns). Attention rows are then recomputed on demand, one query tile at a time,
in float32 (float64 for a float64 model) on the statistics' device (the CPU, or the model's device with
``statistics_device='model'``, :mod:`..statistics.devices`): a diagnosis never holds ``(B, H, L, L)`` for more
than one tile of one layer per worker thread. Custom modules and ``nn.MultiheadAttention`` are read through their hooks
(:func:`attnspec.models.capture`), which materialize the weights of the layer.

Peak memory of this step beyond the model's own forward pass, per batch of ``B`` texts padded to
``L`` tokens: the recorded queries, keys and values (``B L (H + 2 H_kv) d`` numbers per layer, in the
model's dtype) of one layer at a time when :func:`record` streams them to the forward cache (its ``sink``;
the CPU default), of all layers otherwise; the allowed sets (``B L^2`` bytes per distinct mask, shared by the
layers that have it) and one tile of ``B H r L`` float32 weights per worker thread, with
``r = max(1, tile_bytes / (4 B H L))`` rows. A tile reads only the leading keys that hold its rows' allowed keys
(:func:`tiles_of`): under a causal mask, ``r0 + r`` keys for the rows ``r0 .. r0 + r``, so the tiles of a long
causal text cost about half of its ``L^2``.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from ...models import AttentionSite, ModelAdapter, capture
from ...models.attention_calls import AttentionCall, grouped_matmul, record_attention_calls
from ...models.rule_mask import RuleMask, same_mask
from ..options import DEFAULT_TILE_BYTES

__all__ = ["LayerBatch", "tiles_of", "record", "layer_batches", "collect", "on_device", "compute_dtype", "tiny_layer",
           "batch_rows", "select_texts"]



@dataclass
class LayerBatch:
    """One attention layer on one batch of texts.

    Attributes
    ----------
    index : int
        Layer (site) index.
    site : AttentionSite
    valid, special : bool Tensor ``(B, L)``
        Real tokens; special tokens ([CLS], <bos>, ...). Every tensor of a layer batch is on the statistics'
        device (:attr:`device`).
    order : list of int
        Position of each text of the batch in the caller's list (seeds per text).
    allowed : bool Tensor or RuleMask ``(B, L, L)``
        Query ``i`` may attend key ``j`` (the model's own mask, padding removed; ``allowed[:, rows]`` gives the
        rows of a tile, built from the rule when the model passed no mask tensor: :mod:`attnspec.models.rule_mask`).
    values_of : callable
        ``() -> (B, H_kv, L, d_v)`` values per key/value head in ``dtype``, padding set to 0; read through
        :attr:`values`, built when the layer's statistics first need them (a batch's layer batches are made
        together, and the values of layers not yet processed then take no memory).
    weights_of : callable
        ``(rows, keys=slice(None)) -> (B, H, r, k)`` attention weights of the query rows ``rows`` on the keys
        ``keys`` (``dtype``).
    tile_rows : int
        Query rows per tile (:meth:`tiles`).
    dtype : torch.dtype
        Compute dtype of the statistics: float64 for a float64 model, float32 otherwise.
    keys : Tensor ``(B, H_kv, L_k, d)``, optional
        Keys per key/value head (after RoPE), for the key null of the fit step; None when the
        attention weights were captured without them.
    tokens : LongTensor ``(B, L)``, optional
        Token ids of the queries and keys (the content rules of per-query selection); None for inputs
        without tokens (images, EEG), cross-attention and an encoder-decoder's decoder.

    Examples
    --------
    >>> import torch
    >>> lb = tiny_layer()[2]                    # layer 0 of a 2-layer, 2-head GPT-2 on 2 texts of 6 tokens
    >>> lb.index, tuple(lb.values.shape), tuple(lb.allowed.shape), lb.groups.tolist()
    (0, (2, 2, 6, 16), (2, 6, 6), [0, 1])
    >>> A = lb.weights_of(slice(0, 3))                            # first 3 query rows: (B, H, 3, L)
    >>> tuple(A.shape), torch.allclose(A.sum(-1), torch.ones(())), bool((A[..., 0, 1:] == 0).all())  # causal
    ((2, 2, 3, 6), True, True)
    >>> bool(torch.equal(lb.weights_of(slice(0, 4), slice(0, 4)), lb.weights_of(slice(0, 4))[..., :4]))  # the keys
    True
    """

    index: int
    site: AttentionSite
    valid: torch.Tensor
    special: torch.Tensor
    order: list
    allowed: "torch.Tensor | RuleMask"
    values_of: Callable[[], torch.Tensor]
    weights_of: Callable[[slice], torch.Tensor]
    tile_rows: int
    dtype: torch.dtype = torch.float32
    keys: torch.Tensor | None = None
    tokens: torch.Tensor | None = None

    @functools.cached_property
    def values(self) -> torch.Tensor:
        """Values per key/value head ``(B, H_kv, L, d_v)`` (:attr:`values_of`, built once)."""
        return self.values_of()

    @property
    def lengths(self) -> torch.Tensor:
        return self.valid.sum(1)

    @property
    def device(self) -> torch.device:
        """Where the layer's statistics run."""
        return self.valid.device

    @functools.cached_property
    def groups(self) -> torch.Tensor:
        """Key/value head of each query head ``(H,)``."""
        return torch.tensor([self.site.kv_group(h) for h in range(self.site.n_heads)], device=self.device)

    def tiles(self) -> Iterator[tuple[slice, slice]]:
        """The tiles of the layer's attention rows, ``(rows, keys)`` (:func:`tiles_of`)."""
        return tiles_of(self.allowed, self.tile_rows)

    def grouped_values(self) -> torch.Tensor:
        """Values of each query head's key/value head ``(B, H, L, d_v)`` (a copy; :meth:`attend` needs none)."""
        return self.values[:, self.groups]

    @functools.cached_property
    def group_size(self) -> int | None:
        """Query heads ``g`` per key/value head when each group's query heads are consecutive (query head ``h``
        reads key/value head ``h // g``: every grouped-query model here), else None."""
        H, Hkv = self.site.n_heads, self.values.shape[1]
        g = H // Hkv if Hkv and H % Hkv == 0 else 0
        consecutive = g and torch.equal(self.groups.cpu(), torch.arange(Hkv).repeat_interleave(g))
        return g if consecutive else None

    def attend(self, A: torch.Tensor, keys: slice, values: torch.Tensor | None = None) -> torch.Tensor:
        """``A V`` ``(b, H, r, d_v)``: each query head's weights ``A`` ``(b, H, r, k)`` on the keys ``keys`` times its
        key/value head's values (``values`` ``(b, H_kv, L, d_v)``, default :attr:`values`; e.g. some of its texts).
        The query heads of a key/value group are one product, side by side (``(g r, k) @ (k, d_v)``), so the
        values are never copied per query head.

        Examples
        --------
        >>> import torch
        >>> lb = tiny_layer()[2]
        >>> A = lb.weights_of(slice(0, 3), slice(0, 6))
        >>> bool(torch.equal(lb.attend(A, slice(0, 6)), A @ lb.grouped_values()))
        True
        """
        V = (self.values if values is None else values)[:, :, keys]
        return A @ V[:, self.groups] if self.group_size is None else grouped_matmul(A, V)

    def grouped_keys(self) -> torch.Tensor | None:
        """Keys each query head reads ``(B, H, L_k, d)`` (None when the attention was captured without them)."""
        return None if self.keys is None else self.keys[:, self.groups]


def on_device(batch: dict, adapter: ModelAdapter) -> dict:
    """``batch`` with its token tensors on the model's device (the CPU copies stay in ``batch``).

    Parameters
    ----------
    batch : dict
        ``input_ids``, ``attention_mask`` (moved) and other entries (kept as they are).
    adapter : ModelAdapter

    Returns
    -------
    dict
        ``batch`` itself when the model is on the CPU, else a copy with ``input_ids`` and ``attention_mask``
        on the model's device.

    Examples
    --------
    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> ad, batch = tiny_causal_lm()
    >>> on_device(batch, ad) is batch                             # a CPU model: nothing to move
    True
    """
    p = next(adapter.model.parameters(), None)
    if p is None or p.device.type == "cpu":
        return batch
    return {k: v.to(p.device) if isinstance(v, torch.Tensor) and k in ("input_ids", "attention_mask") else v
            for k, v in batch.items()}


def _real_values(V: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Values with padded positions set to 0 (a model may leave NaN there: its padded query rows can be
    fully masked, and 0 * NaN would leak into the contexts)."""
    return V.masked_fill(~valid.to(V.device)[:, None, :, None], 0.0)


def tiles_of(allowed: "torch.Tensor | RuleMask", tile_rows: int) -> Iterator[tuple[slice, slice]]:
    """Tiles of the attention rows of the allowed set ``allowed`` ``(B, L, L_k)``: consecutive query-row slices
    ``rows`` of ``tile_rows`` rows covering ``0..L``, each with the leading keys ``keys = 0..k`` that hold every
    allowed key of those rows in every text (at least one key). Every statistic of a tile is a sum over allowed
    entries, so the keys beyond ``k`` add nothing: a causal tile ends at its last row (over a long text, about
    half of the work of the full rows), a bidirectional one takes the batch's longest text.

    Examples
    --------
    >>> import torch
    >>> causal = torch.ones(2, 6, 6, dtype=torch.bool).tril()          # 2 texts of 6 tokens
    >>> [(rows.stop, keys.stop) for rows, keys in tiles_of(causal, 4)]  # a causal tile's rows see keys 0..stop
    [(4, 4), (6, 6)]
    >>> padded = torch.ones(2, 6, 6, dtype=torch.bool); padded[:, :, 5] = False    # key 5: padding in both texts
    >>> [(rows.stop, keys.stop) for rows, keys in tiles_of(padded, 4)]
    [(4, 5), (6, 5)]
    """
    L = allowed.shape[1]
    for r0 in range(0, L, tile_rows):
        rows = slice(r0, min(L, r0 + tile_rows))
        seen = allowed[:, rows].any(1).any(0).nonzero()
        yield rows, slice(0, max(1, int(seen[-1]) + 1) if seen.numel() else 1)


def _tile_rows(B: int, H: int, L: int, tile_bytes: int) -> int:
    return max(1, min(L, int(tile_bytes // max(1, 4 * B * H * L))))


def compute_dtype(adapter: ModelAdapter) -> torch.dtype:
    """The dtype of the statistics: float64 for a float64 model, float32 otherwise (bfloat16/float16 models
    are read in float32).

    Parameters
    ----------
    adapter : ModelAdapter

    Returns
    -------
    torch.dtype

    Examples
    --------
    >>> import torch
    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> ad, _ = tiny_causal_lm()
    >>> before = compute_dtype(ad)
    >>> _ = ad.model.double()                                    # the same model in float64
    >>> before, compute_dtype(ad)
    (torch.float32, torch.float64)
    """
    p = next(adapter.model.parameters(), None)
    return torch.float64 if p is not None and p.dtype == torch.float64 else torch.float32


def _from_call(i: int, site: AttentionSite, call: AttentionCall, batch: dict, tile_bytes: int,
               dtype: torch.dtype, device: torch.device) -> LayerBatch:
    if call.n_heads != site.n_heads or call.n_kv_heads != site.n_kv_heads:
        raise RuntimeError(f"{site.name}: attention call has {call.n_heads} query / {call.n_kv_heads} key-value "
                           f"heads, the adapter expects {site.n_heads} / {site.n_kv_heads}")
    B, L = batch["attention_mask"].shape
    valid = batch["attention_mask"].to(device).bool()
    return LayerBatch(i, site, valid, batch["special"].to(device).bool(), batch["order"],
                      call.allowed.to(device), lambda: _real_values(call.values(dtype, device), valid),
                      lambda rows, keys=slice(None): call.weights(rows, dtype, device, keys),
                      _tile_rows(B, site.n_heads, L, tile_bytes), dtype, call.key.to(device=device, dtype=dtype),
                      _tokens(site, batch, device))


def _from_capture(i: int, site: AttentionSite, rec: dict, batch: dict, tile_bytes: int, dtype: torch.dtype,
                  device: torch.device) -> LayerBatch:
    A = rec["weights"].to(device=device, dtype=dtype)
    valid = batch["attention_mask"].to(device).bool()
    B, L = valid.shape
    allowed = site.allowed(batch["attention_mask"]).to(device)
    return LayerBatch(i, site, valid, batch["special"].to(device).bool(), batch["order"], allowed,
                      lambda: _real_values(rec["values"].to(device=device, dtype=dtype), valid),
                      lambda rows, keys=slice(None): A[:, :, rows, keys],
                      _tile_rows(B, site.n_heads, L, tile_bytes), dtype, tokens=_tokens(site, batch, device))


def _tokens(site: AttentionSite, batch: dict, device: torch.device) -> torch.Tensor | None:
    """The batch's token ids ``(B, L)`` on ``device`` where queries and keys are those tokens (self-attention of a
    single-stack model or of an encoder), else None."""
    ids = batch.get("input_ids")
    if (ids is None or getattr(site, "role", "self") != "self" or getattr(site, "stack", None) == "decoder"
            or tuple(ids.shape) != tuple(batch["attention_mask"].shape)):
        return None
    return ids.to(device)


def record(adapter: ModelAdapter, batch: dict, head_only: bool = True,
           sink: Callable[[int, AttentionCall], None] | None = None) -> list | None:
    """Run ``batch`` through the model once (no gradient): per layer what the other steps read.

    Returns one record per attention site: an :class:`AttentionCall` (transformers models, any kernel)
    or ``{"weights": (B, H, L, L), "values": (B, H_kv, L, d_v)}`` (custom modules, read by hooks).
    ``head_only``: skip the LM head when the adapter can. The model's outputs are not changed. With ``sink``
    (transformers models), each call is handed to ``sink(site index, call)`` as the forward pass makes it and
    not kept (a :class:`.forward_cache.BatchWriter` writes it to disk), and ``None`` is returned: the recorded
    inputs of one layer are in memory at a time, not those of the whole model.

    Parameters
    ----------
    adapter : ModelAdapter
    batch : dict
        ``input_ids``, ``attention_mask`` (``(B, L)``).
    head_only : bool
        Skip the LM head when the adapter can run the base model alone.
    sink : callable, optional
        ``sink(i, call)`` for the call of site ``i`` (module docstring); refused for custom modules (hooks).

    Returns
    -------
    list or None
        One record per attention site, in site order (None with ``sink``).

    Raises
    ------
    RuntimeError
        When a site's module made no attention call that could be recorded.

    Examples
    --------
    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> recs = record(*tiny_causal_lm())                           # 2 layers, 2 heads, 2 texts of 6 tokens
    >>> len(recs), type(recs[0]).__name__, tuple(recs[0].allowed.shape)
    (2, 'AttentionCall', (2, 6, 6))
    """
    sites = adapter.sites
    run = adapter.run_base if (head_only and adapter.can_reuse) else adapter.run
    if adapter.kind == "generic":
        if sink is not None:
            raise ValueError("sink: custom attention modules are read by hooks, whose records are not streamed")
        with torch.no_grad(), capture(sites) as cap:
            run(batch)
        return [{"weights": cap.weights[i], "values": cap.values[i]} for i in range(len(sites))]
    calls: dict[int, AttentionCall | None] = {}
    by_module = {id(s.module): i for i, s in enumerate(sites)}
    masks: list = []                 # the batch's distinct allowed sets: equal ones shared (B L^2 bytes each)

    def keep(call: AttentionCall) -> None:
        i = by_module.get(id(call.module))
        if i is None:
            return
        call.allowed = _shared(call.allowed, masks)
        if sink is None:
            calls[i] = call
        else:
            sink(i, call)
            calls[i] = None
    with torch.no_grad(), record_attention_calls(keep, valid=batch["attention_mask"]):
        run(on_device(batch, adapter))
    missing = [s.name for i, s in enumerate(sites) if i not in calls]
    if missing:
        raise RuntimeError(f"no attention call was recorded for {', '.join(missing[:3])}: this module does not "
                           "dispatch through transformers' attention functions")
    return None if sink is not None else [calls[i] for i in range(len(sites))]


def batch_rows(obj, idx: torch.Tensor, B: int):
    """``obj`` (a tensor or a :class:`~attnspec.models.rule_mask.RuleMask`, or a dict, list or tuple of them) with
    its first axis cut to the rows ``idx`` where that axis is the batch's ``B`` texts; other entries as they are.

    Examples
    --------
    >>> import torch
    >>> b = {"input_ids": torch.arange(6).view(3, 2), "scale": torch.ones(1, 2), "name": "x"}
    >>> r = batch_rows(b, torch.tensor([2, 0]), B=3)
    >>> r["input_ids"].tolist(), tuple(r["scale"].shape), r["name"]
    ([[4, 5], [0, 1]], (1, 2), 'x')
    """
    if isinstance(obj, torch.Tensor):
        return obj[idx.to(obj.device)] if obj.dim() and obj.shape[0] == B else obj
    if isinstance(obj, RuleMask):
        return obj.texts(idx)
    if isinstance(obj, (tuple, list)):
        return type(obj)(batch_rows(o, idx, B) for o in obj)
    if isinstance(obj, dict):
        return {k: batch_rows(v, idx, B) for k, v in obj.items()}
    return obj


def select_texts(batch: dict, records: list, keep: list[int]) -> tuple[dict, list]:
    """The texts ``keep`` (rows of the batch) of a batch and of its :func:`record` records, as if recorded alone
    (padding kept: a text's numbers do not depend on the other rows).

    Examples
    --------
    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> ad, batch = tiny_causal_lm()                               # 2 texts of 6 tokens
    >>> sub, recs = select_texts(batch, record(ad, batch), [1])
    >>> sub["order"], tuple(recs[0].query.shape), tuple(recs[0].allowed.shape)
    ([1], (1, 2, 6, 16), (1, 6, 6))
    >>> bool(torch.equal(recs[0].weights(), record(ad, batch)[0].weights()[1:]))
    True
    """
    B = int(batch["attention_mask"].shape[0])
    idx = torch.tensor(keep, dtype=torch.long)
    out = dict(batch_rows({k: v for k, v in batch.items() if k != "order"}, idx, B),
               order=[batch["order"][k] for k in keep])

    def rows(r):
        if not isinstance(r, AttentionCall):
            return batch_rows(r, idx, B)
        return dataclasses.replace(r, **{f: batch_rows(getattr(r, f), idx, B)
                                         for f in ("query", "key", "value", "allowed", "position_bias")})
    return out, [rows(r) for r in records]


def _shared(allowed, kept: list):
    """``allowed``, or the equal allowed set already in ``kept`` (appended when new): layers whose allowed sets
    are equal share one, ``B L^2`` bytes per distinct dense mask of the batch (e.g. sliding and global), not per
    layer."""
    same = next((k for k in kept if k is allowed or same_mask(k, allowed)), None)
    if same is None:
        kept.append(allowed)
        return allowed
    return same


def layer_batches(adapter: ModelAdapter, batch: dict, records: list, tile_bytes: int = DEFAULT_TILE_BYTES,
                  device: "torch.device | str" = "cpu") -> list[LayerBatch]:
    """One :class:`LayerBatch` per layer from the records of :func:`record`, its tensors on ``device``.

    Parameters
    ----------
    adapter : ModelAdapter
    batch : dict
        The batch the records come from (``attention_mask``, ``special``, ``order``).
    records : list
        :func:`record`'s result (or the same records read back from a :class:`.forward_cache.ForwardCache`).
    tile_bytes : int
        Budget of one tile of attention weights (bytes); sets :attr:`LayerBatch.tile_rows`.
    device : torch.device or str
        Where the statistics run (:func:`..statistics.devices.statistics_device`): the recorded inputs are moved
        there and the attention rows recomputed there.

    Returns
    -------
    list of LayerBatch

    Examples
    --------
    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> ad, batch = tiny_causal_lm()                               # 2 layers, 2 heads, 2 texts of 6 tokens
    >>> lbs = layer_batches(ad, batch, record(ad, batch), tile_bytes=4 * 2 * 2 * 6 * 2)   # 2 query rows a tile
    >>> [lb.index for lb in lbs], lbs[0].tile_rows, [(r.start, r.stop, k.stop) for r, k in lbs[0].tiles()]   # causal keys
    ([0, 1], 2, [(0, 2, 2), (2, 4, 4), (4, 6, 6)])
    """
    dtype, device = compute_dtype(adapter), torch.device(device)
    return [(_from_call if isinstance(r, AttentionCall) else _from_capture)(i, s, r, batch, tile_bytes, dtype, device)
            for i, (s, r) in enumerate(zip(adapter.sites, records))]


def collect(adapter: ModelAdapter, batch: dict, tile_bytes: int = DEFAULT_TILE_BYTES,
            head_only: bool = True, device: "torch.device | str" = "cpu") -> list[LayerBatch]:
    """:func:`record` then :func:`layer_batches`: one forward pass, one :class:`LayerBatch` per layer.

    Parameters
    ----------
    adapter : ModelAdapter
    batch : dict
        ``input_ids``, ``attention_mask``, ``special`` (``(B, L)``) and ``order`` (the texts' positions).
    tile_bytes : int
        Budget of one tile of attention weights (bytes).
    head_only : bool
        Skip the LM head when the adapter can.
    device : torch.device or str
        Where the statistics run (:func:`layer_batches`).

    Returns
    -------
    list of LayerBatch
        One per attention site, in site order, the same as ``layer_batches(adapter, batch, record(adapter,
        batch, head_only), tile_bytes, device)``.

    Examples
    --------
    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> lbs = collect(*tiny_causal_lm(), tile_bytes=500)   # 2 texts of 6 tokens, 2 heads: 500 // (4 * 24) = 5 rows a tile
    >>> len(lbs), lbs[1].site.n_heads, lbs[1].lengths.tolist(), lbs[1].tile_rows
    (2, 2, [6, 6], 5)
    """
    return layer_batches(adapter, batch, record(adapter, batch, head_only), tile_bytes, device)


def tiny_layer(layer: int = 0, seed: int = 0) -> tuple[ModelAdapter, dict, LayerBatch]:
    """The tiny model of :func:`attnspec.models.tiny.tiny_causal_lm`, its batch of 2 texts of 6 tokens and
    attention layer ``layer`` recorded on it.

    One forward pass of :func:`attnspec.models.tiny.tiny_causal_lm`'s batch through
    :func:`collect` (default tile budget: the 6 query rows in one
    tile); the layer batch holds the layer's values ``(B, H_kv, L, d_v) = (2, 2, 6, 16)``, its causal
    allowed set ``(B, L, L)`` and its attention rows on demand.

    Parameters
    ----------
    layer : int
        Attention layer to return, 0 or 1.
    seed : int
        Seed of the model's weights and of the token ids (as in :func:`tiny_causal_lm`).

    Returns
    -------
    adapter : ModelAdapter
    batch : dict
    layer_batch : LayerBatch

    Raises
    ------
    ValueError
        When ``layer`` is not 0 or 1.

    Examples
    --------
    >>> ad, batch, lb = tiny_layer(1)
    >>> lb.index, lb.site is ad.sites[1], lb.order, tuple(lb.values.shape), lb.tile_rows
    (1, True, [0, 1], (2, 2, 6, 16), 6)
    >>> bool(lb.allowed[0].equal(torch.ones(6, 6, dtype=torch.bool).tril()))   # causal
    True
    """
    if layer not in (0, 1):
        raise ValueError(f"layer must be 0 or 1 (the tiny model has 2 attention layers), got {layer!r}")
    from ...models.tiny import tiny_causal_lm

    adapter, batch = tiny_causal_lm(seed)
    return adapter, batch, collect(adapter, batch)[layer]
