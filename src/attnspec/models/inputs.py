"""Turning texts (or tensors) into length-bucketed batches.

Texts are tokenized once, sorted by length and cut into buckets of ``bucket_size`` texts, each padded
(right side) only to its own longest text, so that short texts do not pay for long ones. Every batch
is a dict with ``input_ids``, ``attention_mask`` (1 = real token) and ``special`` (True for special
tokens such as [CLS], [SEP], <bos>; excluded as queries from the confidence baseline), plus
``order``: the positions of its texts in the caller's list.

For models without a tokenizer (``nn.MultiheadAttention``, custom modules) pass a dict
``{"args": (x,), "kwargs": {...}, "attention_mask": mask}`` or a tensor ``x`` of shape ``(B, L, D)``;
it becomes a single batch.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

__all__ = ["make_batches"]


def make_batches(tokenizer_or_inputs: Any, texts: Sequence[str] | None = None, max_length: int = 128,
                 bucket_size: int = 16, first_id: int = 0) -> list[dict[str, Any]]:
    """Length-bucketed batches (see module docstring); ``first_id`` is the position of ``texts[0]`` in the
    caller's whole corpus (a shard of a larger corpus keeps its texts' global positions in ``order``)."""
    if not isinstance(bucket_size, int) or bucket_size < 1:
        raise ValueError(f"bucket_size must be an integer >= 1, got {bucket_size!r}")
    obj = tokenizer_or_inputs
    if isinstance(obj, torch.Tensor):
        return [{"args": (obj,), "kwargs": {}, "attention_mask": torch.ones(obj.shape[:2], dtype=torch.long),
                 "special": torch.zeros(obj.shape[:2], dtype=torch.bool), "order": list(range(obj.shape[0]))}]
    if isinstance(obj, dict) and "args" in obj:
        x = obj["args"][0]
        mask = obj.get("attention_mask")
        mask = torch.ones(x.shape[:2], dtype=torch.long) if mask is None else mask.long()
        return [{"args": tuple(obj["args"]), "kwargs": dict(obj.get("kwargs", {})), "attention_mask": mask,
                 "special": torch.zeros(mask.shape, dtype=torch.bool), "order": list(range(mask.shape[0]))}]
    if hasattr(obj, "keys") and "input_ids" in obj:  # a BatchEncoding / dict of token ids
        ids = torch.as_tensor(obj["input_ids"])
        mask = torch.as_tensor(obj.get("attention_mask", torch.ones_like(ids)))
        special = torch.as_tensor(obj["special_tokens_mask"]).bool() if "special_tokens_mask" in obj \
            else torch.zeros_like(ids, dtype=torch.bool)
        return [{"input_ids": ids, "attention_mask": mask.long(), "special": special,
                 "order": list(range(ids.shape[0]))}]
    if texts is None:
        raise ValueError("texts are required when a tokenizer is given")
    texts = [str(t) for t in texts]
    if not texts:
        raise ValueError("texts is empty")
    tok = obj
    enc = tok(texts, truncation=True, max_length=max_length, return_special_tokens_mask=True)
    lengths = [len(x) for x in enc["input_ids"]]
    order = sorted(range(len(texts)), key=lambda i: lengths[i])
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    batches = []
    for start in range(0, len(order), bucket_size):
        idx = order[start:start + bucket_size]
        L = max(lengths[i] for i in idx)
        ids = torch.full((len(idx), L), pad, dtype=torch.long)
        mask = torch.zeros((len(idx), L), dtype=torch.long)
        special = torch.zeros((len(idx), L), dtype=torch.bool)
        for r, i in enumerate(idx):
            n = lengths[i]
            ids[r, :n] = torch.tensor(enc["input_ids"][i])
            mask[r, :n] = 1
            special[r, :n] = torch.tensor(enc["special_tokens_mask"][i], dtype=torch.bool)
        batches.append({"input_ids": ids, "attention_mask": mask, "special": special,
                        "order": [first_id + i for i in idx]})
    return batches
