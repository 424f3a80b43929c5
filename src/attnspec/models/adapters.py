"""Adapters: find the attention layers of a model and describe them as :class:`AttentionSite`.

Supported out of the box (detected from the module structure, never by modifying the model):

* BERT family (``BertModel``, RoBERTa, ...; ``encoder.layer[i].attention.self`` with
  ``query/key/value`` and ``attention.output.dense``): bidirectional encoder;
* GPT-2 (``transformer.h[i].attn`` with ``c_attn``/``c_proj``): causal LM;
* Llama / Qwen2 / Mistral / Gemma 3 (``model.layers[i].self_attn`` with ``q/k/v/o_proj``): causal
  LM with grouped-query attention (``num_key_value_heads``) and per-layer sliding windows;
* ``torch.nn.MultiheadAttention`` (self-attention, weights recomputed from the call's inputs);
* custom modules following :class:`attnspec.models.protocol.CustomAttention`.

Any attention implementation works (eager, SDPA, FlashAttention): the diagnosis records the inputs of
each attention call (:mod:`attnspec.models.attention_calls`) and recomputes the weights it needs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from .protocol import AttentionSite, CustomAttention

__all__ = ["ModelAdapter", "adapt", "AdapterError"]


class AdapterError(TypeError):
    """The model has no attention layers attnspec knows how to hook."""


def _heads_view(x: torch.Tensor, n: int) -> torch.Tensor:
    """``(B, L, n*d) -> (B, n, L, d)``."""
    B, L, D = x.shape
    return x.view(B, L, n, D // n).transpose(1, 2)


@dataclass
class ModelAdapter:
    """A model plus its attention sites and how to run it.

    Attributes
    ----------
    model : nn.Module
    sites : list of AttentionSite
    kind : {'encoder', 'causal-lm', 'generic'}
        Decides the functional effect of head removal: ``1 - cos`` of mean-pooled final hidden
        states (encoder, generic) or the increase of next-token cross-entropy (causal LM).
    tail : callable or None
        ``hidden -> output`` after the last block (final norm, LM head); with ``blocks`` this enables
        activation reuse. ``None``: ablations use full forward passes.
    family : str
        Detected family, for reports.
    blocks_broadcast : bool
        The blocks accept an output projection that returns ``(K, B, L, D)`` for a ``(B, L, D)`` input
        (their residual sums, norms and MLPs broadcast over a leading axis): exact removal then runs the
        attention of the removed head's layer once for ``K`` removals (``ablate(..., expand=True)``).
        True for the transformers families below, whose blocks are checked against full forward
        passes in ``tests/test_models_adapters.py``.
    """

    model: nn.Module
    sites: list[AttentionSite]
    kind: str
    tail: Callable | None = None
    family: str = "generic"
    base: nn.Module | None = None
    blocks_broadcast: bool = False

    @property
    def can_reuse(self) -> bool:
        return self.tail is not None and all(s.block is not None for s in self.sites)

    @property
    def device(self) -> torch.device:
        """Device of the model's first parameter (inputs are moved there)."""
        p = next(self.model.parameters(), None)
        return p.device if p is not None else torch.device("cpu")

    def _ids(self, batch: dict) -> dict:
        d = self.device
        return {"input_ids": batch["input_ids"].to(d), "attention_mask": batch["attention_mask"].to(d)}

    def run(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Full forward; returns the functional output (final hidden states or logits)."""
        if self.kind == "generic":
            out = self.model(*batch["args"], **batch.get("kwargs", {}))
        else:
            out = self.model(**self._ids(batch), **self._extra())
        return _main_output(out)

    def _extra(self) -> dict:
        return {"use_cache": False} if self.kind == "causal-lm" else {}

    def run_base(self, batch: dict[str, torch.Tensor]) -> Any:
        """Forward through the base model only (no LM head: vocabularies can be large)."""
        if self.base is None or self.kind == "generic":
            return self.run(batch)
        return self.base(**self._ids(batch), **self._extra())

    def describe(self) -> str:
        return f"{type(self.model).__name__} ({self.family}, {self.kind}): {len(self.sites)} attention layers"


def _main_output(out: Any) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    for key in ("logits", "last_hidden_state"):
        v = getattr(out, key, None)
        if v is not None:
            return v
    if isinstance(out, (tuple, list)):
        return out[0]
    raise AdapterError(f"cannot find a tensor output in {type(out).__name__}")


# ----------------------------------------------------------------------------- families
def _bert(model: nn.Module) -> ModelAdapter | None:
    base = model
    for attr in ("bert", "roberta", "model", "encoder_model"):
        if hasattr(base, "encoder") and hasattr(base.encoder, "layer"):
            break
        base = getattr(base, attr, base)
    enc = getattr(base, "encoder", None)
    layers = getattr(enc, "layer", None)
    if layers is None or not len(layers) or not hasattr(layers[0], "attention"):
        return None
    sites = []
    for i, layer in enumerate(layers):
        att = layer.attention.self
        H = att.num_attention_heads
        dh = att.attention_head_size
        sites.append(AttentionSite(
            index=i, name=f"encoder.layer.{i}.attention.self", module=att, out_proj=layer.attention.output.dense,
            n_heads=H, n_kv_heads=H, head_dim=dh, d_out=layer.attention.output.dense.out_features,
            causal=bool(getattr(att, "is_causal", False)), weights_module=att, weights_pick=lambda out: out[1],
            values_module=att.value, values_pick=lambda out, H=H: _heads_view(out, H), block=layer,
            mask_kwarg="attention_mask"))
    tail = (lambda h: h) if base is model else None
    return ModelAdapter(model, sites, "encoder", tail, family="bert", base=base, blocks_broadcast=True)


def _gpt2(model: nn.Module) -> ModelAdapter | None:
    tr = getattr(model, "transformer", model)
    blocks = getattr(tr, "h", None)
    if blocks is None or not len(blocks) or not hasattr(blocks[0], "attn") or not hasattr(blocks[0].attn, "c_attn"):
        return None
    sites = []
    for i, block in enumerate(blocks):
        att = block.attn
        H, dh = att.num_heads, att.head_dim
        D = att.embed_dim
        sites.append(AttentionSite(
            index=i, name=f"transformer.h.{i}.attn", module=att, out_proj=att.c_proj,
            n_heads=H, n_kv_heads=H, head_dim=dh, d_out=att.c_proj.nf, causal=True,
            weights_module=att, values_module=att.c_attn,
            values_pick=lambda out, H=H, D=D: _heads_view(out[..., 2 * D:3 * D], H), block=block,
            w_out_fn=lambda att=att: att.c_proj.weight.detach(),  # Conv1D weight is (in, out)
            mask_kwarg="attention_mask",
            # older transformers: eager GPT-2 adds a padding-only mask and applies its `bias` buffer itself
            causal_inside=isinstance(getattr(att, "bias", None), torch.Tensor) and att.bias.dtype == torch.bool))
    lm = hasattr(model, "lm_head")
    tail = (lambda h: model.lm_head(tr.ln_f(h))) if lm else ((lambda h: tr.ln_f(h)) if tr is model else None)
    return ModelAdapter(model, sites, "causal-lm" if lm else "encoder", tail, family="gpt2", base=tr,
                        blocks_broadcast=True)


def _layer_window(att: nn.Module, cfg: Any, i: int) -> int | None:
    """Sliding window of decoder layer ``i``: the module's own ``sliding_window`` when it keeps one
    (Qwen2, Gemma 3), else the config's: ``layer_types[i] == 'sliding_attention'`` with
    ``sliding_window`` (per-layer patterns), or ``sliding_window`` for every layer when the config has
    no ``layer_types`` (Mistral). Metadata for reports: the diagnosis reads the mask the layer receives."""
    if hasattr(att, "sliding_window"):
        w = att.sliding_window
    else:
        w = getattr(cfg, "sliding_window", None)
        types = getattr(cfg, "layer_types", None)
        if w and types is not None and i < len(types):
            w = w if types[i] == "sliding_attention" else None
    return int(w) if w else None


def _llama(model: nn.Module) -> ModelAdapter | None:
    base = getattr(model, "model", model)
    base = getattr(base, "language_model", base)
    layers = getattr(base, "layers", None)
    if layers is None or not len(layers) or not hasattr(layers[0], "self_attn"):
        return None
    att0 = layers[0].self_attn
    if not all(hasattr(att0, a) for a in ("q_proj", "k_proj", "v_proj", "o_proj")):
        return None
    cfg = model.config
    cfg = getattr(cfg, "text_config", cfg)
    sites = []
    for i, layer in enumerate(layers):
        att = layer.self_attn
        H = cfg.num_attention_heads
        Hkv = getattr(cfg, "num_key_value_heads", None) or H
        dh = getattr(att, "head_dim", None) or cfg.hidden_size // H
        window = _layer_window(att, cfg, i)
        causal = getattr(att, "is_causal", True)
        sites.append(AttentionSite(
            index=i, name=f"model.layers.{i}.self_attn", module=att, out_proj=att.o_proj,
            n_heads=H, n_kv_heads=Hkv, head_dim=dh, d_out=att.o_proj.out_features, causal=bool(causal),
            window=window, weights_module=att, values_module=att.v_proj,
            values_pick=lambda out, Hkv=Hkv: _heads_view(out, Hkv), block=layer, mask_kwarg="attention_mask"))
    norm = getattr(base, "norm", None)
    lm = getattr(model, "lm_head", None)
    softcap = getattr(cfg, "final_logit_softcapping", None)

    def tail(h):
        h = norm(h) if norm is not None else h
        if lm is None:
            return h
        logits = lm(h)
        if softcap:
            logits = torch.tanh(logits / softcap) * softcap
        return logits
    kind = "causal-lm" if lm is not None else "encoder"
    return ModelAdapter(model, sites, kind, tail, family=type(model).__name__.replace("ForCausalLM", "").lower(),
                        base=base, blocks_broadcast=True)


def _mha_recompute(mod: nn.MultiheadAttention, args: tuple, kwargs: dict):
    """Weights ``(B, H, L, L)`` and values ``(B, H, L, dh)`` of a self-attention MHA call."""
    q = args[0] if args else kwargs["query"]
    if not mod.batch_first:
        q = q.transpose(0, 1)
    B, L, D = q.shape
    H, dh = mod.num_heads, mod.head_dim
    if mod.in_proj_weight is None:
        raise AdapterError("nn.MultiheadAttention with separate q/k/v dims (kdim/vdim) is not supported")
    qkv = F.linear(q, mod.in_proj_weight, mod.in_proj_bias)
    Q, K, V = (_heads_view(t, H) for t in qkv.chunk(3, dim=-1))
    s = Q @ K.transpose(-1, -2) / dh ** 0.5
    kpm = kwargs.get("key_padding_mask", args[3] if len(args) > 3 else None)
    am = kwargs.get("attn_mask", args[5] if len(args) > 5 else None)
    if kwargs.get("is_causal", False) and am is None:
        am = torch.ones(L, L, dtype=torch.bool).triu(1)
    if am is not None:
        am = am.view(-1, H, L, L) if am.dim() == 3 else am
        s = s.masked_fill(am, float("-inf")) if am.dtype == torch.bool else s + am
    if kpm is not None:
        s = s.masked_fill(kpm[:, None, None, :].bool(), float("-inf")) if kpm.dtype == torch.bool \
            else s + kpm[:, None, None, :]
    return s.softmax(-1), V


def _mha_sites(model: nn.Module) -> list[AttentionSite]:
    sites = []
    for name, mod in model.named_modules():
        if isinstance(mod, nn.MultiheadAttention):
            sites.append(AttentionSite(
                index=len(sites), name=name or "<root>", module=mod, out_proj=mod.out_proj, n_heads=mod.num_heads,
                n_kv_heads=mod.num_heads, head_dim=mod.head_dim, d_out=mod.out_proj.out_features,
                recompute=_mha_recompute, kind="mha"))
    return sites


def _custom_sites(model: nn.Module) -> list[AttentionSite]:
    sites = []
    for name, mod in model.named_modules():
        if getattr(mod, "attnspec_protocol", None) == 1:
            if not isinstance(mod, CustomAttention):
                missing = [a for a in ("n_heads", "head_dim", "attn_probe", "value_probe", "out_proj") if not hasattr(mod, a)]
                raise AdapterError(f"{name}: sets attnspec_protocol = 1 but lacks {', '.join(missing)} "
                                   "(see attnspec.models.protocol)")
            H = int(mod.n_heads)
            sites.append(AttentionSite(
                index=len(sites), name=name or "<root>", module=mod, out_proj=mod.out_proj, n_heads=H,
                n_kv_heads=int(getattr(mod, "n_kv_heads", H)), head_dim=int(mod.head_dim),
                d_out=mod.out_proj.out_features, causal=bool(getattr(mod, "causal", False)),
                window=getattr(mod, "window", None), weights_module=mod.attn_probe, weights_pick=lambda out: out,
                values_module=mod.value_probe, values_pick=lambda out: out, kind="custom"))
    return sites


def adapt(model: nn.Module | ModelAdapter) -> ModelAdapter:
    """Detect the model family and return its :class:`ModelAdapter`.

    Raises
    ------
    AdapterError
        No supported attention layer found (the message lists what is supported).
    """
    if isinstance(model, ModelAdapter):
        return model
    custom = _custom_sites(model)
    if custom:
        return ModelAdapter(model, custom, "generic", None, family="custom")
    for fam in (_bert, _gpt2, _llama):
        ad = fam(model)
        if ad is not None:
            return ad
    mha = _mha_sites(model)
    if mha:
        return ModelAdapter(model, mha, "generic", None, family="nn.MultiheadAttention")
    raise AdapterError(f"{type(model).__name__}: no supported attention layers. Supported: BERT-family encoders, "
                       "GPT-2, Llama/Qwen/Mistral/Gemma3 decoders, torch.nn.MultiheadAttention, and modules "
                       "following attnspec.models.protocol.CustomAttention")
