"""How :mod:`.distributed` deals batches and heads out to tasks: contiguous groups of about equal cost.

Helpers of the cluster diagnosis only (nothing public): the parts keep the batches' order, so merging the
tasks' accumulators in task order gives the one-process sums. Tasks are *run* longest first (a Dask
``priority`` from :func:`priority`), so that the long tail of a step (the longest texts) starts at once
rather than last, while they are *merged* in task order.
"""
from __future__ import annotations

from typing import Sequence

__all__: list[str] = []


def split_by_cost(items: Sequence, cost: Sequence[float], n: int) -> list[list]:
    """``items`` cut into ``min(n, len(items))`` contiguous non-empty parts, the ``k``-th cut where the
    running cost comes nearest to ``k / n`` of the total."""
    m = len(items)
    if m == 0:
        return []
    n = max(1, min(n, m))
    cum = [0.0]
    for c in cost:
        cum.append(cum[-1] + float(c))
    cuts = [0]
    for k in range(1, n):
        target = cum[-1] * k / n
        cuts.append(min(range(cuts[-1] + 1, m - (n - k) + 1), key=lambda j: abs(cum[j] - target)))
    cuts.append(m)
    return [list(items[a:b]) for a, b in zip(cuts[:-1], cuts[1:])]


def groups(batches: Sequence[dict], n: int) -> list[list[dict]]:
    """``batches`` in at most ``n`` contiguous groups of about equal padded size (``B x L``)."""
    return split_by_cost(batches, [int(b["attention_mask"].numel()) for b in batches], n)


def priority(batches: Sequence[dict], n_heads: int = 1) -> int:
    """Dask priority of a task on ``batches`` (higher runs first): its work ``n_heads x sum B L^2``, the
    per-token cost of attention and of the per-head statistics growing with the length ``L``."""
    return int(max(1, n_heads) * sum(int(b["attention_mask"].numel()) * int(b["attention_mask"].shape[-1])
                                     for b in batches))


def removal_jobs(rm_batches: list, n_heads: list, heads_of: dict | None, n: int, max_tokens: int,
                 n_fine: int | None = None) -> list:
    """``(batches, heads_of)`` of the exact-removal tasks: about ``n`` of them, or up to ``n_fine``.

    With at least ``n`` removal batches: up to ``n_fine`` (default ``n``) groups of batches, every chosen
    head (a batch's heads share its prefix forward pass, so batches are never split). With fewer (a large model
    on few texts): one batch per task and the batch's chosen heads split into ``(layer, head block)``
    units, a block being the ``K`` heads that one suffix forward pass removes together (so every pass
    is the one-process pass), units grouped by cost (suffix depth x heads)."""
    if len(rm_batches) >= n:
        return [(g, heads_of) for g in groups(rm_batches, max(n, n_fine or n))]
    per, jobs = -(-n // len(rm_batches)), []
    for b in rm_batches:
        B, L = b["attention_mask"].shape
        units = []
        for i, H in enumerate(n_heads):
            chosen = list(range(H)) if heads_of is None else sorted(heads_of.get(i, ()))
            K = max(1, min(H, max_tokens // max(1, int(B) * int(L))))
            units += [(i, chosen[h:h + K]) for h in range(0, len(chosen), K)]
        for part in split_by_cost(units, [len(hs) * (len(n_heads) - i) for i, hs in units], per):
            ho: dict = {}
            for i, hs in part:
                ho.setdefault(i, []).extend(hs)
            jobs.append(([b], ho))
    return jobs
