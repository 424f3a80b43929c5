"""Attention sites of modules outside the transformers families, and the adapter error.

``nn.MultiheadAttention``: its per-head weights and values are recomputed from the arguments of each call
(its output projection ``out_proj`` is applied inside the functional call, never called as a module, so head
removal edits the recomputed context). Modules following the per-block protocol
(:mod:`attnspec.models.protocol`): weights and values come from their ``attn_probe`` and ``value_probe``.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .protocol import AttentionBlock, AttentionSite

__all__ = ["AdapterError"]


class AdapterError(TypeError):
    """The model has no attention layers attnspec knows how to hook.

    Examples
    --------
    >>> from torch import nn
    >>> from attnspec.models import adapt
    >>> adapt(nn.Sequential(nn.Linear(3, 3)))
    Traceback (most recent call last):
    attnspec.models.generic.AdapterError: Sequential: no supported attention layers. Supported: the transformers ...
    """


def _heads_view(x: torch.Tensor, n: int) -> torch.Tensor:
    """``(B, L, n*d) -> (B, n, L, d)``."""
    B, L, D = x.shape
    return x.view(B, L, n, D // n).transpose(1, 2)


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
            if not isinstance(mod, AttentionBlock):
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
