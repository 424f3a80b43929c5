"""The functional effect a head removal is measured on, per text (see :mod:`.ablation`).

* causal LM: the text's summed next-token negative log-likelihood over its scored positions (all
  predicted positions, or a seeded sample of them, :func:`sample_positions`); the LM head runs in
  chunks of positions whose ``(rows, vocab)`` float32 logits fit :data:`LOGIT_CHUNK_BYTES`; with
  ``vocab_top=k`` a removal's loss is scored on each chunk's ``k`` most likely words per position and a
  tail estimated to first order plus drawn words (:class:`.lm_head.TruncatedVocab`);
* encoder / generic: ``1 - cos(e_removed, e)`` with ``e`` the mean over real tokens of the final
  hidden states (through the model's tail, e.g. a final norm).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch.utils.checkpoint import checkpoint

from ..seeding import seed_of
from .adapters import ModelAdapter
from .lm_head import LMHead, TruncatedVocab, _at_least_float32

__all__ = ["FunctionalMetric", "sample_positions", "LOGIT_CHUNK_BYTES"]

#: Byte budget of one chunk of LM-head logits (predicted positions x vocabulary, float32).
LOGIT_CHUNK_BYTES = 64 * 2 ** 20
#: Seed purpose of the sampled positions (distinct from the diagnosis' noise purposes 1-4).
_POSITIONS_PURPOSE = 11


def sample_positions(pred_mask: torch.Tensor, order: Sequence[int], n: int | None, seed: int) -> torch.Tensor:
    """A seeded sample of ``n`` predicted positions per text (all of them when a text has fewer).

    ``pred_mask`` ``(B, L-1)`` bool; text ``b`` draws from ``seed_of(seed, 11, order[b])`` so that the sample
    depends on the text's position in the corpus only, not on its batch.

    Examples
    --------
    >>> import torch
    >>> pm = torch.ones(2, 5, dtype=torch.bool)
    >>> sample_positions(pm, [0, 1], 2, seed=0).sum(1).tolist()      # 2 of 5 positions per text
    [2, 2]
    >>> bool(torch.equal(sample_positions(pm, [1], 2, seed=0)[0], sample_positions(pm, [0, 1], 2, seed=0)[1]))
    True
    """
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


def _probe_loss(e: torch.Tensor, order: Sequence[int], seed: int) -> torch.Tensor:
    """``r_b^T e_b / ||e_b||`` with ``r_b`` seeded per text (its corpus position ``order[b]``: probes do not depend
    on batching) and projected orthogonally to ``e_b``."""
    r = torch.stack([torch.randn(e.shape[-1], dtype=torch.float64, generator=torch.Generator().manual_seed(seed_of(seed, t)))
                     for t in order]).to(e.device)
    u = (e / e.norm(dim=-1, keepdim=True)).detach()
    r = r - (r * u).sum(-1, keepdim=True) * u
    return (r * e / e.norm(dim=-1, keepdim=True)).sum(-1)


def _block_out(out: Any) -> torch.Tensor:
    return out[0] if isinstance(out, (tuple, list)) else out


class FunctionalMetric:
    """Reference quantities of one batch and the effect of a modified forward (see module docstring).

    Examples
    --------
    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> ad, batch = tiny_causal_lm()
    >>> from attnspec.models.ablation import reference_pass
    >>> blocks, metric = reference_pass(ad, batch, positions=3)
    >>> metric.counts().tolist(), metric.n_tokens                  # 3 scored positions per text
    ([3.0, 3.0], 6)
    """

    def __init__(self, adapter: ModelAdapter, batch: dict, tail: Callable | None,
                 chunk_bytes: int = LOGIT_CHUNK_BYTES, positions: int | None = None, seed: int = 0,
                 vocab_top: int | None = None):
        self.kind = adapter.kind
        self.vocab_top = vocab_top if isinstance(tail, LMHead) and tail.truncatable else None
        self.truncated: TruncatedVocab | None = None
        self.mask = batch["attention_mask"].bool().to(adapter.device)
        self.order = batch.get("order", range(self.mask.shape[0]))
        self.first_order: tuple | None = None    # (Michel, first-order effects, normalizers) of a fused pass
        self.tail = tail
        self.chunk_bytes = chunk_bytes
        # decoder-only LMs: logits at t predict token t + 1; encoder-decoders (decoder fed the text shifted
        # right, ModelAdapter.decoder_start): logits at t predict token t
        self.shift = 0 if getattr(adapter, "decoder_start", None) is not None else 1
        if self.kind == "causal-lm":
            s, L = self.shift, self.mask.shape[1]
            self.target = batch["input_ids"][:, s:].to(adapter.device)
            pm = self.mask[:, s:] & self.mask[:, :L - s]
            self.pred_mask = sample_positions(pm, self.order, positions, seed)
            self.n_tokens = int(self.pred_mask.sum())

    def counts(self) -> np.ndarray:
        """Normalizer per text ``(B,)``: scored positions (causal LM) or 1 (encoder)."""
        if self.kind == "causal-lm":
            return self.pred_mask.sum(1).cpu().numpy().astype(float)
        return np.ones(self.mask.shape[0])

    # --- causal LM: NLL summed per text, computed in token chunks (vocabularies are large)
    def nll(self, hidden: torch.Tensor, K: int = 1, grad: bool = False) -> torch.Tensor:
        """Per-replica, per-text summed NLL ``(K, B)`` from final hidden states ``(K*B, L, D)`` (on the
        truncated vocabulary once :meth:`reference` has built it, except with ``grad``: differentiable, through
        a checkpointed head; :meth:`gradient_loss` is faster where the head's rows can be read)."""
        B = self.mask.shape[0]
        h = hidden[:, :hidden.shape[1] - self.shift]
        pm = self.pred_mask.repeat(K, 1)
        tgt = self.target.repeat(K, 1)[pm]
        rows = torch.arange(K * B, device=pm.device)[:, None].expand_as(pm)[pm]
        hv = h[pm]
        out = torch.zeros(K * B, dtype=torch.float64, device=hv.device)
        if self.truncated is not None and not grad:
            nl = self.truncated.nll(self.tail.features(hv).view(K, -1, hv.shape[-1]))
            return out.index_add(0, rows, nl.reshape(-1).double()).view(K, B)

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

    def gradient_loss(self, hidden: torch.Tensor, seed: int = 0) -> torch.Tensor:
        """Per-text loss ``(B,)`` whose gradient upstream of the final hidden states ``(B, L, D)`` is what first-order
        importance differentiates (:func:`.gradients.first_order`): causal LM, the text's summed NLL over its scored
        positions (:meth:`nll`), whose gradient with respect to the final features is computed in closed form and
        entered as ``sum_p g_p . f_p`` (the value is not the NLL; from the truncated vocabulary when :meth:`reference`
        built one, :meth:`.lm_head.TruncatedVocab.reference_grad`, else :meth:`.lm_head.LMHead.nll_grad`; through
        a checkpointed head when its rows cannot be read); encoder, the seeded probe ``r_b . e_b / ||e_b||`` of the
        mean-pooled embedding."""
        if self.kind != "causal-lm":
            return _probe_loss(self.pooled(self._final(hidden, True))[0].double(), self.order, seed)
        if not (isinstance(self.tail, LMHead) and self.tail.truncatable):
            return self.nll(hidden, grad=True)[0]
        B = self.mask.shape[0]
        f = self.tail.features(hidden[:, :hidden.shape[1] - self.shift][self.pred_mask])
        if self.truncated is not None:
            g = self.truncated.reference_grad()
        else:
            g = self.tail.nll_grad(f.detach(), self.target[self.pred_mask],
                                   self.chunk_bytes // (4 * self.tail.linear.out_features))[1]
        rows = torch.arange(B, device=f.device)[:, None].expand_as(self.pred_mask)[self.pred_mask]
        lin = (g.to(f.dtype) * f).sum(-1).double()
        return torch.zeros(B, dtype=torch.float64, device=f.device).index_add(0, rows, lin)

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
        if self.kind == "causal-lm" and from_hidden and self.vocab_top:
            h = output[:, :output.shape[1] - self.shift]
            texts = torch.arange(h.shape[0], device=h.device)[:, None].expand_as(self.pred_mask)[self.pred_mask]
            self.truncated = TruncatedVocab(self.tail, self.tail.features(h[self.pred_mask]),
                                            self.target[self.pred_mask], self.vocab_top,
                                            self.chunk_bytes // (4 * self.tail.linear.out_features), texts)
            self.ref = self.nll(output)[0]
        elif self.kind == "causal-lm":
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

