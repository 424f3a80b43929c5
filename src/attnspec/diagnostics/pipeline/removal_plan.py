"""What exact removal measures (:class:`RemovalPlan`): the mode, the texts (a seeded sample or all), the scored
positions per text and the words per position of the LM loss; and the batches restricted to the sampled texts.

Samples of texts are nested: the corpus positions in one seeded order (:func:`text_order`), a sample of ``k``
texts its first ``k``, so that a sample grown by ``removal_texts='auto'`` (:mod:`.removal_agreement`) keeps the
texts already measured and every process (shards, Dask workers) agrees on it."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np
import torch

from ..options import ADAPTIVE_MODES
from .collect import batch_rows

__all__ = ["RemovalPlan", "check_removal_texts", "text_order", "sample_texts", "only_texts", "EXACT_MODES", "SAMPLE_ABOVE_PARAMS",
           "SCREENED_POSITIONS", "SAMPLED_TEXTS", "SAMPLED_VOCAB"]

#: The modes that remove heads exactly (their tables have the exact-removal columns).
EXACT_MODES = ("exact", "sampled", "screened")
#: Above this many parameters ``removal="auto"`` samples (every head exactly, on a sample of the texts).
SAMPLE_ABOVE_PARAMS = 150_000_000
#: Predicted positions per text scored by exact removal in 'screened' mode unless given.
SCREENED_POSITIONS = 32
#: 'sampled' mode: texts removed exactly first (a seeded sample; with ``removal_texts='auto'``, the default,
#: more are added as needed) and words per position of the LM loss.
SAMPLED_TEXTS = 6
SAMPLED_VOCAB = 1024
#: Seed purpose of the removal's text order (distinct from the draws of :mod:`..statistics.noise`, positions 11, screen 12).
_TEXTS_PURPOSE = 13


@dataclass(frozen=True)
class RemovalPlan:
    """What exact removal measures: the mode, the scored positions per text (``None``: all), the texts
    (corpus positions; ``None``: all) and the words per position of the LM loss (``None``: the whole
    vocabulary; else :class:`attnspec.models.lm_head.TruncatedVocab`). Every removal column (exact, first
    order, Michel importance) is measured on ``texts``.

    Adaptive (``target`` set, ``removal_texts='auto'``): ``texts`` are the first texts of the seeded order of
    the ``n_corpus`` texts, grown (:meth:`grown`) until the predicted rank agreement of the heads with the whole
    corpus (``predicted``) reaches ``target``; ``stages`` are the sample's sizes, stage by stage.

    Examples
    --------
    >>> p = RemovalPlan.of("sampled", n_texts=16, seed=0)
    >>> p.mode, len(p.texts), p.vocab_top, p.positions, p.target     # 6 of the 16 texts first, 1,024 words
    ('sampled', 6, 1024, None, 0.92)
    >>> p.grown(9).texts > p.texts, p.grown(9).stages                # nested samples
    (True, (6, 9))
    >>> RemovalPlan.of("sampled", 16, 0, removal_texts=4).target is None   # a fixed count
    True
    >>> RemovalPlan.of("screened", n_texts=16, seed=0).positions, RemovalPlan.of("exact", 16, 0).texts is None
    (32, True)
    >>> RemovalPlan.of("exact", 4, 0, removal_texts=9)
    Traceback (most recent call last):
    ...
    ValueError: removal_texts must be 'auto' or between 1 and the number of texts (4), got 9
    """

    mode: str
    positions: int | None = None
    texts: frozenset | None = None
    vocab_top: int | None = None
    seed: int = 0
    n_corpus: int | None = None
    target: float | None = None
    predicted: float | None = None
    stages: tuple = ()

    @classmethod
    def of(cls, mode: str, n_texts: int, seed: int, removal_positions: int | None = None,
           removal_texts: int | str | None = None, removal_vocab: int | None = None,
           removal_target: float | None = None) -> "RemovalPlan":
        """The plan of ``mode`` on a corpus of ``n_texts`` texts (defaults: module constants; ``removal_texts``
        ``None`` is ``'auto'`` in 'sampled' mode, all texts otherwise; ``removal_target``: the agreement
        ``'auto'`` aims at, default :data:`.removal_agreement.AGREEMENT_TARGET`)."""
        if mode == "sampled":
            removal_texts = "auto" if removal_texts is None else removal_texts
            removal_vocab = SAMPLED_VOCAB if removal_vocab is None else removal_vocab
        target = None
        check_removal_texts(removal_texts, mode, removal_target)
        if removal_texts == "auto":
            from .removal_agreement import AGREEMENT_TARGET
            removal_texts = min(n_texts, SAMPLED_TEXTS)
            target = AGREEMENT_TARGET if removal_target is None else float(removal_target)
        elif removal_texts is not None and (isinstance(removal_texts, (str, bool)) or not 1 <= removal_texts <= n_texts):
            raise ValueError(f"removal_texts must be 'auto' or between 1 and the number of texts ({n_texts}), "
                             f"got {removal_texts!r}")
        if mode == "screened" and removal_positions is None:
            removal_positions = SCREENED_POSITIONS
        k = n_texts if removal_texts is None else removal_texts
        return cls(mode, removal_positions, sample_texts(n_texts, removal_texts, seed), removal_vocab, seed, n_texts,
                   target, None, (k,) if target is not None else ())

    @property
    def n_texts(self) -> int | None:
        """Texts in the sample (``None``: all, when the corpus size is not known)."""
        return self.n_corpus if self.texts is None else len(self.texts)

    def grown(self, k: int) -> "RemovalPlan":
        """This plan on the first ``k`` texts of the seeded order (a stage added to ``stages``)."""
        return replace(self, texts=sample_texts(self.n_corpus, k, self.seed), stages=self.stages + (k,))


def check_removal_texts(removal_texts, mode: str | None = None, removal_target: float | None = None) -> None:
    """Raise ``ValueError`` unless ``removal_texts`` is ``None``, ``'auto'`` or an integer >= 1, ``'auto'``
    only with a mode of :data:`ADAPTIVE_MODES` (``mode`` resolved, when known), and ``removal_target`` is
    ``None`` or a number in (0, 1].

    Examples
    --------
    >>> check_removal_texts("auto", "sampled"), check_removal_texts(3), check_removal_texts(None, "none")
    (None, None, None)
    >>> check_removal_texts(0)
    Traceback (most recent call last):
    ...
    ValueError: removal_texts must be 'auto' or an integer >= 1, got 0
    >>> check_removal_texts("auto", "screened")
    Traceback (most recent call last):
    ...
    ValueError: removal_texts='auto' applies to removal 'exact' or 'sampled', not 'screened'
    >>> check_removal_texts("auto", removal_target=1.5)
    Traceback (most recent call last):
    ...
    ValueError: removal_target must be a number in (0, 1], got 1.5
    """
    if removal_target is not None and (isinstance(removal_target, bool) or not isinstance(removal_target, (int, float))
                                       or not 0 < removal_target <= 1):
        raise ValueError(f"removal_target must be a number in (0, 1], got {removal_target!r}")
    if removal_texts is None:
        return
    if removal_texts == "auto":
        if mode is not None and mode not in ADAPTIVE_MODES:
            raise ValueError(f"removal_texts='auto' applies to removal {' or '.join(map(repr, ADAPTIVE_MODES))}, "
                             f"not {mode!r}")
        return
    if not isinstance(removal_texts, (int, np.integer)) or isinstance(removal_texts, bool) or removal_texts < 1:
        raise ValueError(f"removal_texts must be 'auto' or an integer >= 1, got {removal_texts!r}")


def text_order(n_texts: int, seed: int) -> np.ndarray:
    """The seeded order of the corpus positions ``0..n_texts-1`` from which samples are taken (a permutation).

    Examples
    --------
    >>> text_order(10, seed=0).tolist()
    [6, 1, 5, 0, 4, 7, 2, 8, 3, 9]
    """
    from ...seeding import seed_of
    return np.random.default_rng(seed_of(seed, _TEXTS_PURPOSE)).permutation(n_texts)


def sample_texts(n_texts: int, n: int | None, seed: int) -> frozenset | None:
    """The first ``n`` of the corpus positions ``0..n_texts-1`` in their seeded order (:func:`text_order`;
    ``None``: all texts). Samples of one seed are nested.

    Examples
    --------
    >>> sorted(sample_texts(10, 3, seed=0)), sample_texts(10, None, 0), sample_texts(10, 2, 0) < sample_texts(10, 3, 0)
    ([1, 5, 6], None, True)
    """
    if n is None or n >= n_texts:
        return None
    return frozenset(int(t) for t in text_order(n_texts, seed)[:n])


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
            rows = batch_rows({k: v for k, v in b.items() if k != "order"}, torch.tensor(keep), len(b["order"]))
            out.append(dict(rows, order=[b["order"][k] for k in keep]))
    return out
