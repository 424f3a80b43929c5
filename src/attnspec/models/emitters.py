"""Attention calls of modules that compute attention themselves (no transformers attention interface).

For the ``'hooked:<name>'`` families of :mod:`attnspec.models.architectures`, a forward pre-hook on the
attention module rebuilds, from the module's own projections and the arguments of the call, exactly what
an attention-interface call would carry: queries and keys after the position encoding, values, the mask
the module applies, the scaling and the additive position bias. :func:`register` attaches an emitter to a
module; :func:`attnspec.models.attention_calls.record_attention_calls` calls it for every recorded call.

The projections run a second time on the same input (bit-identical results; the model's own call is
untouched). Emitters return ``(query, key, value, mask, kwargs)`` with ``kwargs`` holding ``scaling``,
``is_causal`` and ``position_bias`` as the interface would.

Modules that expose what they compute through hook points of their own (TransformerLens 4.x attention
bridges, :class:`BridgeEmitter`) are read during their forward instead: the emitter's ``attach`` registers
hooks that keep the module's own queries, keys and values and hands the call over when the module returns.
"""
from __future__ import annotations

import weakref
from typing import Callable

import torch
from torch import nn

__all__ = ["register", "registered", "EMITTERS"]

_REGISTRY: "weakref.WeakKeyDictionary[nn.Module, Callable]" = weakref.WeakKeyDictionary()


def _arg(args: tuple, kwargs: dict, name: str, pos: int):
    if name in kwargs:
        return kwargs[name]
    return args[pos] if len(args) > pos else None


def _heads(x: torch.Tensor, d: int) -> torch.Tensor:
    """``(B, L, n*d) -> (B, n, L, d)``."""
    B, L, _ = x.shape
    return x.view(B, L, -1, d).transpose(1, 2)


def _mpnet(mod: nn.Module, args: tuple, kwargs: dict):
    """MPNet: ``softmax(q k^T / sqrt(d) + position_bias + mask)``; the relative-position bias (T5 buckets,
    computed once by the encoder and shared by every layer) is an argument of the call."""
    h = _arg(args, kwargs, "hidden_states", 0)
    d = mod.attention_head_size
    q, k, v = (_heads(p(h), d) for p in (mod.q, mod.k, mod.v))
    mask = _arg(args, kwargs, "attention_mask", 1)
    bias = _arg(args, kwargs, "position_bias", 2)
    return q, k, v, mask, {"scaling": d ** -0.5, "is_causal": False, "position_bias": bias}


def _falcon(mod: nn.Module, args: tuple, kwargs: dict):
    """Falcon with rotary positions: fused ``query_key_value`` split by the module's own ``_split_heads``
    (multi-query, grouped or full), RoPE applied with the call's ``position_embeddings``."""
    from transformers.models.falcon.modeling_falcon import apply_rotary_pos_emb
    h = _arg(args, kwargs, "hidden_states", 0)
    if _arg(args, kwargs, "alibi", 1) is not None:
        raise RuntimeError(f"{type(mod).__name__}: ALiBi attention is not supported")
    q, k, v = mod._split_heads(mod.query_key_value(h))
    B, L = q.shape[:2]
    n_kv = mod.num_heads if mod.new_decoder_architecture else mod.num_kv_heads
    q = q.transpose(1, 2).reshape(B, mod.num_heads, L, mod.head_dim)
    k = k.transpose(1, 2).reshape(B, n_kv, L, mod.head_dim)
    v = v.transpose(1, 2).reshape(B, n_kv, L, mod.head_dim)
    cos, sin = _arg(args, kwargs, "position_embeddings", 7)
    q, k = apply_rotary_pos_emb(q, k, cos, sin)
    return q, k, v, _arg(args, kwargs, "attention_mask", 2), {"scaling": mod.head_dim ** -0.5, "is_causal": True}


def _deberta_v2(mod: nn.Module, args: tuple, kwargs: dict):
    """DeBERTa-v2/v3 disentangled attention: ``q k^T / sqrt(d s) + c2p + p2c`` with ``s`` one plus the number
    of relative terms; the relative terms come from the module's own ``disentangled_attention_bias`` on the
    call's ``relative_pos`` and ``rel_embeddings`` and are passed as the position bias."""
    h = _arg(args, kwargs, "hidden_states", 0)
    qs = _arg(args, kwargs, "query_states", 3)
    H = mod.num_attention_heads
    q, k, v = (mod.transpose_for_scores(p(x), H) for p, x in ((mod.query_proj, h if qs is None else qs),
                                                           (mod.key_proj, h), (mod.value_proj, h)))
    s = 1 + ("c2p" in mod.pos_att_type) + ("p2c" in mod.pos_att_type)
    bias = None
    if mod.relative_attention:
        rel = mod.pos_dropout(_arg(args, kwargs, "rel_embeddings", 5))
        bias = mod.disentangled_attention_bias(q, k, _arg(args, kwargs, "relative_pos", 4), rel, s)
    B, d = h.shape[0], q.shape[-1]
    view = lambda t: t.view(B, H, t.shape[-2], t.shape[-1])  # noqa: E731
    mask = _arg(args, kwargs, "attention_mask", 1)
    return (view(q), view(k), view(v), None if mask is None else mask.bool(),
            {"scaling": (d * s) ** -0.5, "is_causal": False, "position_bias": None if bias is None else view(bias)})


class BridgeEmitter:
    """The attention call of a TransformerLens 4.x attention bridge (``PositionEmbeddingsAttentionBridge``:
    Llama, Qwen2, Gemma 3 and the other rotary families), read from the bridge's own computation.

    A bridge re-implements attention instead of calling transformers' attention functions, with hook points
    on the way: ``hook_rot_q`` / ``hook_rot_k`` carry the queries ``(B, H, L, d)`` and keys ``(B, H_kv, L, d)``
    after the query/key norms and the rotary encoding, ``v`` (a ``LinearBridge``) the values ``(B, L, H_kv d)``.
    The mask is the ``attention_mask`` the bridge receives (the model's own causal, padding and sliding-window
    mask), the scaling and the logit soft-capping are the wrapped module's. Nothing is recomputed: the call
    carries the very tensors the bridge multiplied.
    """

    def attach(self, module: nn.Module, deliver: Callable) -> list:
        """Hooks on ``module`` and its hook points; ``deliver(query, key, value, mask, kwargs)`` is called
        once per forward of ``module``, when it returns. Returns the hook handles (the caller removes them)."""
        seen: dict = {}
        hf = module.original_component
        d = int(hf.head_dim)
        kw = {"scaling": float(getattr(hf, "scaling", d ** -0.5)), "is_causal": bool(getattr(module, "is_causal", True)),
              "softcap": getattr(hf, "attn_logit_softcapping", None)}

        def enter(mod, args, kwargs):
            seen.clear()
            seen["mask"] = _arg(args, kwargs, "attention_mask", 1)

        def keep(name: str):
            def hook(mod, args, out):
                seen[name] = out
            return hook

        def leave(mod, args, kwargs, out):
            if {"q", "k", "v"} - seen.keys():
                raise RuntimeError(f"{type(mod).__name__}: its hook points hook_rot_q, hook_rot_k and v did not all "
                                   "fire; this TransformerLens attention bridge is not supported")
            deliver(seen["q"], seen["k"], _heads(seen["v"], d), seen["mask"], kw)
            seen.clear()
        return [module.register_forward_pre_hook(enter, with_kwargs=True),
                module.hook_rot_q.register_forward_hook(keep("q")), module.hook_rot_k.register_forward_hook(keep("k")),
                module.v.register_forward_hook(keep("v")),
                module.register_forward_hook(leave, with_kwargs=True)]


#: Emitters by the name after ``'hooked:'`` in the architecture table; ``'transformer-lens'``
#: (:class:`BridgeEmitter`) is registered on the attention bridges of a TransformerLens model.
EMITTERS: dict[str, Callable] = {"mpnet": _mpnet, "falcon": _falcon, "deberta-v2": _deberta_v2,
                                 "transformer-lens": BridgeEmitter()}


def register(module: nn.Module, name: str) -> None:
    """Attach emitter ``name`` to ``module`` (weakly: the registry never keeps a model alive).

    ``name`` is a key of :data:`EMITTERS` (``'mpnet'``, ``'falcon'``, ``'deberta-v2'``, ``'transformer-lens'``);
    :func:`attnspec.models.adapt` registers the emitters of the families and toolkits that need one.

    Examples
    --------
    >>> import transformers
    >>> mpnet = transformers.MPNetModel(transformers.MPNetConfig(hidden_size=32, num_hidden_layers=1,
    ...                                 num_attention_heads=2, intermediate_size=64, vocab_size=100))
    >>> att = mpnet.encoder.layer[0].attention.attn
    >>> register(att, "mpnet")
    >>> any(m is att for m, _ in registered())
    True
    >>> register(att, "xlnet")
    Traceback (most recent call last):
    KeyError: "no attention-call emitter 'xlnet' (known: mpnet, falcon, deberta-v2, transformer-lens)"
    """
    if name not in EMITTERS:
        raise KeyError(f"no attention-call emitter {name!r} (known: {', '.join(EMITTERS)})")
    _REGISTRY[module] = EMITTERS[name]


def registered() -> list[tuple[nn.Module, Callable]]:
    """The live ``(module, emitter)`` pairs (weak references: a module that is garbage-collected leaves).

    Examples
    --------
    >>> import transformers
    >>> from attnspec.models import adapt
    >>> conf = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, vocab_size=100)
    >>> sites = adapt(transformers.MPNetModel(transformers.MPNetConfig(**conf))).sites   # adapt registers them
    >>> [any(m is s.module and emit is EMITTERS["mpnet"] for m, emit in registered()) for s in sites]
    [True, True]
    """
    return list(_REGISTRY.items())
