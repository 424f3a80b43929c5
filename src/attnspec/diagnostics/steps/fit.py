"""Step 2, fit: sufficient statistics of the Gaussian-equivalent fit and the baselines, per layer.

Every statistic of this step is a sum over texts (float64), so the accumulators merge by addition and
the fits depend only on the multiset of texts:

* score sums ``N, sum S^2, sum S y, sum y^2`` per head (:func:`..identification.score_sums`), giving
  ``score_scale``, ``beta_hat``, ``alpha_hat``, ``R^2``; and the same sums under the Poisson bootstrap
  weights of the texts (:mod:`..bootstrap`, ``(n_boot, H)`` each), giving the replicates of those fits;
* entropy / confidence sums (:func:`..selection.baseline_sums`);
* the value-path power ``sum_b ||P V_h W_O^h||_F^2`` and ``sum_b l_b d_out`` (:mod:`..spectral`);
* the sum of each head's context over real tokens (mean ablation);
* the head-pair Gram sum of the centered contexts (:func:`..dependence.gram_blocks`), which the spectra
  step needs to accumulate each text's influence on the CKA (its bootstrap, :mod:`..intervals`).

The null heads are fitted the same way, pooled over all texts, once the heads' score scales are known
(:class:`NullFitSums`; they need only the allowed sets, kept by :class:`MaskStore`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from .. import dependence as dep
from .. import identification as ident
from .. import selection as sel
from .. import spectral
from ..bootstrap import N_BOOT, weighted, weights
from ..noise import Draw, TextNoise
from .collect import LayerBatch

__all__ = ["LayerFitSums", "NullFitSums", "MaskStore", "CorpusStats", "null_tile_weights"]


def _add(a: dict | None, b: dict) -> dict:
    return dict(b) if a is None else {k: a[k] + b[k] for k in a}


def _add_per_text(total: dict | None, boot: dict | None, per_text: dict, w: np.ndarray) -> tuple[dict, dict]:
    """Add per-text sums ``(B, H)`` to the totals and, weighted by ``w`` ``(n_boot, B)``, to the replicates."""
    return (_add(total, {k: v.sum(0) for k, v in per_text.items()}),
            _add(boot, {k: weighted(w, v) for k, v in per_text.items()}))


@dataclass
class LayerFitSums:
    """Mergeable per-layer sums of step 2 (see module docstring)."""

    scores: dict | None = None
    baselines: dict | None = None
    value_power: np.ndarray | float = 0.0
    value_count: float = 0.0
    context_sum: np.ndarray | float = 0.0
    n_tokens: float = 0.0
    boot_scores: dict | None = None
    gram: np.ndarray | float = 0.0

    def update(self, lb: LayerBatch, W: torch.Tensor, seed: int = 0, n_boot: int = N_BOOT) -> "LayerFitSums":
        """Add one layer batch; ``W`` is the layer's ``W_O`` ``(H d_head, d_out)``; ``seed`` and ``n_boot``
        key the texts' bootstrap weights."""
        W = W.to(lb.dtype)
        H = lb.site.n_heads
        Vg = lb.grouped_values()
        ctx = np.zeros((H, Vg.shape[-1]))
        C = torch.zeros(Vg.shape, dtype=lb.dtype)
        w = weights(seed, lb.order, n_boot)
        for rows in lb.tiles():
            A, al, q = lb.weights_of(rows), lb.allowed[:, rows], lb.valid[:, rows]
            self.scores, self.boot_scores = _add_per_text(self.scores, self.boot_scores,
                                                          ident.score_sums(A, al, per_text=True), w)
            self.baselines = _add(self.baselines, sel.baseline_sums(A, al, q, lb.special[:, rows]))
            C[:, :, rows] = A @ Vg
            ctx += (C[:, :, rows] * q[:, None, :, None]).sum(dim=(0, 2), dtype=torch.float64).numpy()
        p, c = spectral.value_power(lb.values, lb.groups, W, lb.valid)
        self.value_power = self.value_power + p
        self.value_count += c
        self.context_sum = self.context_sum + ctx
        self.gram = self.gram + dep.gram_blocks(spectral.center(C, lb.valid))
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
                            _add(self.boot_scores, other.boot_scores), self.gram + other.gram)

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
                      scale: np.ndarray, seed: int, tile_rows: int, dtype: torch.dtype = torch.float32):
    """Null-head weights of one layer batch, tile by tile: yields ``(rows, A0)`` with ``A0``
    ``(B, H, r, L)`` (:func:`..identification.null_weights`; ``K`` drawn first, then ``Q`` row by row)."""
    noise = TextNoise(seed, Draw.NULL_SCORES, layer, order, valid)
    K = noise.full((H,), (d,), dtype=dtype)
    L = valid.shape[1]
    for r0 in range(0, L, tile_rows):
        rows = slice(r0, min(L, r0 + tile_rows))
        Q = noise.rows(rows, (H,), (d,), dtype=dtype)
        yield rows, ident.null_weights(allowed[:, rows], scale, Q, K)


@dataclass
class MaskStore:
    """The allowed sets of every (batch, layer), bit-packed, identical masks of a batch stored once."""

    batches: list = field(default_factory=list)   # (valid, order, L, [mask index per layer], [packed masks])

    def add(self, layer_batches: list[LayerBatch]) -> None:
        lb0 = layer_batches[0]
        packed, which = [], []
        for lb in layer_batches:
            bits = np.packbits(lb.allowed.numpy(), axis=-1)
            for k, p in enumerate(packed):
                if np.array_equal(p, bits):
                    which.append(k)
                    break
            else:
                packed.append(bits)
                which.append(len(packed) - 1)
        self.batches.append((lb0.valid, list(lb0.order), lb0.valid.shape[1], which, packed))

    def __iter__(self):
        """Yields ``(valid, order, allowed_of_layer)`` per batch; ``allowed_of_layer(i)`` ``(B, L, L)``."""
        for valid, order, L, which, packed in self.batches:
            yield valid, order, (lambda i, w=which, p=packed, L=L:
                                 torch.from_numpy(np.unpackbits(p[w[i]], axis=-1, count=L).astype(bool)))


@dataclass
class NullFitSums:
    """Score sums of the null heads of one layer (mergeable), at the heads' fitted score scales."""

    scores: dict | None = None
    boot_scores: dict | None = None

    def update(self, allowed: torch.Tensor, valid: torch.Tensor, order, layer: int, H: int, d: int,
               scale: np.ndarray, seed: int, tile_rows: int, dtype: torch.dtype = torch.float32,
               n_boot: int = N_BOOT) -> "NullFitSums":
        w = weights(seed, order, n_boot)
        for rows, A0 in null_tile_weights(allowed, valid, order, layer, H, d, scale, seed, tile_rows, dtype):
            self.scores, self.boot_scores = _add_per_text(self.scores, self.boot_scores,
                                                          ident.score_sums(A0, allowed[:, rows], per_text=True), w)
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


@dataclass
class CorpusStats:
    """Texts, real tokens and the longest text seen (mergeable)."""

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
