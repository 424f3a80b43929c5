"""Forward hooks: capture per-head weights, values and contexts; remove or gate heads.

All hooks are registered inside context managers and removed on exit, also on error; the model's
parameters and buffers are never written (``tests/test_models_hooks.py`` checks bit-identity).

Shapes: ``A`` ``(B, H, L, L)``, ``V`` ``(B, H_kv, L, d_head)``, context ``C`` ``(B, L, H*d_head)``.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import torch
import torch.nn.functional as F

from .protocol import AttentionSite

__all__ = ["Capture", "capture", "ablate", "gate", "HeadEdit"]


@dataclass
class Capture:
    """What one forward pass left at each site (lists indexed like the sites)."""

    weights: list = field(default_factory=list)
    values: list = field(default_factory=list)
    contexts: list = field(default_factory=list)
    block_inputs: list = field(default_factory=list)  # (args, kwargs) per site


def _mha_context(site: AttentionSite, mod, args, kwargs):
    A, V = site.recompute(mod, args, kwargs)
    B, H, L, dh = V.shape
    ctx = (A @ V).transpose(1, 2).reshape(B, L, H * dh)
    return A, V, ctx


def _mha_output(mod, ctx, output):
    out = F.linear(ctx, mod.out_proj.weight, mod.out_proj.bias)
    if not mod.batch_first:
        out = out.transpose(0, 1)
    return (out,) + tuple(output[1:]) if isinstance(output, tuple) else out


@contextmanager
def capture(sites: Sequence[AttentionSite], blocks: bool = False, keep_weights: bool = True) -> Iterator[Capture]:
    """Record ``A``, ``V`` and the contexts at every site (and block inputs when ``blocks``)."""
    cap = Capture([None] * len(sites), [None] * len(sites), [None] * len(sites), [None] * len(sites))
    handles = []
    try:
        for i, s in enumerate(sites):
            if s.recompute is not None:
                def mha_hook(mod, args, kwargs, output, i=i, s=s):
                    A, V, ctx = _mha_context(s, mod, args, kwargs)
                    cap.weights[i], cap.values[i], cap.contexts[i] = A.detach(), V.detach(), ctx.detach()
                handles.append(s.module.register_forward_hook(mha_hook, with_kwargs=True))
            else:
                def w_hook(mod, args, output, i=i, s=s):
                    cap.weights[i] = s.weights_pick(output).detach() if keep_weights else None
                def v_hook(mod, args, output, i=i, s=s):
                    cap.values[i] = s.values_pick(output).detach()
                def c_hook(mod, args, i=i):
                    cap.contexts[i] = args[0].detach()
                handles.append(s.weights_module.register_forward_hook(w_hook))
                handles.append(s.values_module.register_forward_hook(v_hook))
                handles.append(s.out_proj.register_forward_pre_hook(c_hook))
            if blocks and s.block is not None:
                def b_hook(mod, args, kwargs, i=i):
                    cap.block_inputs[i] = (args, kwargs)
                handles.append(s.block.register_forward_pre_hook(b_hook, with_kwargs=True))
        yield cap
    finally:
        for h in handles:
            h.remove()


@dataclass
class HeadEdit:
    """Remove heads at one site, one head per replica of the batch.

    The batch seen by the site is ``K`` stacked replicas of ``B`` inputs (``K = len(heads)``); replica
    ``k`` has head ``heads[k]`` removed (``-1``: nothing removed). ``mode='zero'`` sets the head's
    context to 0; ``mode='mean'`` to ``means[h]`` (its mean over real tokens and inputs).
    """

    heads: Sequence[int]
    mode: str = "zero"
    means: torch.Tensor | None = None  # (H, d_head)

    def _edited(self, x: torch.Tensor, H: int) -> torch.Tensor:
        """``x`` ``(K or 1, B, L, H*d)`` -> ``(K, B, L, H*d)``: copy ``k`` is ``x * keep_k + (1 - keep_k) *
        fill``, ``keep_k`` the indicator of the heads other than ``heads[k]``, ``fill`` 0 or the means."""
        _, B, L, D = x.shape
        h = torch.as_tensor(list(self.heads))
        keep = (torch.arange(H)[None, :] != h[:, None]).to(x.dtype)[:, None, None, :, None]  # (K,1,1,H,1)
        y = x.view(-1, B, L, H, D // H) * keep
        if self.mode == "mean":
            y = y + (1 - keep) * self.means.to(x.dtype)
        return y.view(len(h), B, L, D)

    def replicas(self, ctx: torch.Tensor, H: int) -> torch.Tensor:
        """``K`` edited copies of one context ``ctx`` ``(B, L, H*d)``: ``(K, B, L, H*d)``."""
        return self._edited(ctx[None], H)

    def apply(self, ctx: torch.Tensor, H: int) -> torch.Tensor:
        """Edit a stacked context ``(K*B, L, H*d)`` whose replica ``k`` loses head ``heads[k]``."""
        K = len(self.heads)
        KB, L, D = ctx.shape
        return self._edited(ctx.view(K, KB // K, L, D), H).reshape(KB, L, D)


@contextmanager
def ablate(site: AttentionSite, edit: HeadEdit, expand: bool = False) -> Iterator[None]:
    """Apply ``edit`` at ``site`` for the duration of the block (pre-hook on the output projection).

    With ``expand`` the site runs once on the unreplicated batch and the pre-hook returns the ``K``
    edited copies ``(K, B, L, H*d)`` (:meth:`HeadEdit.replicas`): queries, keys, values and attention
    are computed once for all ``K`` removals, and the block's residual sum broadcasts to
    ``(K, B, L, D)``.
    """
    if site.recompute is not None:
        if expand:
            raise ValueError("expand=True needs an output projection called on the context (not nn.MultiheadAttention)")

        def hook(mod, args, kwargs, output):
            _, _, ctx = _mha_context(site, mod, args, kwargs)
            return _mha_output(mod, edit.apply(ctx, site.n_heads), output)
        h = site.module.register_forward_hook(hook, with_kwargs=True)
    else:
        def hook(mod, args):
            x = edit.replicas(args[0], site.n_heads) if expand else edit.apply(args[0], site.n_heads)
            return (x,) + tuple(args[1:])
        h = site.out_proj.register_forward_pre_hook(hook)
    try:
        yield
    finally:
        h.remove()


@contextmanager
def gate(sites: Sequence[AttentionSite], gates: Sequence[torch.Tensor]) -> Iterator[None]:
    """Multiply head ``h`` of input ``b`` at site ``i`` by ``gates[i][b, h]`` (Michel et al. 2019 gates)."""
    handles = []

    def scaled(ctx, g, H):
        B, L, D = ctx.shape
        return (ctx.view(B, L, H, D // H) * g[:, None, :, None]).view(B, L, D)
    try:
        for s, g in zip(sites, gates):
            if s.recompute is not None:
                def hook(mod, args, kwargs, output, s=s, g=g):
                    _, _, ctx = _mha_context(s, mod, args, kwargs)
                    return _mha_output(mod, scaled(ctx, g, s.n_heads), output)
                handles.append(s.module.register_forward_hook(hook, with_kwargs=True))
            else:
                def hook(mod, args, s=s, g=g):
                    return (scaled(args[0], g, s.n_heads),) + tuple(args[1:])
                handles.append(s.out_proj.register_forward_pre_hook(hook))
        yield
    finally:
        for h in handles:
            h.remove()
