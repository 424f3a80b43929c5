"""A tiny random causal LM and one batch for it: the models of the docstring Examples.

Two GPT-2 blocks of width 32 with 2 heads over a 50-token vocabulary, seeded, built in memory (nothing
is read or downloaded), and two texts of 6 random token ids. Small enough that an example removing
every head runs in milliseconds.

:func:`tiny_causal_lm` gives the model and its batch (:func:`attnspec.diagnostics.pipeline.collect.tiny_layer`
adds one attention layer as the diagnosis steps read it). Nothing in the package imports this module outside
docstrings.
"""
from __future__ import annotations

import torch

from .adapters import ModelAdapter, adapt

__all__ = ["tiny_causal_lm"]


def tiny_causal_lm(seed: int = 0, n_texts: int = 2, length: int = 6, n_layers: int = 2) -> tuple[ModelAdapter, dict]:
    """A seeded 2-head GPT-2 of ``n_layers`` layers (``transformers.GPT2LMHeadModel``, eval mode) and a batch of
    ``n_texts`` random texts of ``length`` tokens (``input_ids``, ``attention_mask``, ``special`` (none),
    ``order``).

    Examples
    --------
    >>> ad, batch = tiny_causal_lm()
    >>> ad.kind, len(ad.sites), ad.sites[0].n_heads, tuple(batch["input_ids"].shape)
    ('causal-lm', 2, 2, (2, 6))
    """
    import transformers

    cfg = transformers.GPT2Config(n_embd=32, n_layer=n_layers, n_head=2, vocab_size=50, n_positions=16,
                                  bos_token_id=0, eos_token_id=0)
    torch.manual_seed(seed)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(0, 50, (n_texts, length), generator=torch.Generator().manual_seed(seed))
    batch = {"input_ids": ids, "attention_mask": torch.ones(n_texts, length, dtype=torch.long),
             "special": torch.zeros(n_texts, length, dtype=torch.bool), "order": list(range(n_texts))}
    return adapt(model), batch
