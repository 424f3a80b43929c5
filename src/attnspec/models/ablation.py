"""Exact head removal with activation reuse, and first-order (gradient) head importance.

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

Costs at scale: the LM head is evaluated in chunks of predicted positions whose ``(rows, vocab)``
float32 logits fit :data:`LOGIT_CHUNK_BYTES` (never ``(B, L, vocab)``), and ``positions=N`` scores a
seeded sample of ``N`` predicted positions per text (exact on those positions; the blocks still see
every token). Effects are returned per text so that the caller can attach standard errors.
First-order effects (:func:`first_order`) come from one forward and one backward pass: with per-text
gates ``xi_{b,h} = 1`` on each head's output, the loss change of removing the head is
``-dNLL_b/dxi_{b,h}`` to first order (causal LMs; summed NLL of the text), and for encoders, whose
``1 - cos`` is flat at ``xi = 1``, ``(1/2) (r_b . de_b/dxi / ||e_b||)^2`` with the random probe ``r_b``
of :func:`michel_importance` (unbiased for the second-order ``(1/2) theta^2``).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch.utils.checkpoint import checkpoint

from ..seeding import seed_of
from .adapters import ModelAdapter
from .hooks import HeadEdit, ablate, capture, gate

__all__ = ["FunctionalMetric", "exact_removal", "exact_removal_per_text", "michel_importance",
           "first_order", "run_blocks", "reference_pass", "removal_effects", "iter_removal_effects", "sample_positions",
           "LOGIT_CHUNK_BYTES"]

#: Byte budget of one chunk of LM-head logits (predicted positions x vocabulary, float32).
LOGIT_CHUNK_BYTES = 64 * 2 ** 20
#: Seed purpose of the sampled positions (distinct from the diagnosis' noise purposes 1-4).
_POSITIONS_PURPOSE = 11


def sample_positions(pred_mask: torch.Tensor, order: Sequence[int], n: int | None, seed: int) -> torch.Tensor:
    """A seeded sample of ``n`` predicted positions per text (all of them when a text has fewer).

    ``pred_mask`` ``(B, L-1)`` bool; text ``b`` draws from ``seed_of(seed, 11, order[b])`` so that the sample
    depends on the text's position in the corpus only, not on its batch."""
    if n is None:
        return pred_mask
    out = torch.zeros_like(pred_mask)
    for b, t in enumerate(order):
        idx = pred_mask[b].nonzero().squeeze(1)
        if idx.numel() > n:
            g = np.random.default_rng(seed_of(seed, _POSITIONS_PURPOSE, int(t)))
            idx = idx[torch.from_numpy(np.sort(g.choice(idx.numel(), n, replace=False))).to(idx.device)]
        out[b, idx] = True
    return out


def _block_out(out: Any) -> torch.Tensor:
    return out[0] if isinstance(out, (tuple, list)) else out


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
    """Run blocks ``start..N-1`` on ``hidden`` (``(K*B, L, D)``) with each block's recorded kwargs."""
    for i in range(start, len(adapter.sites)):
        args, kwargs = block_inputs[i]
        hidden = _block_out(adapter.sites[i].block(hidden, *_replicate(tuple(args[1:]), B, K),
                                                   **_replicate(kwargs, B, K)))
    return hidden


class FunctionalMetric:
    """Reference quantities of one batch and the effect of a modified forward (see module docstring)."""

    def __init__(self, adapter: ModelAdapter, batch: dict, tail: Callable | None,
                 chunk_bytes: int = LOGIT_CHUNK_BYTES, positions: int | None = None, seed: int = 0):
        self.kind = adapter.kind
        self.mask = batch["attention_mask"].bool().to(adapter.device)
        self.tail = tail
        self.chunk_bytes = chunk_bytes
        # decoder-only LMs: logits at t predict token t + 1; encoder-decoders (decoder fed the text shifted
        # right, ModelAdapter.decoder_start): logits at t predict token t
        self.shift = 0 if getattr(adapter, "decoder_start", None) is not None else 1
        if self.kind == "causal-lm":
            s, L = self.shift, self.mask.shape[1]
            self.target = batch["input_ids"][:, s:].to(adapter.device)
            pm = self.mask[:, s:] & self.mask[:, :L - s]
            self.pred_mask = sample_positions(pm, batch.get("order", range(pm.shape[0])), positions, seed)
            self.n_tokens = int(self.pred_mask.sum())

    def counts(self) -> np.ndarray:
        """Normalizer per text ``(B,)``: scored positions (causal LM) or 1 (encoder)."""
        if self.kind == "causal-lm":
            return self.pred_mask.sum(1).cpu().numpy().astype(float)
        return np.ones(self.mask.shape[0])

    # --- causal LM: NLL summed per text, computed in token chunks (vocabularies are large)
    def nll(self, hidden: torch.Tensor, K: int = 1, grad: bool = False) -> torch.Tensor:
        """Per-replica, per-text summed NLL ``(K, B)`` from final hidden states ``(K*B, L, D)``."""
        B = self.mask.shape[0]
        h = hidden[:, :hidden.shape[1] - self.shift]
        pm = self.pred_mask.repeat(K, 1)
        tgt = self.target.repeat(K, 1)[pm]
        rows = torch.arange(K * B, device=pm.device)[:, None].expand_as(pm)[pm]
        hv = h[pm]
        out = torch.zeros(K * B, dtype=torch.float64, device=hv.device)

        def chunk_nll(hc, tc):
            logits = _at_least_float32(self.tail(hc))
            return torch.nn.functional.cross_entropy(logits, tc, reduction="none")
        s, step = 0, 1                      # the first chunk (one row) measures the vocabulary
        while s < hv.shape[0]:
            hc, tc = hv[s:s + step], tgt[s:s + step]
            nl = checkpoint(chunk_nll, hc, tc, use_reentrant=False) if grad else chunk_nll(hc, tc)
            out = out.index_add(0, rows[s:s + step], nl.double())
            s += step
            if step == 1:
                step = max(1, self.chunk_bytes // (4 * self._vocab(hc)))
        return out.view(K, B)

    def _vocab(self, hc: torch.Tensor) -> int:
        if not hasattr(self, "vocab"):
            with torch.no_grad():
                self.vocab = int(self.tail(hc[:1]).shape[-1])
        return self.vocab

    def _final(self, output: torch.Tensor, from_hidden: bool) -> torch.Tensor:
        """Encoder output: the last block's hidden states through the tail (e.g. a final norm)."""
        return self.tail(output) if from_hidden and self.tail is not None else output

    def pooled(self, out: torch.Tensor, K: int = 1) -> torch.Tensor:
        """Mean over real tokens: ``(K*B, L, D) -> (K, B, D)``."""
        B = self.mask.shape[0]
        m = self.mask.repeat(K, 1)[..., None].to(out.dtype)
        return ((out * m).sum(1) / m.sum(1)).view(K, B, -1)

    def reference(self, output: torch.Tensor, from_hidden: bool) -> None:
        """Store the unmodified quantities; ``output`` is final hidden (``from_hidden``) or model output."""
        if self.kind == "causal-lm":
            self.ref = self.nll(output)[0] if from_hidden else self._nll_from_logits(output)[0]
        else:
            self.ref = self.pooled(self._final(output, from_hidden))[0]

    def _nll_from_logits(self, logits: torch.Tensor, K: int = 1) -> torch.Tensor:
        B = self.mask.shape[0]
        lp = torch.nn.functional.cross_entropy(_at_least_float32(logits[:, :logits.shape[1] - self.shift]
                                                                 .reshape(-1, logits.shape[-1])),
                                               self.target.repeat(K, 1).reshape(-1), reduction="none")
        lp = lp.view(K * B, -1).masked_fill(~self.pred_mask.repeat(K, 1), 0.0)   # NaN at padding stays out
        return lp.sum(1).double().view(K, B)

    def effects(self, output: torch.Tensor, K: int, from_hidden: bool) -> np.ndarray:
        """Per-replica, per-text effect ``(K, B)``: the change of the text's summed NLL over its scored
        positions (causal LM; divide by :meth:`counts`) or ``1 - cos`` (encoder)."""
        if self.kind == "causal-lm":
            nll = self.nll(output, K) if from_hidden else self._nll_from_logits(output, K)
            return (nll - self.ref[None]).cpu().numpy()
        e = self.pooled(self._final(output, from_hidden), K)
        cos = torch.nn.functional.cosine_similarity(e.double(), self.ref[None].double(), dim=-1)
        return (1 - cos).cpu().numpy()


def _at_least_float32(t: torch.Tensor) -> torch.Tensor:
    """Half-precision logits in float32; float32 and float64 unchanged."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


def _edit(mode: str, heads: Sequence[int], means) -> HeadEdit:
    return HeadEdit(list(heads), mode, means)


def exact_removal(adapter: ModelAdapter, batch: dict, block_inputs: Sequence | None, metric: FunctionalMetric,
                  means: Sequence[torch.Tensor] | None = None, mode: str = "zero", max_tokens: int = 16384,
                  reuse: bool = True, progress: Callable | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Effects summed over the batch's texts ``(n_sites, H)`` and their normalizers (scored positions
    or texts), from :func:`exact_removal_per_text`."""
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


def reference_pass(adapter: ModelAdapter, batch: dict, positions: int | None = None, seed: int = 0
                   ) -> tuple[list | None, FunctionalMetric]:
    """One unmodified forward pass: each block's recorded inputs (``None`` without reuse) and the
    reference quantities of :class:`FunctionalMetric` (on ``positions`` sampled positions per text)."""
    metric = FunctionalMetric(adapter, batch, adapter.tail, positions=positions, seed=seed)
    if not adapter.can_reuse:
        with torch.inference_mode():
            metric.reference(adapter.run(batch), from_hidden=False)
        return None, metric
    last = {}
    hk = adapter.sites[-1].block.register_forward_hook(lambda m, a, o: last.__setitem__("h", _block_out(o)))
    try:
        with torch.inference_mode(), capture(adapter.sites, blocks=True, keep_weights=False) as cap:
            adapter.run_base(batch)
            metric.reference(last["h"], from_hidden=True)
    finally:
        hk.remove()
    return cap.block_inputs, metric


def iter_removal_effects(adapter: ModelAdapter, batches: Sequence[dict], mode: str = "zero",
                         means: Sequence[torch.Tensor] | None = None, max_tokens: int = 16384,
                         progress: Callable | None = None, positions: int | None = None, seed: int = 0,
                         heads_of: dict[int, Sequence[int]] | None = None):
    """Exact removal over ``batches``, yielding per batch the per-text effects ``(n_sites, H_max, B)``
    and normalizers ``(B,)`` (:func:`exact_removal_per_text`): one :func:`reference_pass` per batch.
    Small length buckets (``make_batches(..., bucket_size=4)``) waste the least arithmetic on padding."""
    for batch in batches:
        blocks, metric = reference_pass(adapter, batch, positions, seed)
        yield exact_removal_per_text(adapter, batch, blocks, metric, means=means, mode=mode, max_tokens=max_tokens,
                                     reuse=blocks is not None, progress=progress, heads_of=heads_of)


def removal_effects(adapter: ModelAdapter, batches: Sequence[dict], mode: str = "zero",
                    means: Sequence[torch.Tensor] | None = None, max_tokens: int = 16384,
                    progress: Callable | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Exact removal over ``batches``: effects summed over texts ``(n_sites, H_max)`` and their
    normalizers (scored positions or texts); the mean effect is their ratio."""
    tot = cnt = 0
    for e, c in iter_removal_effects(adapter, batches, mode, means, max_tokens, progress):
        tot, cnt = tot + np.nan_to_num(e).sum(-1), cnt + c.sum()
    return tot, np.broadcast_to(cnt, np.shape(tot)).copy()


def michel_importance(adapter: ModelAdapter, batch: dict, seed: int = 0) -> np.ndarray:
    """Per-text gate gradients ``|dL_b / d xi_{b,h}|``, summed over texts: ``(n_sites, H)``.

    Michel et al. (2019): gate each head's output by ``xi_h = 1`` and take ``E_x |dL/dxi_h|``, from one
    forward and one backward pass (gates are per text, so one backward gives every per-text gradient).
    ``L_b`` is the text's mean next-token NLL for causal LMs. Encoders have no loss: ``L_b = r_b^T
    e_b / ||e_b||`` with ``e_b`` the mean-pooled embedding and ``r_b`` a standard Gaussian vector
    (seeded by ``seed`` and the text's position ``batch['order'][b]``) projected orthogonally to the
    unmodified ``e_b``; then ``E_r |dL/dxi| = sqrt(2/pi)
    ||J_perp|| / ||e||``, the first-order size of the embedding's rotation when the head is scaled.
    """
    return first_order(adapter, batch, seed)[0]


def first_order(adapter: ModelAdapter, batch: dict, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Michel importance summed over texts ``(n_sites, H)``, first-order removal effects per text
    ``(n_sites, H, B)`` and their normalizers ``(B,)``, from one forward and one backward pass.

    With ``g_{b,h} = dF_b / dxi_{b,h}`` (``F_b`` the text's summed NLL for causal LMs, the probe
    ``r_b^T e_b / ||e_b||`` of :func:`michel_importance` for encoders): Michel ``sum_b |g_{b,h}| / n_b``
    (``sqrt(pi/2) sum_b |g_{b,h}|`` for encoders), first-order removal effect ``-g_{b,h}`` over ``n_b``
    predicted positions (``g_{b,h}^2 / 2`` per text for encoders; see the module docstring).
    """
    sites = adapter.sites
    B = batch["attention_mask"].shape[0]
    dtype = next(adapter.model.parameters()).dtype
    gates = [torch.ones(B, s.n_heads, requires_grad=True, device=adapter.device, dtype=dtype) for s in sites]
    metric = FunctionalMetric(adapter, batch, adapter.tail)
    with torch.enable_grad(), gate(sites, gates):
        if adapter.kind == "causal-lm" and adapter.tail is not None:
            loss_b = metric.nll(_hidden_before_tail(adapter, batch), 1, grad=True)[0]
        elif adapter.kind == "causal-lm":
            loss_b = metric._nll_from_logits(adapter.run(batch))[0]
        else:
            loss_b = _probe_loss(metric.pooled(adapter.run(batch))[0].double(), batch, seed)
        grads = torch.autograd.grad(loss_b.sum(), gates)
    H = max(s.n_heads for s in sites)
    g = np.full((len(sites), H, B), np.nan)
    for i, gi in enumerate(grads):
        g[i, :gi.shape[1]] = gi.double().cpu().numpy().T
    n = metric.counts()
    if adapter.kind == "causal-lm":
        return np.abs(g / np.maximum(n, 1)).sum(-1), -g, n
    return math.sqrt(math.pi / 2) * np.abs(g).sum(-1), g ** 2 / 2, n


def _probe_loss(e: torch.Tensor, batch: dict, seed: int) -> torch.Tensor:
    """``r_b^T e_b / ||e_b||`` with ``r_b`` seeded per text and projected orthogonally to ``e_b``."""
    B = e.shape[0]
    ids = batch.get("order", range(B))    # text positions: probes do not depend on batching
    r = torch.stack([torch.randn(e.shape[-1], dtype=torch.float64,
                                 generator=torch.Generator().manual_seed(seed_of(seed, t))) for t in ids]).to(e.device)
    u = (e / e.norm(dim=-1, keepdim=True)).detach()
    r = r - (r * u).sum(-1, keepdim=True) * u
    return (r * e / e.norm(dim=-1, keepdim=True)).sum(-1)


def _hidden_before_tail(adapter: ModelAdapter, batch: dict) -> torch.Tensor:
    """Final hidden states before the tail (the LM head is applied in checkpointed chunks)."""
    last = adapter.sites[-1].block
    store = {}
    h = last.register_forward_hook(lambda m, a, o: store.__setitem__("h", _block_out(o)))
    try:
        adapter.run_base(batch)
    finally:
        h.remove()
    return store["h"]
