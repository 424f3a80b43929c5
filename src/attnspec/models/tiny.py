"""A tiny random causal LM and one batch for it: the models of the docstring Examples.

Two GPT-2 blocks of width 32 with 2 heads over a 50-token vocabulary, seeded, built in memory (nothing
is read or downloaded), and two texts of 6 random token ids. Small enough that an example removing
every head runs in milliseconds.

:func:`tiny_causal_lm` gives the model and its batch; :func:`tiny_layer` adds one attention layer as
the diagnosis steps read it (a :class:`attnspec.diagnostics.steps.collect.LayerBatch`), the common
set-up of the examples of those steps. Nothing in the package imports this module outside docstrings.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from .adapters import ModelAdapter, adapt

if TYPE_CHECKING:                                  # the steps sit above the models; imported when called
    from ..diagnostics.steps.collect import LayerBatch

__all__ = ["tiny_causal_lm", "tiny_layer"]


def tiny_causal_lm(seed: int = 0, n_texts: int = 2, length: int = 6) -> tuple[ModelAdapter, dict]:
    """A seeded 2-layer, 2-head GPT-2 (``transformers.GPT2LMHeadModel``, eval mode) and a batch of
    ``n_texts`` random texts of ``length`` tokens (``input_ids``, ``attention_mask``, ``special`` (none),
    ``order``).

    Examples
    --------
    >>> ad, batch = tiny_causal_lm()
    >>> ad.kind, len(ad.sites), ad.sites[0].n_heads, tuple(batch["input_ids"].shape)
    ('causal-lm', 2, 2, (2, 6))
    """
    import transformers

    cfg = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=50, n_positions=16,
                                  bos_token_id=0, eos_token_id=0)
    torch.manual_seed(seed)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(0, 50, (n_texts, length), generator=torch.Generator().manual_seed(seed))
    batch = {"input_ids": ids, "attention_mask": torch.ones(n_texts, length, dtype=torch.long),
             "special": torch.zeros(n_texts, length, dtype=torch.bool), "order": list(range(n_texts))}
    return adapt(model), batch


def tiny_layer(layer: int = 0, seed: int = 0) -> tuple[ModelAdapter, dict, "LayerBatch"]:
    """The tiny model, its batch of 2 texts of 6 tokens and attention layer ``layer`` recorded on it.

    One forward pass of :func:`tiny_causal_lm`'s batch through
    :func:`attnspec.diagnostics.steps.collect.collect` (default tile budget: the 6 query rows in one
    tile); the layer batch holds the layer's values ``(B, H_kv, L, d_v) = (2, 2, 6, 16)``, its causal
    allowed set ``(B, L, L)`` and its attention rows on demand.

    Parameters
    ----------
    layer : int
        Attention layer to return, 0 or 1.
    seed : int
        Seed of the model's weights and of the token ids (as in :func:`tiny_causal_lm`).

    Returns
    -------
    adapter : ModelAdapter
    batch : dict
    layer_batch : LayerBatch

    Raises
    ------
    ValueError
        When ``layer`` is not 0 or 1.

    Examples
    --------
    >>> ad, batch, lb = tiny_layer(1)
    >>> lb.index, lb.site is ad.sites[1], lb.order, tuple(lb.values.shape), lb.tile_rows
    (1, True, [0, 1], (2, 2, 6, 16), 6)
    >>> bool(lb.allowed[0].equal(torch.ones(6, 6, dtype=torch.bool).tril()))   # causal
    True
    """
    if layer not in (0, 1):
        raise ValueError(f"layer must be 0 or 1 (the tiny model has 2 attention layers), got {layer!r}")
    from ..diagnostics.steps.collect import collect

    adapter, batch = tiny_causal_lm(seed)
    return adapter, batch, collect(adapter, batch)[layer]
