"""The two model families planted models come in: a BERT encoder and a GPT-2 causal LM.

Each family says how to build a random model of a given size, where its embeddings are, what the
attention projections of a layer read (the hidden states after the layer's input normalization, if
any) and how to write one layer's per-head query/key/value/output weights. Both use MiniLM's tokenizer
(texts start with ``[CLS]``, end with ``[SEP]``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

__all__ = ["Architecture", "ARCHITECTURES"]


@dataclass(frozen=True)
class Architecture:
    """How to build and write one model family.

    Attributes
    ----------
    name : str
    causal : bool
        Queries see only earlier keys (then only negative offsets can be planted).
    build : callable
        ``(hidden, n_layers, n_heads, vocab_size, tokenizer) -> model`` (random, eval mode).
    embeddings : callable
        ``model -> (word, position, token_type or None)`` weight tensors.
    layer_input : callable
        ``(model, enc, layer) -> (B, L, D)`` float64: what the layer's Q/K/V projections read.
    write_layer : callable
        ``(model, layer, Wq, Wk, Wv, Wo)`` with ``Wq, Wk, Wv`` ``(H, d, D)`` (rows of each head's
        projection) and ``Wo`` ``(D, H, d)`` (columns of each head's output slice); biases set to 0.

    Examples
    --------
    A one-layer BERT of width 8 with 2 heads over 50 tokens (BERT's build needs no tokenizer), its
    attention weights written as zeros:

    >>> import torch
    >>> bert = ARCHITECTURES["bert"]
    >>> model = bert.build(8, 1, 2, 50, None)
    >>> W = torch.zeros(2, 4, 8, dtype=torch.float64)
    >>> bert.write_layer(model, 0, W, W, W, torch.zeros(8, 2, 4, dtype=torch.float64))
    >>> float(model.encoder.layer[0].attention.self.query.weight.detach().abs().max())
    0.0
    >>> enc = {"input_ids": torch.tensor([[1, 2, 3]]), "attention_mask": torch.ones(1, 3, dtype=torch.long)}
    >>> bert.causal, tuple(bert.layer_input(model, enc, 0).shape), [tuple(w.shape) for w in bert.embeddings(model)]
    (False, (1, 3, 8), [(50, 8), (512, 8), (2, 8)])
    """

    name: str
    causal: bool
    build: Callable[..., Any]
    embeddings: Callable[[Any], tuple]
    layer_input: Callable[[Any, dict, int], torch.Tensor]
    write_layer: Callable[..., None]


def _hidden_states(model, enc: dict, layer: int) -> torch.Tensor:
    with torch.no_grad():
        return model(**enc, output_hidden_states=True).hidden_states[layer]


def _bert_build(hidden: int, n_layers: int, n_heads: int, vocab_size: int, tokenizer):
    import transformers
    cfg = transformers.BertConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=n_layers,
                                  num_attention_heads=n_heads, intermediate_size=4 * hidden,
                                  max_position_embeddings=512, architectures=["BertModel"])
    return transformers.BertModel(cfg).eval()


def _bert_write(model, layer: int, Wq, Wk, Wv, Wo) -> None:
    D = Wo.shape[0]
    blk = model.encoder.layer[layer].attention
    with torch.no_grad():
        for lin, W in ((blk.self.query, Wq), (blk.self.key, Wk), (blk.self.value, Wv)):
            lin.weight.copy_(W.reshape(D, D))
            lin.bias.zero_()
        blk.output.dense.weight.copy_(Wo.reshape(D, D))
        blk.output.dense.bias.zero_()


def _gpt2_build(hidden: int, n_layers: int, n_heads: int, vocab_size: int, tokenizer):
    import transformers
    special = tokenizer.sep_token_id
    cfg = transformers.GPT2Config(vocab_size=vocab_size, n_embd=hidden, n_layer=n_layers, n_head=n_heads,
                                  n_positions=512, bos_token_id=tokenizer.cls_token_id, eos_token_id=special,
                                  pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False,
                                  architectures=["GPT2LMHeadModel"])
    model = transformers.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():   # unit-variance logits, so that the next-token loss depends on the hidden states
        torch.nn.init.normal_(model.lm_head.weight, std=hidden ** -0.5)
    return model


def _gpt2_input(model, enc: dict, layer: int) -> torch.Tensor:
    h = _hidden_states(model, enc, layer)
    with torch.no_grad():
        return model.transformer.h[layer].ln_1(h).double()


def _gpt2_write(model, layer: int, Wq, Wk, Wv, Wo) -> None:
    D = Wo.shape[0]
    attn = model.transformer.h[layer].attn
    with torch.no_grad():       # Conv1D: y = x W + b with W (in, out)
        attn.c_attn.weight.copy_(torch.cat([W.reshape(D, D).T for W in (Wq, Wk, Wv)], 1))
        attn.c_attn.bias.zero_()
        attn.c_proj.weight.copy_(Wo.reshape(D, D).T)
        attn.c_proj.bias.zero_()


ARCHITECTURES = {
    "bert": Architecture(
        "bert", False, _bert_build,
        lambda m: (m.embeddings.word_embeddings.weight, m.embeddings.position_embeddings.weight,
                   m.embeddings.token_type_embeddings.weight),
        lambda m, enc, layer: _hidden_states(m, enc, layer).double(), _bert_write),
    "gpt2": Architecture(
        "gpt2", True, _gpt2_build, lambda m: (m.transformer.wte.weight, m.transformer.wpe.weight, None),
        _gpt2_input, _gpt2_write),
}
