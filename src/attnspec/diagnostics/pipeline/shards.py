"""Shards of a corpus: contiguous parts of the texts, each length-bucketed, and the merge of their accumulators."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ...models import make_batches

__all__ = ["Shard", "make_shards", "merge_parts"]


@dataclass
class Shard:
    """A part of the corpus: its length-bucketed batches for the statistics and for exact removal (texts
    keep their positions in the whole corpus, so their random draws do not depend on the sharding).

    Examples
    --------
    >>> Shard(batches=[], removal_batches=[]).removal_batches
    []
    """

    batches: list
    removal_batches: list


def make_shards(tokenizer, texts: Sequence[str], n_shards: int = 1, max_length: int = 128, bucket_size: int = 16,
                removal_bucket_size: int = 4) -> list[Shard]:
    """Split ``texts`` into ``n_shards`` contiguous parts (as equal as possible) and batch each.

    Examples
    --------
    >>> from attnspec.models import load_model
    >>> _, tok = load_model("minilm")
    >>> shards = make_shards(tok, ["one text", "another text", "a third text here"], n_shards=2)
    >>> [[b["order"] for b in sh.batches] for sh in shards]           # corpus positions kept
    [[[0, 1]], [[2]]]
    """
    n = len(texts)
    cuts = [round(k * n / n_shards) for k in range(n_shards + 1)]
    return [Shard(make_batches(tokenizer, texts[a:b], max_length, bucket_size, first_id=a),
                  make_batches(tokenizer, texts[a:b], max_length, min(bucket_size, removal_bucket_size), first_id=a))
            for a, b in zip(cuts[:-1], cuts[1:]) if b > a]


def merge_parts(parts: list) -> Any:
    """Merge accumulators (or lists of per-layer accumulators) in order.

    Examples
    --------
    >>> from attnspec.diagnostics.pipeline.head_removal import RatioSums
    >>> import numpy as np
    >>> parts = [[RatioSums().update(np.array([[[x]]]), np.ones(1))] for x in (0.2, 0.6)]
    >>> merge_parts(parts)[0].mean()
    array([[0.4]])
    """
    if isinstance(parts[0], list):
        return [merge_parts([p[i] for p in parts]) for i in range(len(parts[0]))]
    out = parts[0]
    for p in parts[1:]:
        out = out.merge(p)
    return out
