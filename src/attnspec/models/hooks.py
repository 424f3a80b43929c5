"""Forward hooks: capture per-head weights, values and contexts; remove or gate heads.

All hooks are registered inside context managers and removed on exit, also on error; the model's
parameters and buffers are never written (``tests/test_models_hooks.py`` checks bit-identity).

Shapes: ``A`` ``(B, H, L, L)``, ``V`` ``(B, H_kv, L, d_head)``, context ``C`` ``(B, L, H*d_head)``,
allowed set ``(B, L, L)`` (bool).

The allowed set of a transformers site is the one of its recorded attention call
(:mod:`.attention_calls`: read from the mask the attention function actually receives, whatever the
kernel, so it is the model's own causal, padding, sliding-window and per-layer pattern), the same set
the diagnosis reads; sites without recorded calls (custom modules, ``nn.MultiheadAttention``) have
none here (their rule is :meth:`AttentionSite.allowed`).
"""
from __future__ import annotations

from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import torch
import torch.nn.functional as F

from .attention_calls import record_attention_calls
from .protocol import AttentionSite
from .rule_mask import RuleMask

__all__ = ["Capture", "capture", "ablate", "gate", "HeadEdit"]


@dataclass
class Capture:
    """What one forward pass left at each site (lists indexed like the sites).

    ``weights[i]`` ``(B, H, L, L)``, ``values[i]`` ``(B, H_kv, L, d_head)``, ``contexts[i]``
    ``(B, L, H * d_head)`` (the output projection's input), ``allowed[i]`` ``(B, L, L)`` or None.

    Examples
    --------
    >>> cap = Capture([None], [None], [None], [None], [None])
    >>> len(cap.weights), cap.allowed
    (1, [None])
    """

    weights: list = field(default_factory=list)
    values: list = field(default_factory=list)
    contexts: list = field(default_factory=list)
    block_inputs: list = field(default_factory=list)  # (args, kwargs) per site
    allowed: list = field(default_factory=list)  # (B, L, L) bool per site: its recorded call's, or None


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
    """Record ``A``, ``V``, the contexts and the allowed sets at every site (and block inputs when ``blocks``).

    ``cap.allowed[i]``: the boolean ``(B, L, L)`` allowed set of site ``i``'s recorded attention call (module
    docstring), or ``None`` for sites without recorded calls. With a kernel that does not return the weights
    (SDPA, FlashAttention), ``cap.weights[i]`` is recomputed from the recorded call (:mod:`.attention_calls`).

    Examples
    --------
    >>> import torch, transformers; from attnspec.models import adapt
    >>> ad = adapt(transformers.BertModel(transformers.BertConfig(hidden_size=32, num_hidden_layers=1,
    ...                                   num_attention_heads=2, intermediate_size=64, vocab_size=100)).eval())
    >>> with torch.no_grad(), capture(ad.sites) as cap:
    ...     _ = ad.run({"input_ids": torch.tensor([[1, 5, 6, 2]]), "attention_mask": torch.tensor([[1, 1, 1, 0]])})
    >>> cap.weights[0].shape, cap.contexts[0].shape, cap.allowed[0][0, 0].tolist()
    (torch.Size([1, 2, 4, 4]), torch.Size([1, 4, 32]), [True, True, True, False])
    """
    n = len(sites)
    cap = Capture([None] * n, [None] * n, [None] * n, [None] * n, [None] * n)
    handles = []
    index = {id(s.module): i for i, s in enumerate(sites) if s.kind == "hf"}

    fused = {id(s.module) for s in sites if s.kind == "hf" and s.values_module is None}

    def on_call(call):
        i = index.get(id(call.module))
        if i is None:
            return
        cap.allowed[i] = call.allowed.dense() if isinstance(call.allowed, RuleMask) else call.allowed
        half = call.query.dtype in (torch.bfloat16, torch.float16)
        if keep_weights:
            cap.weights[i] = call.weights(dtype=torch.float32 if half else call.query.dtype)
        if id(call.module) in fused:   # values of fused q/k/v projections: from the call
            cap.values[i] = call.value
    calls = record_attention_calls(on_call) if index else nullcontext()
    try:
        calls.__enter__()
        for i, s in enumerate(sites):
            if s.recompute is not None:
                def mha_hook(mod, args, kwargs, output, i=i, s=s):
                    A, V, ctx = _mha_context(s, mod, args, kwargs)
                    cap.weights[i], cap.values[i], cap.contexts[i] = A.detach(), V.detach(), ctx.detach()
                handles.append(s.module.register_forward_hook(mha_hook, with_kwargs=True))
            else:
                wc, vc, cc = [0], [0], [0]    # call counters of shared modules (ALBERT), one per hook

                def w_hook(mod, args, output, i=i, s=s, wc=wc):
                    if not s.is_mine(wc):
                        return
                    w = s.weights_pick(output) if keep_weights else None
                    if w is not None:   # eager kernels return the weights; others were recorded by on_call
                        cap.weights[i] = w.detach()
                def v_hook(mod, args, output, i=i, s=s, vc=vc):
                    if s.is_mine(vc):
                        cap.values[i] = s.values_pick(output).detach()

                def c_hook(mod, args, i=i, s=s, cc=cc):
                    if s.is_mine(cc):
                        cap.contexts[i] = args[0].detach()
                handles.append(s.weights_module.register_forward_hook(w_hook))
                if s.values_module is not None:
                    handles.append(s.values_module.register_forward_hook(v_hook))
                handles.append(s.out_proj.register_forward_pre_hook(c_hook))
            if blocks and s.block is not None:
                def b_hook(mod, args, kwargs, i=i):
                    cap.block_inputs[i] = (args, kwargs)
                handles.append(s.block.register_forward_pre_hook(b_hook, with_kwargs=True))
        yield cap
    finally:
        calls.__exit__(None, None, None)
        for h in handles:
            h.remove()


@dataclass
class HeadEdit:
    """Remove heads at one site, one head per replica of the batch.

    The batch seen by the site is ``K`` stacked replicas of ``B`` inputs (``K = len(heads)``); replica
    ``k`` has head ``heads[k]`` removed (``-1``: nothing removed). ``mode='zero'`` sets the head's
    context to 0; ``mode='mean'`` to ``means[h]`` (its mean over real tokens and inputs).

    Examples
    --------
    >>> import torch
    >>> ctx = torch.ones(1, 1, 4)                             # B = L = 1, H = 2 heads of width 2
    >>> HeadEdit([0, 1, -1]).replicas(ctx, H=2)[:, 0, 0]      # head 0 removed, head 1 removed, none
    tensor([[0., 0., 1., 1.],
            [1., 1., 0., 0.],
            [1., 1., 1., 1.]])
    >>> HeadEdit([1], mode="mean", means=torch.full((2, 2), 0.5)).apply(ctx, H=2)
    tensor([[[1.0000, 1.0000, 0.5000, 0.5000]]])
    """

    heads: Sequence[int]
    mode: str = "zero"
    means: torch.Tensor | None = None  # (H, d_head)

    def _edited(self, x: torch.Tensor, H: int) -> torch.Tensor:
        """``x`` ``(K or 1, B, L, H*d)`` -> ``(K, B, L, H*d)``: copy ``k`` is ``x * keep_k + (1 - keep_k) *
        fill``, ``keep_k`` the indicator of the heads other than ``heads[k]``, ``fill`` 0 or the means."""
        _, B, L, D = x.shape
        h = torch.as_tensor(list(self.heads), device=x.device)
        keep = (torch.arange(H, device=x.device)[None, :] != h[:, None]).to(x.dtype)[:, None, None, :, None]  # (K,1,1,H,1)
        y = x.view(-1, B, L, H, D // H) * keep
        if self.mode == "mean":
            y = y + (1 - keep) * self.means.to(device=x.device, dtype=x.dtype)
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

    Examples
    --------
    >>> import torch, transformers
    >>> tiny = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, vocab_size=100)
    >>> model = transformers.BertModel(transformers.BertConfig(**tiny)).eval()
    >>> from attnspec.models import adapt
    >>> ad = adapt(model)
    >>> batch = {"input_ids": torch.tensor([[1, 5, 6, 7, 2, 0]]), "attention_mask": torch.tensor([[1, 1, 1, 1, 1, 0]])}
    >>> with torch.no_grad():
    ...     full = ad.run(batch)
    ...     with ablate(ad.sites[0], HeadEdit([0, 1])):             # two replicas: head 0, then head 1 removed
    ...         removed = ad.run({k: v.repeat(2, 1) for k, v in batch.items()})
    >>> removed.shape, bool((removed[0] - full[0]).abs().max() > 0)
    (torch.Size([2, 6, 32]), True)
    """
    if site.recompute is not None:
        if expand:
            raise ValueError("expand=True needs an output projection called on the context (not nn.MultiheadAttention)")

        def hook(mod, args, kwargs, output):
            _, _, ctx = _mha_context(site, mod, args, kwargs)
            return _mha_output(mod, edit.apply(ctx, site.n_heads), output)
        h = site.module.register_forward_hook(hook, with_kwargs=True)
    else:
        count = [0]

        def hook(mod, args):
            if not site.is_mine(count):    # a shared output projection, another layer's call
                return None
            x = edit.replicas(args[0], site.n_heads) if expand else edit.apply(args[0], site.n_heads)
            return (x,) + tuple(args[1:])
        h = site.out_proj.register_forward_pre_hook(hook)
    try:
        yield
    finally:
        h.remove()


@contextmanager
def gate(sites: Sequence[AttentionSite], gates: Sequence[torch.Tensor]) -> Iterator[None]:
    """Multiply head ``h`` of input ``b`` at site ``i`` by ``gates[i][b, h]`` (Michel et al. 2019 gates).

    Gates of ones leave the model unchanged; gradients with respect to them are head importances.

    Examples
    --------
    >>> import torch
    >>> from attnspec.models import adapt
    >>> layer = torch.nn.TransformerEncoderLayer(d_model=16, nhead=4, dim_feedforward=32, batch_first=True).eval()
    >>> ad, x = adapt(layer), torch.randn(2, 5, 16)
    >>> ones, head0_off = torch.ones(2, 4), torch.tensor([[0.0, 1, 1, 1], [1, 1, 1, 1]])
    >>> with torch.no_grad(), gate(ad.sites, [head0_off]):
    ...     off = layer(x)
    >>> with torch.no_grad(), gate(ad.sites, [ones]):
    ...     same = layer(x)
    >>> with torch.no_grad():
    ...     bool(torch.allclose(same, layer(x), atol=1e-6)), bool(torch.allclose(off[0], layer(x)[0]))
    (True, False)
    """
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
                def hook(mod, args, s=s, g=g, count=[0]):  # noqa: B006 (count: this hook's own call counter)
                    if not s.is_mine(count):
                        return None
                    return (scaled(args[0], g, s.n_heads),) + tuple(args[1:])
                handles.append(s.out_proj.register_forward_pre_hook(hook))
        yield
    finally:
        for h in handles:
            h.remove()
