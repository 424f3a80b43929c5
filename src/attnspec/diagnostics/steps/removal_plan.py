"""What exact removal measures (:class:`RemovalPlan`): the mode, the texts (a seeded sample or all), the scored
positions per text and the words per position of the LM loss; and the batches restricted to the sampled texts."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

__all__ = ["RemovalPlan", "sample_texts", "only_texts", "MODES", "EXACT_MODES", "SAMPLE_ABOVE_PARAMS",
           "SCREENED_POSITIONS", "SAMPLED_TEXTS", "SAMPLED_VOCAB"]

#: Removal modes (``--removal``).
MODES = ("exact", "sampled", "screened", "first-order", "none")
#: The modes that remove heads exactly (their tables have the exact-removal columns).
EXACT_MODES = ("exact", "sampled", "screened")
#: Above this many parameters ``removal="auto"`` samples (every head exactly, on a sample of the texts).
SAMPLE_ABOVE_PARAMS = 150_000_000
#: Predicted positions per text scored by exact removal in 'screened' mode unless given.
SCREENED_POSITIONS = 32
#: 'sampled' mode: texts removed exactly (a seeded sample) and words per position of the LM loss.
SAMPLED_TEXTS = 6
SAMPLED_VOCAB = 1024
#: Seed purpose of the removal's text sample (distinct from the draws of :mod:`..noise`, positions 11, screen 12).
_TEXTS_PURPOSE = 13


@dataclass(frozen=True)
class RemovalPlan:
    """What exact removal measures: the mode, the scored positions per text (``None``: all), the texts
    (corpus positions; ``None``: all) and the words per position of the LM loss (``None``: the whole
    vocabulary; else :class:`attnspec.models.lm_head.TruncatedVocab`). Every removal column (exact, first
    order, Michel importance) is measured on ``texts``.

    Examples
    --------
    >>> p = RemovalPlan.of("sampled", n_texts=16, seed=0)
    >>> p.mode, len(p.texts), p.vocab_top, p.positions                 # 6 of the 16 texts, 1,024 words
    ('sampled', 6, 1024, None)
    >>> RemovalPlan.of("screened", n_texts=16, seed=0).positions, RemovalPlan.of("exact", 16, 0).texts is None
    (32, True)
    >>> RemovalPlan.of("exact", 4, 0, removal_texts=9)
    Traceback (most recent call last):
    ...
    ValueError: removal_texts must be between 1 and the number of texts (4), got 9
    """

    mode: str
    positions: int | None = None
    texts: frozenset | None = None
    vocab_top: int | None = None

    @classmethod
    def of(cls, mode: str, n_texts: int, seed: int, removal_positions: int | None = None,
           removal_texts: int | None = None, removal_vocab: int | None = None) -> "RemovalPlan":
        """The plan of ``mode`` on a corpus of ``n_texts`` texts (defaults: module constants)."""
        if mode == "sampled":
            removal_texts = min(n_texts, SAMPLED_TEXTS) if removal_texts is None else removal_texts
            removal_vocab = SAMPLED_VOCAB if removal_vocab is None else removal_vocab
        if removal_texts is not None and not 1 <= removal_texts <= n_texts:
            raise ValueError(f"removal_texts must be between 1 and the number of texts ({n_texts}), "
                             f"got {removal_texts}")
        if mode == "screened" and removal_positions is None:
            removal_positions = SCREENED_POSITIONS
        return cls(mode, removal_positions, sample_texts(n_texts, removal_texts, seed), removal_vocab)


def sample_texts(n_texts: int, n: int | None, seed: int) -> frozenset | None:
    """A seeded sample of ``n`` of the corpus positions ``0..n_texts-1`` (``None``: all texts).

    Examples
    --------
    >>> sorted(sample_texts(10, 3, seed=0)), sample_texts(10, None, 0)
    ([7, 8, 9], None)
    """
    if n is None or n >= n_texts:
        return None
    from ...seeding import seed_of
    return frozenset(int(t) for t in np.random.default_rng(seed_of(seed, _TEXTS_PURPOSE)).choice(n_texts, n, replace=False))


def only_texts(batches: Sequence[dict], texts: frozenset | None) -> list[dict]:
    """The rows of ``batches`` whose corpus position (``order``) is in ``texts`` (empty batches dropped).

    Examples
    --------
    >>> import torch
    >>> b = {"input_ids": torch.arange(6).view(3, 2), "attention_mask": torch.ones(3, 2), "order": [4, 7, 9]}
    >>> [(x["order"], x["input_ids"].tolist()) for x in only_texts([b], frozenset({7, 9}))]
    [([7, 9], [[2, 3], [4, 5]])]
    """
    if texts is None:
        return list(batches)
    out = []
    for b in batches:
        keep = [k for k, t in enumerate(b["order"]) if t in texts]
        if keep:
            rows = _rows({k: v for k, v in b.items() if k != "order"}, torch.tensor(keep), len(b["order"]))
            out.append(dict(rows, order=[b["order"][k] for k in keep]))
    return out


def _rows(obj, idx: torch.Tensor, B: int):
    if isinstance(obj, torch.Tensor):
        return obj[idx.to(obj.device)] if obj.dim() and obj.shape[0] == B else obj
    if isinstance(obj, (tuple, list)):
        return type(obj)(_rows(o, idx, B) for o in obj)
    if isinstance(obj, dict):
        return {k: _rows(v, idx, B) for k, v in obj.items()}
    return obj
