"""The standard attention probes, read from a model's own eager attention weights.

These are the checks a researcher runs first on a model's heads, used here as an external reference
for the diagnosis' per-query selection statistic (docs/validity.md):

* **previous-token score** (:func:`previous_token_scores`): per head, the mean attention weight from
  query ``i`` to key ``i - 1``, over the real, non-special queries ``i >= 1`` of the given texts;
* **induction score** (:func:`induction_scores`, Olsson et al. 2022, *In-context learning and induction
  heads*): per head, on sequences of ``length`` random distinct tokens repeated twice (``r r``, after
  the tokenizer's own leading special token, if it adds one), the mean attention weight from each
  position of the second copy to the token *after* the earlier occurrence of its token
  (query ``r_k`` in the second copy, key ``r_{k+1}`` in the first; ``k = length - 1`` reads the
  first token of the second copy). Seeded: the same seed gives the same sequences.

:func:`query_selection_from_attention` computes the diagnosis' per-query selection statistic
(:mod:`attnspec.diagnostics.statistics.query_selection`) from the same eager weights, for benchmarks
and tests that need it without running a diagnosis.

The probes take a transformers model (``output_attentions=True``) and switch it to the eager attention
kernel for the call (other kernels return no weights), restoring its kernel afterwards. They return
``(n_layers, n_heads)`` float64 arrays.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Sequence

import numpy as np
import torch

__all__ = ["previous_token_scores", "offset_scores", "induction_scores", "duplicate_token_scores", "attention_weights",
           "eager_attention", "top_decile", "query_selection_from_attention"]


@contextmanager
def eager_attention(model):
    """Run the model with the eager attention kernel inside the block (restored on exit).

    Examples
    --------
    >>> from attnspec.models import load_model
    >>> model, _ = load_model("minilm")
    >>> with eager_attention(model):
    ...     model.config._attn_implementation
    'eager'
    """
    before = getattr(model.config, "_attn_implementation", None)
    changed = before not in (None, "eager")
    if changed:
        if hasattr(model, "set_attn_implementation"):
            model.set_attn_implementation("eager")
        else:
            model.config._attn_implementation = "eager"
    try:
        yield model
    finally:
        if changed:
            if hasattr(model, "set_attn_implementation"):
                model.set_attn_implementation(before)
            else:
                model.config._attn_implementation = before


def attention_weights(model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
                      ) -> list[torch.Tensor]:
    """Per layer the ``(B, H, L, L)`` float32 attention weights of one batch (eager kernel, no gradient).

    Examples
    --------
    >>> import torch
    >>> from attnspec.models import load_model
    >>> model, tok = load_model("minilm")
    >>> enc = tok(["The cat sat on the mat."], return_tensors="pt")
    >>> A = attention_weights(model, enc["input_ids"], enc["attention_mask"])
    >>> len(A), tuple(A[0].shape[:2]), bool(torch.allclose(A[0].sum(-1), torch.ones(())))
    (6, (1, 12), True)
    """
    p = next(model.parameters())
    kw = {"input_ids": input_ids.to(p.device)}
    if attention_mask is not None:
        kw["attention_mask"] = attention_mask.to(p.device)
    with torch.no_grad(), eager_attention(model):
        out = model(**kw, output_attentions=True)
    atts = getattr(out, "attentions", None)
    if not atts or any(a is None for a in atts):
        raise RuntimeError(f"{type(model).__name__} returned no attention weights with output_attentions=True")
    return [a.detach().float().cpu() for a in atts]


def _special_mask(tokenizer, ids: torch.Tensor) -> torch.Tensor:
    special = torch.tensor(sorted(set(getattr(tokenizer, "all_special_ids", []) or [])), dtype=ids.dtype)
    return torch.isin(ids, special)


def previous_token_scores(model, tokenizer, texts: Sequence[str], max_length: int = 128,
                          batch_size: int = 8) -> np.ndarray:
    """Mean attention from query ``i`` to key ``i - 1`` per head (module docstring), ``(n_layers, H)``:
    :func:`offset_scores` at offset -1.

    Examples
    --------
    >>> from attnspec.models import load_model
    >>> model, tok = load_model("minilm")
    >>> s = previous_token_scores(model, tok, ["The cat sat on the mat.", "A dog ran home, then it slept."])
    >>> s.shape, round(float(s[0, 2]), 2)          # MiniLM layer 0 head 2: a previous-token head
    ((6, 12), 1.0)
    """
    return offset_scores(model, tokenizer, texts, -1, max_length, batch_size)


def offset_scores(model, tokenizer, texts: Sequence[str], offset: int, max_length: int = 128,
                  batch_size: int = 8) -> np.ndarray:
    """Mean attention from query ``i`` to key ``i + offset`` per head, ``(n_layers, H)`` (``offset = -1``: the
    previous-token probe; ``+1``: the next token, in an encoder).

    Queries: real, non-special tokens whose key ``i + offset`` is real (a special token too). Texts are truncated to
    ``max_length`` tokens and padded on the right.

    Examples
    --------
    >>> from attnspec.models import load_model
    >>> model, tok = load_model("minilm")
    >>> s = offset_scores(model, tok, ["The cat sat on the mat.", "A dog ran home, then it slept."], 1)
    >>> s.shape, bool(((s >= 0) & (s <= 1)).all())
    ((6, 12), True)
    """
    d = int(offset)
    if d == 0:
        raise ValueError("offset must be non-zero (offset 0 is the token itself)")
    total, count = None, 0.0
    side = getattr(tokenizer, "padding_side", "right")
    tokenizer.padding_side = "right"
    try:
        for b0 in range(0, len(texts), batch_size):
            enc = tokenizer(list(texts[b0:b0 + batch_size]), padding=True, truncation=True, max_length=max_length,
                            return_tensors="pt")
            ids, valid = enc["input_ids"], enc["attention_mask"].bool()
            L = ids.shape[1]
            i = torch.arange(L)
            ok = (i + d >= 0) & (i + d < L)
            key_valid = torch.zeros_like(valid)
            key_valid[:, ok] = valid[:, (i + d)[ok]]
            q = valid & ~_special_mask(tokenizer, ids) & ok[None] & key_valid
            A = torch.stack(attention_weights(model, ids, enc["attention_mask"]))       # (layers, B, H, L, L)
            target = A[..., i.clamp(0, L - 1), (i + d).clamp(0, L - 1)]                 # (layers, B, H, L)
            s = (target.double() * q[None, :, None]).sum(dim=(1, 3))
            total = s if total is None else total + s
            count += float(q.sum())
    finally:
        tokenizer.padding_side = side
    return (total / max(count, 1.0)).numpy()


def _token_pool(tokenizer) -> np.ndarray:
    """Distinct ids of the built-in corpus' tokens, special tokens left out (ordinary, frequent tokens)."""
    from ..data import builtin_texts
    ids = set()
    for t in builtin_texts(256):
        ids.update(tokenizer(t, add_special_tokens=False)["input_ids"])
    ids -= set(getattr(tokenizer, "all_special_ids", []) or [])
    return np.array(sorted(ids))


def _wrapping(tokenizer) -> tuple[list[int], list[int]]:
    """The special tokens the tokenizer puts before and after a text (e.g. ``[CLS]`` / ``[SEP]``, ``<bos>``)."""
    plain = tokenizer("hello", add_special_tokens=False)["input_ids"]
    full = tokenizer("hello")["input_ids"]
    for k in range(len(full) - len(plain) + 1):
        if full[k:k + len(plain)] == plain:
            return list(full[:k]), list(full[k + len(plain):])
    return [], []


def induction_scores(model, tokenizer, n_sequences: int = 8, length: int = 50, seed: int = 0,
                     batch_size: int = 8) -> np.ndarray:
    """Olsson et al.'s induction score per head (module docstring), ``(n_layers, H)``.

    Each sequence is ``length`` distinct tokens drawn at random (seeded) from the ordinary tokens of the
    built-in corpus, repeated twice, with the special tokens the tokenizer adds around a text (e.g.
    ``[CLS] ... [SEP]``, ``<bos> ...``).

    Examples
    --------
    >>> from attnspec.models import load_model
    >>> model, tok = load_model("minilm")
    >>> s = induction_scores(model, tok, n_sequences=2, length=20, seed=0)
    >>> s.shape, bool(((s >= 0) & (s <= 1)).all())
    ((6, 12), True)
    """
    return _repeated_scores(model, tokenizer, n_sequences, length, seed, batch_size, 1)


def duplicate_token_scores(model, tokenizer, n_sequences: int = 8, length: int = 50, seed: int = 0,
                           batch_size: int = 8) -> np.ndarray:
    """The duplicate-token score per head, ``(n_layers, H)``: on the repeated random sequences of
    :func:`induction_scores`, the mean attention from each token of the second copy to its own earlier occurrence
    (the same token in the first copy).

    Examples
    --------
    >>> from attnspec.models import load_model
    >>> model, tok = load_model("minilm")
    >>> s = duplicate_token_scores(model, tok, n_sequences=2, length=20, seed=0)
    >>> s.shape, bool(((s >= 0) & (s <= 1)).all())
    ((6, 12), True)
    """
    return _repeated_scores(model, tokenizer, n_sequences, length, seed, batch_size, 0)


def _repeated_scores(model, tokenizer, n_sequences: int, length: int, seed: int, batch_size: int,
                     shift: int) -> np.ndarray:
    """Mean attention from token ``k`` of the second copy to token ``k + shift`` of the first, per head."""
    pool = _token_pool(tokenizer)
    if len(pool) < length:
        raise ValueError(f"only {len(pool)} distinct ordinary tokens, {length} requested")
    rng = np.random.default_rng(seed)
    seqs = [rng.choice(pool, size=length, replace=False).tolist() for _ in range(n_sequences)]
    prefix, suffix = _wrapping(tokenizer)
    lead = len(prefix)
    total, count = None, 0
    for b0 in range(0, n_sequences, batch_size):
        ids = torch.tensor([prefix + s + s + suffix for s in seqs[b0:b0 + batch_size]])
        A = torch.stack(attention_weights(model, ids, torch.ones_like(ids)))          # (layers, B, H, L, L)
        k = torch.arange(length)
        qpos, kpos = lead + length + k, lead + k + shift
        s = A[..., qpos, kpos].double().sum(dim=(1, 3))                               # (layers, H)
        total = s if total is None else total + s
        count += ids.shape[0] * length
    return (total / count).numpy()


def top_decile(scores: np.ndarray) -> np.ndarray:
    """Bool mask of the heads in the top decile of a probe's scores (at least one head).

    Examples
    --------
    >>> import numpy as np
    >>> top_decile(np.arange(20.0)).nonzero()[0].tolist()
    [18, 19]
    """
    s = np.asarray(scores, dtype=float)
    k = max(1, int(round(0.1 * s.size)))
    cut = np.sort(s.ravel())[-k]
    return s >= cut


def query_selection_from_attention(model, tokenizer, texts: Sequence[str], max_length: int = 128,
                                   n_boot: int = 200, seed: int = 0, batch_size: int = 16,
                                   causal: bool | None = None) -> dict[str, np.ndarray]:
    """The per-query selection columns of every head from the model's eager attention on ``texts``.

    Allowed keys: real tokens (and ``j <= i`` when ``causal``; default: read from the weights of the
    first batch, causal when no head puts weight above the diagonal). Bootstrap weights: Poisson(1) per
    text, seeded by ``(seed, text index)``. Fine for the full-attention models of the benchmarks; a
    diagnosis reads the model's own masks (sliding windows included).

    Returns
    -------
    dict of str to numpy.ndarray
        :data:`~attnspec.diagnostics.statistics.query_selection.COLUMNS`, each ``(n_layers, H)``.

    Examples
    --------
    >>> from attnspec.models import load_model
    >>> model, tok = load_model("minilm")
    >>> from attnspec.data import builtin_texts
    >>> res = query_selection_from_attention(model, tok, builtin_texts(32), n_boot=50)
    >>> res["query_selection_rule"][0, 2], res["query_selection"][0, 2]    # layer 0 head 2
    ('offset -1', 'selective')
    """
    from ..diagnostics.statistics.query_selection import QuerySelectionSums
    acc = None
    side = getattr(tokenizer, "padding_side", "right")
    tokenizer.padding_side = "right"
    try:
        for b0 in range(0, len(texts), batch_size):
            enc = tokenizer(list(texts[b0:b0 + batch_size]), padding=True, truncation=True, max_length=max_length,
                            return_tensors="pt", return_special_tokens_mask=True)
            ids, valid = enc["input_ids"], enc["attention_mask"].bool()
            atts = attention_weights(model, ids, enc["attention_mask"])
            L = ids.shape[1]
            if causal is None:
                causal = bool(atts[0].triu(1).abs().max() < 1e-6)
            allowed = valid[:, :, None] & valid[:, None, :]
            if causal:
                allowed = allowed & torch.ones(L, L, dtype=torch.bool).tril()
            special = enc["special_tokens_mask"].bool() & valid
            w = np.stack([np.random.default_rng([seed, b0 + t]).poisson(1.0, n_boot) for t in range(ids.shape[0])], 1) \
                if n_boot else None
            if acc is None:
                acc = [QuerySelectionSums(a.shape[1], n_boot) for a in atts]
            for a, A in zip(acc, atts):
                a.update(A, slice(0, L), allowed, valid, ids, w, special)
    finally:
        tokenizer.padding_side = side
    res = [a.result() for a in acc]
    return {k: np.stack([r[k] for r in res]) for k in res[0]}
