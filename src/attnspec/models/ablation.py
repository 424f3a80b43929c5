"""Exact head removal with activation reuse (first-order importance: :mod:`.gradients`).

Functional effect of a model's output ``f`` (per text ``b``):

* causal LM: total next-token negative log-likelihood over real next tokens; the effect of removing
  a head is ``Delta L = (NLL_removed - NLL) / n_tokens`` (mean per predicted token, nats); for an
  encoder-decoder with an LM head (the decoder reads the text shifted right, teacher forcing) the
  NLL of every real token of the text given the encoder's reading of it and the tokens before it;
* encoder / generic: ``1 - cos(e_removed, e)`` with ``e`` the mean over real tokens of the final
  hidden states (mean-pooled sentence embedding), averaged over texts.

Exact ablation never runs the layers below the removed head again: a pre-hook records the input
(hidden states and keyword arguments such as masks and rotary tables) of every block in one
reference forward pass (:func:`reference_pass`), and removing a head of layer ``i`` re-runs blocks
``i..N-1`` and the tail only. Several heads are removed per forward pass by stacking ``K`` replicas
of the batch, replica ``k`` with head ``heads[k]`` removed (pre-hook on the output projection); for
transformers blocks the layer ``i`` itself computes queries, keys and attention once and only its
output projection onward runs on the ``K`` replicas. :func:`removal_effects` runs this over length
buckets (small buckets: little arithmetic on padding). Models without block structure (custom
modules, ``nn.MultiheadAttention``) fall back to one full forward pass per head.

Costs at scale: the LM head is evaluated in chunks of positions and ``positions=N`` scores a seeded
sample of ``N`` predicted positions per text (:mod:`.metric`: exact on those positions; the blocks
still see every token). Effects are returned per text so that the caller can attach standard errors.
First-order effects and Michel et al. importance, from one forward and one backward pass, are in
:mod:`.gradients` (re-exported here); with ``with_first_order`` the reference pass gives them too.
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import Any, Callable, Sequence

import numpy as np
import torch

from .adapters import ModelAdapter
from .gradients import first_order, gate_effects, head_gates, michel_importance
from .hooks import HeadEdit, ablate, capture, gate
from .metric import LOGIT_CHUNK_BYTES, FunctionalMetric, _block_out, sample_positions

__all__ = ["FunctionalMetric", "exact_removal", "exact_removal_per_text", "michel_importance",
           "first_order", "run_blocks", "reference_pass", "removal_effects", "iter_removal_effects", "sample_positions",
           "LOGIT_CHUNK_BYTES"]


def _replicate(obj: Any, B: int, K: int) -> Any:
    if K == 1:
        return obj
    if isinstance(obj, torch.Tensor):
        return obj.repeat((K,) + (1,) * (obj.dim() - 1)) if obj.dim() and obj.shape[0] == B else obj
    if isinstance(obj, tuple):
        return tuple(_replicate(o, B, K) for o in obj)
    if isinstance(obj, list):
        return [_replicate(o, B, K) for o in obj]
    if isinstance(obj, dict):
        return {k: _replicate(v, B, K) for k, v in obj.items()}
    return obj


def run_blocks(adapter: ModelAdapter, start: int, hidden: torch.Tensor, block_inputs: Sequence, B: int,
               K: int = 1) -> torch.Tensor:
    """Run blocks ``start..N-1`` on ``hidden`` (``(K*B, L, D)``) with each block's recorded kwargs.

    Examples
    --------
    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> ad, batch = tiny_causal_lm()
    >>> blocks, metric = reference_pass(ad, batch)
    >>> with torch.inference_mode():
    ...     out = run_blocks(ad, 1, blocks[1][0][0], blocks, B=2)      # blocks 1..N-1 again: the same output
    ...     ref = run_blocks(ad, 0, blocks[0][0][0], blocks, B=2)
    >>> out.shape, bool(torch.allclose(out, ref))
    (torch.Size([2, 6, 32]), True)
    """
    for i in range(start, len(adapter.sites)):
        args, kwargs = block_inputs[i]
        hidden = _block_out(adapter.sites[i].block(hidden, *_replicate(tuple(args[1:]), B, K),
                                                   **_replicate(kwargs, B, K)))
    return hidden


def _edit(mode: str, heads: Sequence[int], means) -> HeadEdit:
    return HeadEdit(list(heads), mode, means)


def exact_removal(adapter: ModelAdapter, batch: dict, block_inputs: Sequence | None, metric: FunctionalMetric,
                  means: Sequence[torch.Tensor] | None = None, mode: str = "zero", max_tokens: int = 16384,
                  reuse: bool = True, progress: Callable | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Effects summed over the batch's texts ``(n_sites, H)`` and their normalizers (scored positions
    or texts), from :func:`exact_removal_per_text`.

    Examples
    --------
    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> ad, batch = tiny_causal_lm()
    >>> blocks, metric = reference_pass(ad, batch)
    >>> e, n = exact_removal(ad, batch, blocks, metric)
    >>> e.shape, float(n[0, 0])                                     # (layers, heads); 2 texts x 5 positions
    ((2, 2), 10.0)
    """
    e, c = exact_removal_per_text(adapter, batch, block_inputs, metric, means, mode, max_tokens, reuse, progress)
    return e.sum(-1), np.broadcast_to(c.sum(), e.shape[:2]).copy()


def exact_removal_per_text(adapter: ModelAdapter, batch: dict, block_inputs: Sequence | None,
                           metric: FunctionalMetric, means: Sequence[torch.Tensor] | None = None, mode: str = "zero",
                           max_tokens: int = 16384, reuse: bool = True, progress: Callable | None = None,
                           heads_of: dict[int, Sequence[int]] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per-text effects ``(n_sites, H, B)`` (NaN for heads not removed) and normalizers ``(B,)`` of one batch.

    ``heads_of``: layer -> heads to remove (default: every head). With ``reuse`` (and block inputs
    recorded), removing head ``h`` of layer ``i`` re-runs blocks ``i..N-1``; ``K = max(1, max_tokens //
    (B*L))`` heads are removed per forward pass. When the
    adapter's blocks broadcast (``adapter.blocks_broadcast``), block ``i`` computes its attention once
    and only the output projection onward runs ``K`` times.

    Examples
    --------
    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> ad, batch = tiny_causal_lm()
    >>> blocks, metric = reference_pass(ad, batch)
    >>> e, n = exact_removal_per_text(ad, batch, blocks, metric, heads_of={1: [0]})
    >>> e.shape, n.tolist(), bool(np.isnan(e[0]).all()), bool(np.isfinite(e[1, 0]).all())
    ((2, 2, 2), [5.0, 5.0], True, True)
    >>> slow, _ = exact_removal_per_text(ad, batch, None, metric, heads_of={1: [0]}, reuse=False)
    >>> bool(np.allclose(e[1, 0], slow[1, 0], atol=1e-5))             # reuse = one full forward per head
    True
    """
    sites = adapter.sites
    H = max(s.n_heads for s in sites)
    B, L = batch["attention_mask"].shape
    tot = np.full((len(sites), H, B), np.nan)
    with torch.inference_mode():
        for i, site in enumerate(sites):
            chosen = list(range(site.n_heads)) if heads_of is None else sorted(heads_of.get(i, ()))
            K = max(1, min(site.n_heads, max_tokens // max(1, B * L))) if reuse else 1
            for h0 in range(0, len(chosen), K):
                heads = chosen[h0:h0 + K]
                k = len(heads)
                edit = _edit(mode, heads, None if means is None else means[i])
                if reuse and adapter.blocks_broadcast:
                    args, kwargs = block_inputs[i]
                    with ablate(site, edit, expand=True):   # attention of layer i once for the k removals
                        out = _block_out(site.block(*args, **kwargs))
                    out = run_blocks(adapter, i + 1, out.reshape(k * B, *out.shape[2:]), block_inputs, B, k)
                    e = metric.effects(out, k, from_hidden=True)
                else:
                    with ablate(site, edit):
                        if reuse:
                            hidden = block_inputs[i][0][0].repeat(k, 1, 1)
                            out = run_blocks(adapter, i, hidden, block_inputs, B, k)
                            e = metric.effects(out, k, from_hidden=True)
                        else:
                            out = adapter.run(batch)
                            e = metric.effects(out, 1, from_hidden=False)
                tot[i, heads] = e
                if progress:
                    progress(k)
    return tot, metric.counts()


def reference_pass(adapter: ModelAdapter, batch: dict, positions: int | None = None, seed: int = 0,
                   vocab_top: int | None = None, with_first_order: bool = False) -> tuple[list | None, FunctionalMetric]:
    """One unmodified forward pass: each block's recorded inputs (``None`` without reuse) and the
    reference quantities of :class:`FunctionalMetric` (on ``positions`` sampled positions per text, on
    ``vocab_top`` words per position when given).

    ``with_first_order`` (models that reuse block inputs): the pass also runs with head gates and one backward
    pass gives what :func:`.gradients.first_order` gives on the batch, kept in ``metric.first_order``
    (causal LMs: the LM head's gradient from the truncated vocabulary when there is one, exact there too:
    :meth:`.lm_head.TruncatedVocab.reference_grad`), so that first-order importance costs a backward pass
    instead of a forward and a backward pass of its own.

    Examples
    --------
    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> ad, batch = tiny_causal_lm()
    >>> blocks, metric = reference_pass(ad, batch)
    >>> len(blocks), metric.ref.shape                               # block inputs per layer; NLL per text
    (2, torch.Size([2]))
    >>> _, fused = reference_pass(ad, batch, with_first_order=True)
    >>> bool(np.allclose(fused.first_order[1], first_order(ad, batch)[1], atol=1e-5))   # = a separate pass
    True
    """
    metric = FunctionalMetric(adapter, batch, adapter.tail, positions=positions, seed=seed, vocab_top=vocab_top)
    if not adapter.can_reuse:
        with torch.inference_mode():
            metric.reference(adapter.run(batch), from_hidden=False)
        return None, metric
    last = {}
    hk = adapter.sites[-1].block.register_forward_hook(lambda m, a, o: last.__setitem__("h", _block_out(o)))
    gates = head_gates(adapter, batch["attention_mask"].shape[0]) if with_first_order else None
    try:
        with (torch.enable_grad() if with_first_order else torch.inference_mode()), \
                (gate(adapter.sites, gates) if with_first_order else nullcontext()), \
                capture(adapter.sites, blocks=True, keep_weights=False) as cap:
            adapter.run_base(batch)
            with torch.no_grad():
                metric.reference(last["h"].detach(), from_hidden=True)
            if with_first_order:
                grads = torch.autograd.grad(metric.gradient_loss(last["h"], seed).sum(), gates)
                metric.first_order = gate_effects(adapter, grads, metric)
    finally:
        hk.remove()
    return (_detached(cap.block_inputs) if with_first_order else cap.block_inputs), metric


def _detached(obj: Any) -> Any:
    """``obj`` (nested tuples, lists, dicts) with its tensors detached from the autograd graph."""
    if isinstance(obj, torch.Tensor):
        return obj.detach()
    if isinstance(obj, (tuple, list)):
        return type(obj)(_detached(o) for o in obj)
    if isinstance(obj, dict):
        return {k: _detached(v) for k, v in obj.items()}
    return obj


def iter_removal_effects(adapter: ModelAdapter, batches: Sequence[dict], mode: str = "zero",
                         means: Sequence[torch.Tensor] | None = None, max_tokens: int = 16384,
                         progress: Callable | None = None, positions: int | None = None, seed: int = 0,
                         heads_of: dict[int, Sequence[int]] | None = None, vocab_top: int | None = None,
                         on_reference: Callable[[FunctionalMetric], None] | None = None,
                         with_first_order: bool = False):
    """Exact removal over ``batches``, yielding per batch the per-text effects ``(n_sites, H_max, B)``
    and normalizers ``(B,)`` (:func:`exact_removal_per_text`): one :func:`reference_pass` per batch
    (LM loss on ``vocab_top`` words per position when given), whose metric is passed to ``on_reference``
    (with ``with_first_order``, its ``first_order`` holds the batch's :func:`.gradients.first_order`, from the
    reference pass itself when the model reuses block inputs).
    Small length buckets (``make_batches(..., bucket_size=4)``) waste the least arithmetic on padding.

    Examples
    --------
    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> ad, batch = tiny_causal_lm()
    >>> [e.shape for e, n in iter_removal_effects(ad, [batch])]
    [(2, 2, 2)]
    """
    for batch in batches:
        blocks, metric = reference_pass(adapter, batch, positions, seed, vocab_top, with_first_order)
        if with_first_order and metric.first_order is None:
            metric.first_order = first_order(adapter, batch, seed)
        if on_reference is not None:
            on_reference(metric)
        yield exact_removal_per_text(adapter, batch, blocks, metric, means=means, mode=mode, max_tokens=max_tokens,
                                     reuse=blocks is not None, progress=progress, heads_of=heads_of)


def removal_effects(adapter: ModelAdapter, batches: Sequence[dict], mode: str = "zero",
                    means: Sequence[torch.Tensor] | None = None, max_tokens: int = 16384,
                    progress: Callable | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Exact removal over ``batches``: effects summed over texts ``(n_sites, H_max)`` and their
    normalizers (scored positions or texts); the mean effect is their ratio.

    Examples
    --------
    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> ad, batch = tiny_causal_lm()
    >>> tot, cnt = removal_effects(ad, [batch])
    >>> e, n = next(iter_removal_effects(ad, [batch]))
    >>> bool(np.allclose(tot / cnt, e.sum(-1) / n.sum()))           # mean change of NLL per predicted token
    True
    """
    tot = cnt = 0
    for e, c in iter_removal_effects(adapter, batches, mode, means, max_tokens, progress):
        tot, cnt = tot + np.nan_to_num(e).sum(-1), cnt + c.sum()
    return tot, np.broadcast_to(cnt, np.shape(tot)).copy()
