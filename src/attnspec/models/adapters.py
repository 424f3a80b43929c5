"""Adapters: find the attention layers of a model and describe them as :class:`AttentionSite`.

Supported out of the box (never by modifying the model):

* the transformers families of :data:`attnspec.models.architectures.ARCHITECTURES` (BERT-likes, MPNet,
  ALBERT, DeBERTa-v2/v3, DistilBERT, T5 and BART (encoder self-attention, decoder self- and cross-attention),
  GPT-2, GPT-NeoX/Pythia, Llama/Mistral/Qwen/Gemma/OLMo/Phi, Phi-3, Falcon, ViT/DeiT/DINOv2), each described by
  one declarative entry (where its projections live, head layout, grouped or multi-query keys and values,
  position encoding, masks) and detected by :func:`attnspec.models.architectures.detect`, which checks the
  structure before claiming a family and refuses the families of ``REFUSED`` with the reason;
* ``torch.nn.MultiheadAttention`` (self-attention, weights recomputed from the call's inputs);
* custom modules following the per-block protocol :class:`attnspec.models.protocol.AttentionBlock` (a whole
  model with structure masks and a functional output: :class:`attnspec.CustomAttention`).

Base models without a head (``LlamaModel``, ``GPT2Model``, ``BertModel``) get ``kind='encoder'``: the
functional effect of a removal is the shift of their output representation (``1 - cos`` of mean-pooled
final hidden states).

Any attention implementation works (eager, SDPA, FlashAttention): the diagnosis records the inputs of
each attention call (:mod:`attnspec.models.attention_calls`) and recomputes the weights it needs.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

import torch
from torch import nn

from .architectures import (ARCHITECTURES, Architecture, ArchitectureError, _cross_paths, _decoder_of, _get_path,
                            _stack_of, detect, resolve)
from .attention_calls import Application, _register_applications
from .lm_head import LMHead
from .generic import AdapterError, _custom_sites, _heads_view, _mha_sites
from .emitters import register
from .protocol import AttentionSite
from .toolkits import bridge_adapter, unwrap

__all__ = ["ModelAdapter", "adapt", "AdapterError"]


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
    decoder : bool
        A decoder family (causal attention, key/value cache): forwards get ``use_cache=False``, also for
        base models without an LM head (``LlamaModel``), whose ``kind`` is ``'encoder'``.
    architecture : Architecture or None
        The entry of :data:`attnspec.models.architectures.ARCHITECTURES` the model was detected as.
    decoder_start : int or None
        Encoder-decoders (T5, BART): the decoder reads the text itself, shifted right behind this start
        token (``decoder_input_ids = [start, x_0, ..., x_{L-2}]``, teacher forcing; ``-1``: the text's last
        real token, mBART's language code, as mBART's own ``shift_tokens_right`` does), with the encoder's
        padding mask; with an LM head (``kind='causal-lm'``) position ``t`` predicts ``x_t``
        (:class:`attnspec.models.ablation.FunctionalMetric` scores every real token), without one the
        effect is the shift of the decoder's mean-pooled output. ``None``: not an encoder-decoder.
    notes : tuple of str
        Sentences for the diagnosis summary stating what the model was fed and what removal measures.
    toolkit : dict or None
        The interpretability toolkit the model came in (:mod:`attnspec.models.toolkits`: a TransformerLens
        bridge, an nnsight envoy) and what it did to the weights, for ``summary.json``; ``None``: a plain module.
    tokenizer : object or None
        The toolkit's own tokenizer, used when the diagnosis is given texts and no tokenizer.

    Examples
    --------
    >>> import torch, transformers
    >>> tiny = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, vocab_size=100)
    >>> model = transformers.BertModel(transformers.BertConfig(**tiny)).eval()
    >>> ad = adapt(model)
    >>> ad.describe(), ad.can_reuse
    ('BertModel (bert, encoder): 1 attention layers', True)
    >>> batch = {"input_ids": torch.tensor([[1, 5, 6, 7, 2, 0]]), "attention_mask": torch.tensor([[1, 1, 1, 1, 1, 0]])}
    >>> with torch.no_grad():
    ...     ad.run(batch).shape                                 # final hidden states
    torch.Size([1, 6, 32])
    """

    model: nn.Module
    sites: list[AttentionSite]
    kind: str
    tail: Callable | None = None
    family: str = "generic"
    base: nn.Module | None = None
    blocks_broadcast: bool = False
    decoder: bool = False
    architecture: Architecture | None = None
    decoder_start: int | None = None
    notes: tuple[str, ...] = ()
    toolkit: dict | None = None
    tokenizer: Any = None

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
        if "pixel_values" in batch:   # vision transformers: every token is real, no mask argument
            p = next(self.model.parameters())
            return {"pixel_values": batch["pixel_values"].to(device=d, dtype=p.dtype)}
        ids, mask = batch["input_ids"].to(d), batch["attention_mask"].to(d)
        if self.decoder_start is not None:   # encoder-decoders: the text shifted right, teacher forcing
            first = torch.full_like(ids[:, :1], self.decoder_start)
            if self.decoder_start < 0:       # mBART: the text's last real token (its language code) starts it
                first = ids.gather(1, (mask.sum(1, keepdim=True) - 1).clamp_min(0))
            dec = torch.cat([first, ids[:, :-1]], dim=1)
            return {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": dec, "decoder_attention_mask": mask}
        return {"input_ids": ids, "attention_mask": mask}

    def run(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Full forward; returns the functional output (final hidden states or logits)."""
        if self.kind == "generic":
            out = self.model(*batch["args"], **batch.get("kwargs", {}))
        else:
            out = self.model(**self._ids(batch), **self._extra())
        return _main_output(out)

    def _extra(self) -> dict:
        # decoders (with or without an LM head) must not fill a key/value cache: exact removal re-runs blocks
        # with the recorded inputs, and a cache passed along would grow with each re-run
        return {"use_cache": False} if self.kind == "causal-lm" or self.decoder else {}

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


# ----------------------------------------------------------------------------- families (architectures.py)
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
    return int(w) if isinstance(w, int) and not isinstance(w, bool) and w > 0 else None


def _pick_weights(out: Any) -> torch.Tensor | None:
    """Eager weights from an attention module's output ``(output, weights)``; ``None`` when not returned."""
    if isinstance(out, (tuple, list)) and len(out) > 1 and isinstance(out[1], torch.Tensor) and out[1].dim() == 4:
        return out[1]
    return None


def _site(arch: Architecture, layer: nn.Module, i: int, geo: dict, cfg: Any, causal_default: bool) -> AttentionSite:
    att, o, v = _get_path(layer, arch.attention), _get_path(layer, arch.o), _get_path(layer, arch.v)
    H, Hkv = geo["n_heads"], geo["n_kv_heads"]
    conv1d = type(o).__name__ == "Conv1D"            # GPT-2: weight is (in, out)
    d_in = o.weight.shape[0] if conv1d else o.weight.shape[1]
    if d_in % H:
        raise ArchitectureError(f"{arch.family}: output projection input width {d_in} is not a multiple of {H} heads")
    fused = _get_path(layer, arch.q) is v
    if arch.capture.startswith("hooked:"):
        register(att, arch.capture.split(":", 1)[1])
    return AttentionSite(
        index=i, name=f"{arch.layers}.{i}.{arch.attention}", module=att, out_proj=o, n_heads=H, n_kv_heads=Hkv,
        head_dim=d_in // H, d_out=o.weight.shape[1] if conv1d else o.weight.shape[0],
        causal=bool(getattr(att, "is_causal", causal_default)), window=_layer_window(att, cfg, i),
        weights_module=att, weights_pick=_pick_weights,
        values_module=None if fused else v, values_pick=lambda out, Hkv=Hkv: _heads_view(out, Hkv), block=layer,
        w_out_fn=(lambda o=o: o.weight.detach()) if conv1d else None)


def _tail(arch: Architecture, model: nn.Module, base: nn.Module, cfg: Any) -> tuple[str, Callable | None]:
    """Kind and tail ``hidden -> output`` after the last block (final norm, LM head and its soft-capping)."""
    norm = _get_path(base, arch.norm) if arch.norm else None
    lm = _get_path(model, arch.lm_head) if arch.kind == "causal-lm" else None
    softcap = getattr(cfg, "final_logit_softcapping", None)
    if lm is None:   # a base model (LlamaModel, GPT2Model, BertModel): representation shift of its output
        # exact removal with block reuse compares the last block's output; a final norm after it would be
        # skipped, so such models (and models with another head) use full forward passes (tail None)
        return "encoder", (lambda h: h) if base is model and norm is None else None

    return "causal-lm", LMHead(lm, norm, softcap)


def _shared_layers(arch: Architecture, groups: list, cfg: Any) -> list:
    """ALBERT's applications in call order: ``(layer, name, application index, applications of its module)``;
    layer ``i`` runs group ``int(i / (N / G))``, whose inner layers run in turn."""
    N, G = cfg.num_hidden_layers, len(groups)
    order = [(g, j) for i in range(N) for g in [int(i / (N / G))] for j in range(len(groups[g].albert_layers))]
    seen: dict = {}
    out = []
    for g, j in order:
        k = seen.get((g, j), 0)
        seen[(g, j)] = k + 1
        out.append((groups[g].albert_layers[j], f"albert_layer_groups.{g}.albert_layers.{j}", k, order.count((g, j))))
    return out


def _albert(model: nn.Module, arch: Architecture, base: nn.Module, groups: list, geo: dict, cfg: Any) -> list:
    """One site per application of a shared layer; its module is an :class:`Application` stand-in."""
    sites, apps = [], {}
    for i, (layer, name, k, n) in enumerate(_shared_layers(arch, groups, cfg)):
        site = _site(replace(arch, attention="attention", q="attention.query", k="attention.key",
                             v="attention.value", o="attention.dense"), layer, i, geo, cfg, False)
        shared = site.module
        site.module = Application(shared, k)
        site.name = f"encoder.{name}.attention (application {k + 1} of {n})"
        site.block, site.application, site.n_applications = None, k, n
        apps.setdefault(shared, []).append(site.module)
        sites.append(site)
    for shared, stand_ins in apps.items():
        _register_applications(shared, stand_ins)
    return sites


_SEQ2SEQ_NOTE = ("{name} is an encoder-decoder: the encoder reads each text and the decoder reads the same text "
                 "shifted right behind its start token {start} (teacher forcing), with the same padding mask. "
                 "Sites are the encoder's self-attention, then per decoder layer its causal self-attention and its "
                 "cross-attention (queries from the decoder, keys and values from the encoder's output). "
                 "{effect} Every removal is a full forward pass of encoder and decoder.")


def _seq2seq(model: nn.Module, arch: Architecture, dec: nn.Module) -> ModelAdapter:
    """Encoder self-attention, then per decoder layer its self- and cross-attention, in call order."""
    enc = _stack_of(arch, model)
    cfg = model.config
    start = getattr(cfg, "decoder_start_token_id", None)
    if start is None and cfg.model_type == "mbart":
        start = -1          # mBART's own convention (shift_tokens_right): the last real token, its language code
    if start is None:
        raise ArchitectureError(f"{type(model).__name__} ({arch.family}): config.decoder_start_token_id is None; "
                                "the decoder's input (the text shifted right) needs it")
    _, enc_layers, geo = resolve(arch, enc)
    dec_arch = replace(arch, heads=arch.decoder_heads or arch.heads)
    _, dec_layers, dgeo = resolve(dec_arch, dec)
    parts = [(f"encoder.{arch.layers}", "encoder", "self", arch, layer, j, geo) for j, layer in enumerate(enc_layers)]
    for j, layer in enumerate(dec_layers):
        parts += [(f"decoder.{arch.layers}", "decoder", "self", dec_arch, layer, j, dgeo),
                  (f"decoder.{arch.layers}", "decoder", "cross", _cross_paths(dec_arch), layer, j, dgeo)]
    sites = []
    for i, (prefix, stack, role, a, layer, j, g) in enumerate(parts):
        site = _site(a, layer, j, g, cfg, causal_default=False)
        site.index, site.name, site.stack, site.role = i, f"{prefix}.{j}.{a.attention}", stack, role
        site.block = None            # removal: full forward passes (an encoder head changes every cross-attention)
        sites.append(site)
    lm = _get_path(model, arch.lm_head) is not None
    effect = ("Removal effect: the increase of the seq2seq LM loss of predicting each real token of the text "
              "(nats per token)." if lm else "No LM head: the removal effect is the shift (1 - cos) of the "
              "decoder's mean-pooled output.")
    note = _SEQ2SEQ_NOTE.format(name=type(model).__name__, effect=effect,
                                start=f"(id {start})" if start >= 0 else "(its last real token, mBART's language code)")
    return ModelAdapter(model, sites, "causal-lm" if lm else "encoder", None, family=arch.family, base=None,
                        decoder=True, architecture=arch, decoder_start=int(start), notes=(note,))


def _from_table(model: nn.Module, arch: Architecture) -> ModelAdapter:
    dec = _decoder_of(arch, model)
    if dec is not None:
        return _seq2seq(model, arch, dec)
    model = _stack_of(arch, model)     # an encoder-decoder's encoder alone (T5EncoderModel): the diagnosed model
    base, layers, geo = resolve(arch, model)
    cfg = getattr(model.config, "text_config", None) or model.config
    if arch.shared:   # no block re-use: every removal is a full forward pass
        return ModelAdapter(model, _albert(model, arch, base, layers, geo, cfg), "encoder", None, family=arch.family,
                            base=base, architecture=arch)
    sites = [_site(arch, layer, i, geo, cfg, arch.kind == "causal-lm") for i, layer in enumerate(layers)]
    kind, tail = _tail(arch, model, base, cfg)
    if arch.no_reuse and getattr(cfg, arch.no_reuse, None):   # e.g. DeBERTa's convolution after the first layer
        tail = None
    family = getattr(cfg, "model_type", None) if arch.family in ("llama", "llama-moe") else arch.family
    # a model type matched by structure only: its blocks were never checked to broadcast over replicas
    broadcast = arch.broadcast and getattr(cfg, "model_type", None) in arch.model_types
    return ModelAdapter(model, sites, kind, tail, family=family or arch.family, base=base, blocks_broadcast=broadcast,
                        decoder=arch.kind == "causal-lm", architecture=arch)


def adapt(model: nn.Module | ModelAdapter) -> ModelAdapter:
    """Detect the model family and return its :class:`ModelAdapter`.

    A TransformerLens 4.x ``TransformerBridge`` or an nnsight ``LanguageModel`` is first unwrapped to the
    transformers model it holds (:mod:`attnspec.models.toolkits`; a bridge's attention is read through its own
    hook points). Modules following the per-block protocol (:class:`attnspec.models.protocol.AttentionBlock`)
    come first, then the transformers families of :data:`attnspec.models.architectures.ARCHITECTURES`, then
    ``nn.MultiheadAttention``; an adapter is returned as it is.

    Examples
    --------
    >>> from torch import nn
    >>> mha = adapt(nn.TransformerEncoderLayer(d_model=16, nhead=4, dim_feedforward=32, batch_first=True))
    >>> mha.family, mha.kind, [(s.name, s.n_heads) for s in mha.sites]
    ('nn.MultiheadAttention', 'generic', [('self_attn', 4)])
    >>> import transformers
    >>> cfg = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=100)
    >>> gpt2 = adapt(transformers.GPT2LMHeadModel(cfg))
    >>> gpt2.family, gpt2.kind, len(gpt2.sites), gpt2.sites[0].causal
    ('gpt2', 'causal-lm', 2, True)

    Raises
    ------
    AdapterError
        No supported attention layer found (the message lists what is supported).
    """
    if isinstance(model, ModelAdapter):
        return model
    held = unwrap(model)
    if held.toolkit is not None:
        adapter = adapt(held.module)
        if held.bridge:
            adapter = bridge_adapter(adapter)
        return replace(adapter, notes=adapter.notes + held.notes, toolkit=held.toolkit, tokenizer=held.tokenizer)
    custom = _custom_sites(model)
    if custom:
        return ModelAdapter(model, custom, "generic", None, family="custom")
    arch = detect(model) if hasattr(model, "config") else None
    if arch is not None:
        return _from_table(model, arch)
    mha = _mha_sites(model)
    if mha:
        return ModelAdapter(model, mha, "generic", None, family="nn.MultiheadAttention")
    mtype = getattr(getattr(model, "config", None), "model_type", None)
    known = ", ".join(a.family for a in ARCHITECTURES)
    raise AdapterError(f"{type(model).__name__}{f' (model_type {mtype!r})' if mtype else ''}: no supported attention "
                       f"layers. Supported: the transformers families {known} (attnspec diagnose "
                       "--list-architectures), torch.nn.MultiheadAttention, and modules following "
                       "attnspec.models.protocol.AttentionBlock")
