"""Step 4, removal and importance: exact head removal and Michel et al. gradient importance, as sums.

Exact removal (:func:`attnspec.models.ablation.removal_effects`) returns, per (layer, head), the summed
effect over texts (or predicted tokens) and its normalizer; gradient importance the summed
``|dL_b / d xi_h|`` over texts. Both are sums, so :class:`RemovalSums` merges by addition and the
mean effect is ``effect / count``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from ...models import ModelAdapter, michel_importance
from ...models.ablation import removal_effects

__all__ = ["RemovalSums"]


@dataclass
class RemovalSums:
    """Mergeable sums of step 4 (arrays ``(n_layers, H_max)``; 0 until updated)."""

    effect: np.ndarray | float = 0.0
    count: np.ndarray | float = 0.0
    effect_mean: np.ndarray | float = 0.0
    count_mean: np.ndarray | float = 0.0
    michel: np.ndarray | float = 0.0
    michel_texts: int = 0

    def add_removal(self, adapter: ModelAdapter, batches: Sequence[dict], mean_ablation: bool,
                    means: Sequence[torch.Tensor] | None, max_tokens: int, progress: Callable | None = None
                    ) -> "RemovalSums":
        """Exact removal (zero, and mean ablation when asked) over ``batches``."""
        e, c = removal_effects(adapter, batches, max_tokens=max_tokens, progress=progress)
        self.effect, self.count = self.effect + e, self.count + c
        if mean_ablation:
            e, c = removal_effects(adapter, batches, mode="mean", means=means, max_tokens=max_tokens,
                                   progress=progress)
            self.effect_mean, self.count_mean = self.effect_mean + e, self.count_mean + c
        return self

    def add_importance(self, adapter: ModelAdapter, batch: dict, seed: int) -> "RemovalSums":
        """Michel et al. importance of one batch (summed over its texts)."""
        self.michel = self.michel + np.nan_to_num(michel_importance(adapter, batch, seed=seed))
        self.michel_texts += int(batch["attention_mask"].shape[0])
        return self

    def merge(self, other: "RemovalSums") -> "RemovalSums":
        return RemovalSums(self.effect + other.effect, self.count + other.count,
                           self.effect_mean + other.effect_mean, self.count_mean + other.count_mean,
                           self.michel + other.michel, self.michel_texts + other.michel_texts)

    def mean_effect(self, mean_ablation: bool = False) -> np.ndarray:
        e, c = (self.effect_mean, self.count_mean) if mean_ablation else (self.effect, self.count)
        return np.asarray(e, dtype=float) / np.maximum(np.asarray(c, dtype=float), 1)

    def importance(self) -> np.ndarray:
        """Mean ``|dL/dxi_h|`` per text."""
        return np.asarray(self.michel, dtype=float) / max(self.michel_texts, 1)
