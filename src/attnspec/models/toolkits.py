"""Models held by interpretability toolkits: a TransformerLens 4.x ``TransformerBridge`` and an nnsight
``LanguageModel`` are diagnosed as the transformers model they wrap, read through their own hooks.

* **TransformerLens 4.x** (``transformer_lens.model_bridge.TransformerBridge``): booting a bridge replaces the
  wrapped model's submodules *in place* by bridge components, whose attention re-implements softmax attention
  with hook points on the way (it does not call transformers' attention functions). The wrapped model
  (``bridge.original_model``) is adapted as its family is, and each attention bridge gets the
  :class:`attnspec.models.emitters.BridgeEmitter`, which hands the recorded call the queries, keys and values the
  bridge itself multiplied. Head removal and capture act on the bridge's ``o`` and ``v`` components (their
  ``LinearBridge``), so they run through the bridge's forward. Without compatibility mode the bridge's forward
  equals the model's, and so do the tables.
* **Compatibility mode** (``bridge.enable_compatibility_mode()``, HookedTransformer's numerics) rewrites the
  weights: layer-norm weights folded into the projections that read them (``fold_ln``), writing weights and
  the unembedding centred (``center_writing_weights``, ``center_unembed``), value biases folded into the output
  bias. :func:`processing_of` reads from the weights which of these hold; the diagnosis records it in
  ``summary.json`` (``toolkit``); docs/architectures.md says which columns move and why.
* **nnsight** (``nnsight.LanguageModel``, ``nnsight.TransformersModel`` that replaces it in 0.8, and the other
  envoys): the envoy's wrapped module (``model._module``) is the transformers model itself, unchanged; it is
  adapted as it is.
* A TransformerLens 3.x ``HookedTransformer`` (removed in TransformerLens 4.0) is refused with what to do
  instead: boot a ``TransformerBridge``.

Detection is by the object's class and module, so neither toolkit is imported unless the model came from it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .emitters import register
from .generic import AdapterError

__all__ = ["Unwrapped", "unwrap", "processing_of", "bridge_adapter", "register_bridge_emitters"]

#: Relative size under which a weight is read as folded (all ones) or centred (zero mean).
_PROCESSED_TOL = 1e-5


@dataclass
class Unwrapped:
    """The torch module attnspec adapts, with where it came from.

    Attributes
    ----------
    module : nn.Module
        The transformers model (for a bridge: with the bridge's components in place).
    tokenizer : object or None
        The toolkit's tokenizer (``bridge.tokenizer``, ``LanguageModel.tokenizer``), used when none is passed.
    toolkit : dict or None
        ``None`` for a plain module; else ``{"name", "version", "wrapper", ...}`` for ``summary.json``
        (for a bridge also ``compatibility_mode`` and ``processing``).
    bridge : bool
        The attention layers are TransformerLens attention bridges (they need
        :class:`attnspec.models.emitters.BridgeEmitter`).
    notes : tuple of str
        Sentences for the diagnosis summary.

    Examples
    --------
    >>> from torch import nn
    >>> Unwrapped(nn.Identity())
    Unwrapped(module=Identity(), tokenizer=None, toolkit=None, bridge=False, notes=())
    """

    module: Any
    tokenizer: Any = None
    toolkit: dict | None = None
    bridge: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)


def _from(obj: Any, package: str) -> bool:
    return type(obj).__module__.split(".")[0] == package


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def _mean_abs(x: torch.Tensor) -> float:
    return float(x.detach().float().abs().mean())


def processing_of(bridge: Any) -> dict:
    """Which of HookedTransformer's weight transforms hold on a bridge's wrapped model, read from its weights.

    ``fold_ln``: every normalization weight of the blocks and the final norm is 1 (folded into what reads it);
    ``center_writing_weights``: every attention output projection has zero mean over the model dimension
    (``mean_d W_O[d, :] = 0``); ``center_unembed``: the unembedding has zero mean over the vocabulary. Each
    within a relative ``1e-5`` of the weight's mean absolute value; ``fold_value_biases``: the value projections have
    biases and every one is 0 (moved into the output bias). TransformerLens does not keep the flags it was
    called with, so this is what the weights look like: an untrained model's norms are 1 too (read as folded).

    Examples
    --------
    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> processing_of(type("Bridge", (), {"original_model": tiny_causal_lm()[0].model})())   # untrained GPT-2
    {'fold_ln': True, 'center_writing_weights': False, 'center_unembed': False, 'fold_value_biases': False}
    """
    model = bridge.original_model
    norms = [m for n, m in model.named_modules() if "norm" in type(m).__name__.lower() or n.split(".")[-1].startswith("ln")]
    weights = [getattr(m, "weight", None) for m in norms]
    weights = [w for w in weights if isinstance(w, torch.Tensor)]
    fold = bool(weights) and all(bool(torch.all((w.detach().float() - 1).abs() <= _PROCESSED_TOL)) for w in weights)
    outs = [m.weight for n, m in model.named_modules()
            if isinstance(m, nn.Linear) and n.split(".")[-1] in ("o_proj", "out_proj", "dense", "c_proj")
            and ("attn" in n or "attention" in n)]
    centred = bool(outs) and all(_mean_abs(w.mean(0)) <= _PROCESSED_TOL * max(_mean_abs(w), 1e-30) for w in outs)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    w_u = getattr(head, "weight", None)
    unembed = isinstance(w_u, torch.Tensor) and _mean_abs(w_u.mean(0)) <= _PROCESSED_TOL * max(_mean_abs(w_u), 1e-30)
    v_biases = [m.bias for n, m in model.named_modules() if isinstance(m, nn.Linear) and m.bias is not None
                and n.split(".")[-1] in ("v_proj", "value")]
    folded_v = bool(v_biases) and all(bool(torch.all(b.detach() == 0)) for b in v_biases)
    return {"fold_ln": fold, "center_writing_weights": centred, "center_unembed": bool(unembed),
            "fold_value_biases": folded_v}


def _bridge(model: Any) -> Unwrapped:
    inner = getattr(model, "original_model", None)
    if not isinstance(inner, nn.Module):
        raise AdapterError(f"{type(model).__name__}: a TransformerLens bridge without its wrapped model "
                           "(original_model); boot it with TransformerBridge.boot_transformers")
    compat = bool(getattr(model, "compatibility_mode", False))
    toolkit = {"name": "transformer_lens", "version": _version("transformer-lens"), "wrapper": type(model).__name__,
               "compatibility_mode": compat, "weights_processed": bool(getattr(model, "_weights_processed", False)),
               "processing": processing_of(model)}
    done = [k for k, v in toolkit["processing"].items() if v]
    note = ("TransformerLens TransformerBridge: diagnosed through its own attention components (queries, keys and "
            "values as the bridge computes them; removal on its output projection)")
    if compat:
        note += (f"; compatibility mode, weights processed ({', '.join(done) or 'none detected'}): columns read from "
                 "the processed weights (per-head outputs, removal spectra) can differ from the Hugging Face "
                 "model's (docs/architectures.md)")
    return Unwrapped(inner, getattr(model, "tokenizer", None), toolkit, bridge=True, notes=(note + ".",))


def unwrap(model: Any) -> Unwrapped:
    """The torch module behind ``model`` and its toolkit (module docstring); a plain module as it is.

    Raises
    ------
    AdapterError
        A TransformerLens 3.x ``HookedTransformer``, or a toolkit object without its wrapped model.

    Examples
    --------
    >>> from torch import nn
    >>> u = unwrap(nn.Linear(2, 2))
    >>> type(u.module).__name__, u.toolkit, u.bridge
    ('Linear', None, False)
    """
    if _from(model, "transformer_lens"):
        if hasattr(model, "original_model"):
            return _bridge(model)
        raise AdapterError(f"{type(model).__name__} (TransformerLens {_version('transformer-lens') or '3.x'}): only "
                           "a TransformerLens 4.x TransformerBridge is supported; boot one with "
                           "TransformerBridge.boot_transformers(name, hf_model=model, tokenizer=tokenizer)")
    if _from(model, "nnsight"):
        inner = getattr(model, "_module", None)
        if not isinstance(inner, nn.Module):
            raise AdapterError(f"{type(model).__name__} (nnsight): no wrapped torch module (_module)")
        toolkit = {"name": "nnsight", "version": _version("nnsight"), "wrapper": type(model).__name__}
        return Unwrapped(inner, getattr(model, "tokenizer", None), toolkit)
    return Unwrapped(model)


def bridge_adapter(adapter: Any) -> Any:
    """The adapter of a bridge's wrapped model made to read the bridge: every attention bridge gets its
    :class:`attnspec.models.emitters.BridgeEmitter` (:func:`register_bridge_emitters`), and the LM head's
    ``UnembeddingBridge`` (whose forward is its wrapped ``nn.Linear`` between two hook points) is replaced in the
    tail by that ``nn.Linear``, so that the head's rows can be read (closed-form gradient, truncated vocabulary)
    as for the Hugging Face model (whose numbers are then the same, bit for bit).

    Examples
    --------
    A bridge booted offline around a tiny random Llama (the MiniLM tokenizer stands in for its own); :func:`adapt`
    calls this:

    >>> import transformers
    >>> from transformer_lens.model_bridge import TransformerBridge
    >>> from attnspec.models import adapt, load_model
    >>> cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
    ...                                num_key_value_heads=2, vocab_size=30522, attn_implementation="eager")
    >>> bridge = TransformerBridge.boot_transformers("tiny-llama", hf_model=transformers.LlamaForCausalLM(cfg),
    ...                                              tokenizer=load_model("minilm")[1])
    >>> ad = adapt(bridge)
    >>> ad.toolkit["wrapper"], type(ad.sites[0].module).__name__, type(ad.tail.linear).__name__
    ('TransformerBridge', 'PositionEmbeddingsAttentionBridge', 'Linear')
    """
    from dataclasses import replace

    from .lm_head import LMHead
    register_bridge_emitters(adapter.sites)
    tail = adapter.tail
    if isinstance(tail, LMHead) and not isinstance(tail.linear, nn.Linear):
        inner = getattr(tail.linear, "original_component", None)
        if isinstance(inner, nn.Linear) and type(tail.linear).__name__ == "UnembeddingBridge":
            adapter = replace(adapter, tail=replace(tail, linear=inner))
    return adapter


def register_bridge_emitters(sites: list) -> None:
    """Give every attention bridge among ``sites`` its :class:`attnspec.models.emitters.BridgeEmitter`.

    Raises
    ------
    AdapterError
        An attention layer that is not a bridge with the hook points the emitter reads (``hook_rot_q``,
        ``hook_rot_k``, ``v``): the families whose bridge is a ``PositionEmbeddingsAttentionBridge`` are supported.

    Examples
    --------
    >>> from torch import nn
    >>> from attnspec.models.protocol import AttentionSite
    >>> lin = nn.Linear(4, 4)
    >>> register_bridge_emitters([AttentionSite(0, "layers.0.attn", lin, lin, 2, 2, 2, 4)])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    attnspec.models.generic.AdapterError: layers.0.attn: a TransformerLens Linear without hook_rot_q, hook_rot_k, v: ...
    """
    for s in sites:
        att = s.module
        missing = [n for n in ("hook_rot_q", "hook_rot_k", "v") if n not in att._modules]
        if missing or not hasattr(att, "original_component"):
            raise AdapterError(f"{s.name}: a TransformerLens {type(att).__name__} without {', '.join(missing)}: "
                               "supported are the bridges of rotary families (PositionEmbeddingsAttentionBridge: "
                               "Llama, Qwen2, Gemma 3, ...)")
        register(att, "transformer-lens")
