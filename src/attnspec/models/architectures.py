"""The architecture table: one declarative entry per transformers family attnspec diagnoses or refuses.

Each :class:`Architecture` says where a family keeps its layers and its query/key/value/output
projections (dotted paths), how many heads it has and how keys and values are shared (grouped-query,
multi-query), how positions enter the attention logits, how the logits are scaled and capped, which
mask each layer uses, and how attnspec reads its attention calls (``capture``):

* ``'interface'``: the module hands queries and keys (after the position encoding) and values to
  transformers' attention-function interface, which attnspec records
  (:mod:`attnspec.models.attention_calls`);
* ``'hooked:<name>'``: the module computes attention itself; a pre-hook rebuilds the same queries, keys,
  values, mask and additive position bias from the module's own projections
  (:mod:`attnspec.models.emitters`).

Detection (:func:`detect`) never trusts a name alone: the family is chosen by ``config.model_type`` when
the table lists it (else by structure), then every path of the entry must exist in the model
(:func:`resolve`). A model that claims a family but lacks its structure, or a family in
:data:`REFUSED`, raises :class:`ArchitectureError` naming the family and the reason, before any work.

:mod:`attnspec.models.architecture_table` shows the table as a ``pandas.DataFrame`` or as text
(``attnspec diagnose --list-architectures``).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from torch import nn

from .loading import ModelLoadError

__all__ = ["Architecture", "Refusal", "ArchitectureError", "ARCHITECTURES", "REFUSED", "detect", "resolve",
           "refusal_of_config"]


class ArchitectureError(ModelLoadError):
    """The model's family is refused, or it claims a family whose structure it does not have.

    Examples
    --------
    >>> import transformers
    >>> xlnet = transformers.XLNetModel(transformers.XLNetConfig(d_model=32, n_layer=1, n_head=2, d_inner=64,
    ...                                 vocab_size=100))
    >>> detect(xlnet)
    Traceback (most recent call last):
    attnspec.models.architectures.ArchitectureError: XLNetModel (model_type 'xlnet') is of the xlnet family ...
    """


@dataclass(frozen=True)
class Architecture:
    """One family: where its attention lives and what its attention computes.

    Paths are dotted attribute paths; ``layers`` is relative to the base model, the others to one layer.
    ``q``/``k``/``v`` may name the same fused module (``qkv``); ``'x|y'`` tries ``x`` then ``y``.
    ``heads``/``kv_heads`` list config keys tried in order (``None`` for ``kv_heads``: no key/value sharing).
    ``position``, ``scaling``, ``softcap`` and ``mask`` describe the family for the table (the diagnosis reads
    the actual values from each recorded call). Encoder-decoders (``kind='seq2seq'``): ``stack`` and
    ``decoder`` lead from the model to its two stacks (same layer paths), ``cross`` names the
    cross-attention module of a decoder layer, whose projections carry the self-attention's names
    (:func:`_cross_paths`); a model with an encoder only (``T5EncoderModel``) is diagnosed as its encoder;
    ``shared`` marks layer groups applied several times (ALBERT: one site per application);
    ``broadcast`` says whether the blocks broadcast over a leading replica axis in exact removal;
    ``no_reuse`` names a config key whose presence puts work between blocks (full forwards then);
    ``strict`` entries are claimed by ``model_type`` only, never by structure alone.

    Examples
    --------
    >>> bert = next(a for a in ARCHITECTURES if a.family == "bert")
    >>> bert.attention, bert.q, bert.o, bert.kv_heads
    ('attention.self', 'attention.self.query', 'attention.output.dense', None)
    """

    family: str
    examples: str
    model_types: tuple[str, ...]
    base: tuple[str, ...]
    layers: str
    attention: str
    q: str
    k: str
    v: str
    o: str
    heads: tuple[str, ...]
    kv_heads: tuple[str, ...] | None
    position: str
    scaling: str
    softcap: str
    mask: str
    capture: str = "interface"
    kind: str = "encoder"
    norm: str | None = None
    lm_head: str = "lm_head"
    strict: bool = False          # claimed by model_type only, never by structure alone
    broadcast: bool = True        # blocks broadcast over a leading replica axis (ModelAdapter.blocks_broadcast)
    no_reuse: str | None = None   # config key that, when set, puts work between blocks: full forwards only
    stack: str | None = None      # encoder-decoders: path from the model to its encoder stack
    decoder: str | None = None    # encoder-decoders: path from the model to its decoder stack
    cross: str | None = None      # cross-attention module in a decoder layer (projections named as in self-attention)
    decoder_heads: tuple[str, ...] | None = None   # config keys of the decoder's head count (default: heads)
    shared: bool = False          # layer groups applied several times (ALBERT): one site per application


@dataclass(frozen=True)
class Refusal:
    """A family attnspec refuses, and why.

    Examples
    --------
    >>> [r.family for r in REFUSED if "xlnet" in r.model_types]
    ['xlnet']
    """

    family: str
    examples: str
    model_types: tuple[str, ...]
    reason: str


_BERT_TYPES = ("bert", "roberta", "xlm-roberta", "electra", "camembert", "xlm-roberta-xl", "ernie", "data2vec-text",
               "roberta-prelayernorm")
_LLAMA_TYPES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "gemma3_text", "olmo", "olmo2",
                "olmo3", "granite", "cohere", "starcoder2", "smollm3", "glm", "helium", "ministral", "phi")
_MOE_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "granitemoe")
_DECODER_BASE = ("model", "language_model")
_SDPA = "1/sqrt(d_head)"

#: The families attnspec diagnoses, most common first.
ARCHITECTURES: tuple[Architecture, ...] = (
    Architecture("bert", "BERT, RoBERTa, XLM-R, ELECTRA, CamemBERT", _BERT_TYPES,
                 ("bert", "roberta", "electra", "model", "encoder_model"), "encoder.layer", "attention.self",
                 "attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense",
                 ("num_attention_heads",), None, "absolute (embeddings)", _SDPA, "none", "bidirectional"),
    Architecture("mpnet", "MPNet (all-mpnet-base-v2)", ("mpnet",), ("mpnet",), "encoder.layer", "attention.attn",
                 "attention.attn.q", "attention.attn.k", "attention.attn.v", "attention.attn.o",
                 ("num_attention_heads",), None, "absolute + relative bias (T5 buckets, shared by layers)", _SDPA,
                 "none", "bidirectional", capture="hooked:mpnet", strict=True),
    Architecture("albert", "ALBERT (layers share their weights)", ("albert",), ("albert",), "encoder.albert_layer_groups",
                 "albert_layers.0.attention", "albert_layers.0.attention.query", "albert_layers.0.attention.key",
                 "albert_layers.0.attention.value", "albert_layers.0.attention.dense", ("num_attention_heads",), None,
                 "absolute (embeddings)", _SDPA, "none", "bidirectional; one module applied by several layers",
                 strict=True, shared=True),
    Architecture("deberta-v2", "DeBERTa-v2, DeBERTa-v3", ("deberta-v2",), ("deberta",), "encoder.layer",
                 "attention.self", "attention.self.query_proj", "attention.self.key_proj", "attention.self.value_proj",
                 "attention.output.dense", ("num_attention_heads",), None,
                 "relative: disentangled content-to-position + position-to-content bias (log buckets)",
                 "1/sqrt(d_head * (1 + number of pos_att_type terms))", "none", "bidirectional",
                 capture="hooked:deberta-v2", strict=True, no_reuse="conv_kernel_size"),
    Architecture("t5", "T5, mT5, Flan-T5 (encoder self, decoder self and cross-attention)", ("t5", "mt5"),
                 (), "block", "layer.0.SelfAttention", "layer.0.SelfAttention.q", "layer.0.SelfAttention.k",
                 "layer.0.SelfAttention.v", "layer.0.SelfAttention.o", ("num_heads",), None,
                 "relative bias (log buckets, computed by the first layer of each stack, shared; decoder: "
                 "causal buckets; cross-attention: none)", "1 (no 1/sqrt(d_head))", "none",
                 "encoder bidirectional; decoder self causal; cross: every real encoder token", kind="seq2seq",
                 norm="final_layer_norm", strict=True, stack="encoder", decoder="decoder",
                 cross="layer.1.EncDecAttention"),
    Architecture("bart", "BART, mBART (encoder self, decoder self and cross-attention)", ("bart", "mbart"),
                 (), "layers", "self_attn", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                 "self_attn.out_proj", ("encoder_attention_heads",), None, "absolute (learned, per stack)", _SDPA,
                 "none", "encoder bidirectional; decoder self causal; cross: every real encoder token",
                 kind="seq2seq", norm="layer_norm", strict=True, stack="model.encoder|encoder",
                 decoder="model.decoder|decoder", cross="encoder_attn", decoder_heads=("decoder_attention_heads",)),
    Architecture("vit", "ViT, DeiT, DINOv2 (image inputs: attnspec.models.image_inputs)",
                 ("vit", "deit", "dinov2", "dinov2_with_registers"), ("vit", "deit", "dinov2"), "layers|encoder.layer",
                 "attention", "attention.q_proj", "attention.k_proj", "attention.v_proj", "attention.o_proj",
                 ("num_attention_heads",), None,
                 "absolute (patch positions; CLS, distillation and register tokens first)", _SDPA, "none",
                 "bidirectional, no padding", norm="layernorm", strict=True),
    Architecture("distilbert", "DistilBERT", ("distilbert",), ("distilbert",), "transformer.layer", "attention",
                 "attention.q_lin", "attention.k_lin", "attention.v_lin", "attention.out_lin", ("n_heads",), None,
                 "absolute (embeddings)", _SDPA, "none", "bidirectional"),
    Architecture("gpt2", "GPT-2, DistilGPT2", ("gpt2",), ("transformer",), "h", "attn", "attn.c_attn",
                 "attn.c_attn", "attn.c_attn", "attn.c_proj", ("n_head", "num_attention_heads"), None,
                 "absolute (embeddings)", _SDPA + " (scale_attn_by_inverse_layer_idx: also 1/(layer+1))", "none",
                 "causal", kind="causal-lm", norm="ln_f"),
    Architecture("gpt-neox", "GPT-NeoX, Pythia", ("gpt_neox",), ("gpt_neox",), "layers", "attention",
                 "attention.query_key_value", "attention.query_key_value", "attention.query_key_value",
                 "attention.dense", ("num_attention_heads",), None, "RoPE (partial, rotary_pct)", _SDPA, "none",
                 "causal", kind="causal-lm", norm="final_layer_norm", lm_head="embed_out|lm_head"),
    Architecture("llama", "Llama, Mistral, Qwen2/3, Gemma 1-3, OLMo 1-2, Phi", _LLAMA_TYPES, _DECODER_BASE,
                 "layers", "self_attn", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                 "self_attn.o_proj|self_attn.dense", ("num_attention_heads",), ("num_key_value_heads",),
                 "RoPE (Phi: partial; Qwen3/Gemma 3/OLMo 2: q/k norms first)",
                 _SDPA + " (Gemma 2/3: query_pre_attn_scalar^-1/2)", "Gemma 2: attn_logit_softcapping",
                 "causal; sliding window per layer (Mistral, Qwen2, Gemma 2/3 layer_types)", kind="causal-lm",
                 norm="norm|final_layernorm"),
    Architecture("llama-moe", "Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE (mixture-of-experts MLPs)", _MOE_TYPES,
                 _DECODER_BASE, "layers", "self_attn", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                 "self_attn.o_proj", ("num_attention_heads",), ("num_key_value_heads",), "RoPE", _SDPA, "none",
                 "causal; sliding window", kind="causal-lm", norm="norm", strict=True,
                 broadcast=False),   # expert routing reshapes its input: removals stacked on the batch axis
    Architecture("phi3", "Phi-3, Phi-3.5, Phi-4-mini", ("phi3",), _DECODER_BASE, "layers", "self_attn",
                 "self_attn.qkv_proj", "self_attn.qkv_proj", "self_attn.qkv_proj", "self_attn.o_proj",
                 ("num_attention_heads",), ("num_key_value_heads",), "RoPE (LongRoPE scaling)", _SDPA, "none",
                 "causal; sliding window", kind="causal-lm", norm="norm"),
    Architecture("falcon", "Falcon (multi-query RoPE, new decoder architecture)", ("falcon",), ("transformer",), "h",
                 "self_attention", "self_attention.query_key_value", "self_attention.query_key_value",
                 "self_attention.query_key_value", "self_attention.dense", ("num_attention_heads",),
                 ("num_kv_heads",), "RoPE (ALiBi variants refused)", _SDPA, "none", "causal",
                 capture="hooked:falcon", kind="causal-lm", norm="ln_f", strict=True,
                 broadcast=False),   # in-place residual sums in the block
)

#: Families refused before any work, with the reason.
REFUSED: tuple[Refusal, ...] = (
    Refusal("deberta", "DeBERTa (v1)", ("deberta",), "its fused in_proj with separate q/v biases and its relative "
            "attention are not recorded yet (DeBERTa-v2/v3 are supported)"),
    Refusal("seq2seq", "UMT5, LongT5, Pegasus, Marian, Blenderbot, M2M-100", ("umt5", "longt5", "pegasus", "marian",
            "blenderbot", "m2m_100"), "encoder-decoder families not verified yet (T5, mT5, BART and mBART are "
            "supported)"),
    Refusal("vision-other", "BEiT, Swin, CLIP/SigLIP vision", ("beit", "swin", "clip", "clip_vision_model", "siglip",
            "siglip_vision_model"), "relative position tables (BEiT), windowed shifted attention (Swin) or a "
            "joint text-image model (CLIP/SigLIP): not verified yet (ViT, DeiT and DINOv2 are supported)"),
    Refusal("alibi", "BLOOM, MPT, Falcon with ALiBi", ("bloom", "mpt"), "ALiBi biases are added inside the "
            "module and not recorded yet"),
    Refusal("xlnet", "XLNet, Transformer-XL, Reformer, Longformer, BigBird", ("xlnet", "transfo-xl", "reformer",
            "longformer", "big_bird"), "two-stream, memory, LSH or block-sparse attention: not a per-head softmax "
            "over the sequence that attnspec can recompute"),
)


def _get_path(obj: Any, path: str) -> Any:
    """``obj.a.b.c`` for ``path='a.b.c'``; ``'x|y'`` tries ``x`` then ``y``; ``None`` when absent."""
    for alt in path.split("|"):
        cur = obj
        for part in alt.split("."):
            cur = getattr(cur, part, None)
            if cur is None:
                break
        if cur is not None:
            return cur
    return None


def _config(model: nn.Module) -> Any:
    cfg = getattr(model, "config", None)
    return getattr(cfg, "text_config", None) or cfg


def _base_and_layers(arch: Architecture, model: nn.Module):
    """The base model (first of ``arch.base`` attributes that holds ``arch.layers``, or the model) and its layers."""
    candidates = [model] + [getattr(model, a) for a in arch.base if isinstance(getattr(model, a, None), nn.Module)]
    for c in list(candidates[1:]):
        candidates += [getattr(c, a) for a in arch.base if isinstance(getattr(c, a, None), nn.Module)]
    for base in candidates:
        layers = _get_path(base, arch.layers)
        if isinstance(layers, (nn.ModuleList, list, tuple)) and len(layers):
            return base, layers
    return None, None


def _missing(arch: Architecture, model: nn.Module) -> str | None:
    """Why ``model`` does not have ``arch``'s structure (``None``: it does)."""
    base, layers = _base_and_layers(arch, model)
    if base is None:
        return f"no layer list at {arch.layers!r}"
    for role in ("attention", "q", "k", "v", "o"):
        path = getattr(arch, role)
        for i, layer in enumerate(layers):
            if not isinstance(_get_path(layer, path), nn.Module):
                return f"layer {i} has no {role} module at {path!r} ({type(layer).__name__})"
    o = _get_path(layers[0], arch.o)
    if getattr(o, "weight", None) is None or o.weight.dim() != 2:
        return f"the output projection {arch.o!r} has no 2-D weight"
    return None


def _stack_of(arch: Architecture, model: nn.Module) -> nn.Module | None:
    """The module whose layers ``arch.layers`` names: ``model`` itself, or for encoder-decoders its encoder stack."""
    if arch.stack is None or _base_and_layers(arch, model)[0] is not None:
        return model
    return _get_path(model, arch.stack)


def _decoder_of(arch: Architecture, model: nn.Module) -> nn.Module | None:
    """The decoder stack of an encoder-decoder (``None``: not an encoder-decoder entry, or an encoder only)."""
    if arch.decoder is None or _base_and_layers(arch, model)[0] is not None:
        return None
    dec = _get_path(model, arch.decoder)
    return dec if isinstance(dec, nn.Module) else None


def _cross_paths(arch: Architecture) -> Architecture:
    """``arch`` with the cross-attention module of a decoder layer as ``attention`` and its projections
    (the self-attention's names under ``arch.cross``: ``self_attn.q_proj`` -> ``encoder_attn.q_proj``)."""
    sub = {r: arch.cross + getattr(arch, r)[len(arch.attention):] for r in ("q", "k", "v", "o")}
    return replace(arch, attention=arch.cross, **sub)


def _missing_stacks(arch: Architecture, model: nn.Module) -> str | None:
    """:func:`_missing` for the encoder (or the model) and, for encoder-decoders, the decoder's self- and
    cross-attention."""
    target = _stack_of(arch, model)
    if target is None:
        return f"it has no {arch.stack!r} stack"
    why = _missing(arch, target)
    dec = _decoder_of(arch, model)
    if why is None and dec is not None:
        why = _missing(arch, dec) or _missing(_cross_paths(arch), dec)
        why = why and f"its decoder: {why}"
    return why


def _refusal(model_type: str | None) -> Refusal | None:
    return next((r for r in REFUSED if model_type in r.model_types), None)


def refusal_of_config(config: dict) -> str | None:
    """Why a model with this ``config.json`` (a dict, read without transformers) is refused, or ``None``.

    The same rules as :func:`detect` and :func:`resolve` apply to ``model_type`` (and a ``text_config``'s),
    so the command line can refuse a family before the model loads.

    Examples
    --------
    >>> refusal_of_config({"model_type": "bloom"})[:40]
    "model_type 'bloom' is of the alibi famil"
    >>> refusal_of_config({"model_type": "bert"}) is None
    True
    """
    if not isinstance(config, dict):
        return None
    tables = [config] + [config[k] for k in ("text_config",) if isinstance(config.get(k), dict)]
    for cfg in tables:
        mtype = cfg.get("model_type")
        ref = _refusal(mtype) if isinstance(mtype, str) else None
        if ref is not None:
            return (f"model_type {mtype!r} is of the {ref.family} family ({ref.examples}), which attnspec refuses: "
                    f"{ref.reason}. See attnspec diagnose --list-architectures.")
        if mtype == "falcon" and cfg.get("alibi"):
            return ("Falcon with ALiBi (config.alibi=true) is refused: ALiBi biases are added inside the module and "
                    "not recorded yet")
    return None


def detect(model: nn.Module) -> Architecture | None:
    """The table entry of ``model``; ``None`` for models outside the transformers families.

    A ``config.model_type`` listed in an entry claims it (and must have its structure); otherwise the
    first non-strict entry whose module paths the model has.

    Examples
    --------
    >>> import torch, transformers
    >>> tiny = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, vocab_size=100)
    >>> model = transformers.BertModel(transformers.BertConfig(**tiny)).eval()
    >>> detect(model).family
    'bert'
    >>> detect(torch.nn.Linear(2, 2)) is None
    True

    Raises
    ------
    ArchitectureError
        The family is refused, or ``config.model_type`` names a family whose structure the model lacks.
    """
    cfg = _config(model)
    mtype = getattr(cfg, "model_type", None)
    name = type(model).__name__
    ref = _refusal(mtype)
    if ref is not None:
        raise ArchitectureError(f"{name} (model_type {mtype!r}) is of the {ref.family} family ({ref.examples}), "
                                f"which attnspec refuses: {ref.reason}. See attnspec diagnose --list-architectures.")
    claimed = [a for a in ARCHITECTURES if mtype in a.model_types]
    for arch in claimed:
        why = _missing_stacks(arch, model)
        if why is None:
            return arch
        raise ArchitectureError(f"{name} (model_type {mtype!r}) claims the {arch.family} family but {why}: "
                                "refused rather than misread.")
    for arch in ARCHITECTURES:
        if not arch.strict and _missing(arch, model) is None:
            return arch
    return None


def resolve(arch: Architecture, model: nn.Module) -> tuple[nn.Module, list, dict]:
    """``(base, layers, geometry)`` of a detected model: ``geometry`` has ``n_heads``, ``n_kv_heads``.

    Examples
    --------
    >>> import torch, transformers
    >>> tiny = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, vocab_size=100)
    >>> model = transformers.BertModel(transformers.BertConfig(**tiny)).eval()
    >>> base, layers, geometry = resolve(detect(model), model)
    >>> base is model, len(layers), geometry
    (True, 1, {'n_heads': 2, 'n_kv_heads': 2})
    """
    cfg = _config(model)
    base, layers = _base_and_layers(arch, model)
    H = next((int(getattr(cfg, k)) for k in arch.heads if getattr(cfg, k, None)), None)
    if H is None:
        raise ArchitectureError(f"{type(model).__name__} ({arch.family}): the config has none of {arch.heads}")
    Hkv = H
    if arch.kv_heads:
        Hkv = next((int(getattr(cfg, k)) for k in arch.kv_heads if getattr(cfg, k, None)), H)
    if arch.family == "falcon":
        if getattr(cfg, "alibi", False):
            raise ArchitectureError(f"{type(model).__name__}: Falcon with ALiBi (config.alibi=True) is refused: "
                                    "ALiBi biases are added inside the module and not recorded yet")
        # new decoder architecture: keys/values broadcast to every query head before the attention
        Hkv = H if getattr(cfg, "new_decoder_architecture", False) or not cfg.multi_query else 1
    if H % Hkv:
        raise ArchitectureError(f"{type(model).__name__} ({arch.family}): {H} query heads are not a multiple of "
                                f"{Hkv} key/value heads")
    return base, list(layers), {"n_heads": H, "n_kv_heads": Hkv}
