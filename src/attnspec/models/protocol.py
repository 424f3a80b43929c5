"""What attnspec needs from one attention layer, and the per-block protocol for custom attention modules.

An :class:`AttentionSite` describes one multi-head self-attention layer of a model in terms of
three hook points, all on *unmodified* modules (forward hooks only; nothing is patched):

* ``weights``: where the post-softmax attention weights ``A`` of shape ``(B, H, L, L)`` appear —
  the second element of the attention module's output (transformers eager attention) or the output
  of a probe sub-module;
* ``values``: where the per-head values appear, normalized by :meth:`AttentionSite.values_of` to
  shape ``(B, H_kv, L, d_head)``;
* ``out_proj``: the output projection; its *input* is the concatenation of the per-head contexts
  ``C = [A_1 V_1, ..., A_H V_H]`` of shape ``(B, L, H * d_head)`` (head-major). Per-head outputs
  are ``C_h W_O^h`` with ``W_O^h`` the rows ``h*d_head:(h+1)*d_head`` of :meth:`w_out`. Head
  removal is a forward *pre*-hook on ``out_proj`` that zeroes (or mean-replaces) a head's slice.

Custom attention blocks (EEG, SPD, ... models)
----------------------------------------------
A module is diagnosed through :class:`AttentionBlock` (the per-block protocol) when it sets
``attnspec_protocol = 1`` and exposes:

=====================  =========================================================================
``n_heads: int``       number of query heads ``H``
``n_kv_heads: int``    (optional, default ``H``) number of key/value heads; query head ``h`` uses
                       kv head ``h // (H // n_kv_heads)``
``head_dim: int``      per-head value width ``d_head``
``causal: bool``       (optional, default False) query ``i`` may attend to keys ``j <= i`` only
``window: int|None``   (optional) sliding window: keys with ``i - j < window`` only (causal), or
                       ``|i - j| < window`` (bidirectional)
``attn_probe``         an ``nn.Identity`` the module calls on its attention weights, shape
                       ``(B, H, L, L)``, after softmax and masking: ``A = self.attn_probe(A)``
``value_probe``        an ``nn.Identity`` the module calls on its values, shape
                       ``(B, n_kv_heads, L, head_dim)``: ``V = self.value_probe(V)``
``out_proj``           an ``nn.Linear(H * head_dim, d_out)`` applied to the head-major
                       concatenation of the contexts ``A_h V_h`` (``(B, L, H * head_dim)``)
=====================  =========================================================================

Inputs are batch-first with tokens on axis 1. Padding: pass ``attention_mask`` (``(B, L)``, 1 for
real tokens) to :func:`attnspec.diagnose`; the module itself must mask padded keys. Example::

    class EEGAttention(nn.Module):
        attnspec_protocol = 1
        def __init__(self, d, H):
            super().__init__()
            self.n_heads, self.head_dim = H, d // H
            self.qkv = nn.Linear(d, 3 * d)
            self.out_proj = nn.Linear(d, d)
            self.attn_probe, self.value_probe = nn.Identity(), nn.Identity()
        def forward(self, x, key_padding_mask=None):            # x: (B, L, d)
            B, L, _ = x.shape
            q, k, v = self.qkv(x).view(B, L, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
            s = q @ k.transpose(-1, -2) / self.head_dim ** 0.5
            if key_padding_mask is not None:                     # True = padded
                s = s.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
            A = self.attn_probe(s.softmax(-1))
            v = self.value_probe(v)
            return self.out_proj((A @ v).transpose(1, 2).reshape(B, L, -1))

Functional effects of head removal on such models use the model's own output (see
:class:`attnspec.models.adapters.ModelAdapter`): ``1 - cos`` of the mean-pooled output for a
``(B, L, D)`` output. A whole model whose blocks follow this protocol may implement the model-level
protocol :class:`attnspec.CustomAttention` (:mod:`attnspec.models.custom`): its ``functional_output``
is then what head removal is measured on, and a block's ``structure_mask`` and ``path`` reach the
site (:attr:`AttentionSite.structure`, :attr:`AttentionSite.path`).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Callable, Protocol, runtime_checkable

import torch
from torch import nn

__all__ = ["AttentionSite", "AttentionBlock", "evaluation_mode"]


@contextlib.contextmanager
def evaluation_mode(module: nn.Module):
    """Every submodule of ``module`` in evaluation mode inside the block, each put back in its *own* mode after
    (``module.train()`` would set every submodule to training, giving frozen, eval-mode parts their dropout back).

    Examples
    --------
    >>> net = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5)).train()
    >>> _ = net[1].eval()                                  # a frozen part the user keeps in eval mode
    >>> with evaluation_mode(net):
    ...     inside = [m.training for m in net.modules()]
    >>> inside, [m.training for m in net.modules()]
    ([False, False, False], [True, True, False])
    """
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        yield module
    finally:
        for m, training in modes:
            m.training = training


@runtime_checkable
class AttentionBlock(Protocol):
    """Typed form of the per-block protocol described in the module docstring (one attention block;
    the model-level protocol is :class:`attnspec.CustomAttention`).

    Examples
    --------
    >>> class Block(nn.Module):
    ...     attnspec_protocol = 1
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.n_heads, self.head_dim, self.out_proj = 2, 4, nn.Linear(8, 8)
    ...         self.attn_probe, self.value_probe = nn.Identity(), nn.Identity()
    >>> isinstance(Block(), AttentionBlock), isinstance(nn.Linear(8, 8), AttentionBlock)
    (True, False)
    """

    attnspec_protocol: int
    n_heads: int
    head_dim: int
    attn_probe: nn.Module
    value_probe: nn.Module
    out_proj: nn.Linear


@dataclass
class AttentionSite:
    """One attention layer: hook points and geometry.

    Attributes
    ----------
    index : int
        Position of the layer in the model (0-based).
    name : str
        Dotted module path of the attention module.
    module : nn.Module
        The attention module itself.
    out_proj : nn.Module
        Output projection; its input is the concatenated per-head context ``(B, L, H*d_head)``.
    weights_module : nn.Module or None
        Module whose forward output carries ``A``; ``weights_pick`` extracts it.
    values_module : nn.Module or None
        Module whose forward output carries the values; ``values_pick`` maps it to
        ``(B, H_kv, L, d_head)``. ``None`` for fused query/key/value projections (GPT-2, GPT-NeoX,
        Phi-3, Falcon): :func:`attnspec.models.capture` then takes the values from the recorded attention call.
    n_heads, n_kv_heads, head_dim, d_out : int
        Geometry: query heads, key/value heads (GQA when smaller), per-head value width, output width.
    causal : bool
        Causal attention (key ``j`` allowed for query ``i`` only if ``j <= i``).
    window : int or None
        Sliding window (key ``j`` allowed only if ``i - j < window``, or ``|i - j| < window`` for
        bidirectional attention); ``None`` = full. For transformers models both come from the module
        and its config (``is_causal``, ``layer_types``, ``sliding_window``); they are metadata for
        reports and the rule of :meth:`allowed`: for transformers models the diagnosis reads the allowed
        set of the recorded attention call (:mod:`attnspec.models.attention_calls`: the mask the attention
        function actually receives), as :func:`attnspec.models.capture` does.
    block : nn.Module or None
        The residual block that contains this layer, called as ``block(hidden, **kwargs)``; enables
        activation reuse in exact ablation. ``None`` falls back to full forward passes.
    application, n_applications : int or None, int
        Layers that share one attention module (ALBERT applies the same weights ``n_applications`` times):
        this site is the ``application``-th call of the shared module in a forward pass. ``module`` is then a
        per-application stand-in (:class:`attnspec.models.attention_calls.Application`) to which recorded
        calls are attributed, and hooks on the shared modules act on this site's call only
        (:meth:`is_mine`). ``None``: an unshared module.
    stack : str or None
        Encoder-decoders: ``'encoder'`` or ``'decoder'``, the stack this layer belongs to; ``None`` for
        single-stack models.
    role : {'self', 'cross'}
        ``'cross'``: cross-attention of an encoder-decoder's decoder: queries from the decoder's hidden
        states, keys and values from the encoder's output (``(B, H, L_dec, L_enc)`` weights); the logits
        decompose per head as in self-attention, ``scaling * q_i . k_j``.
    recompute : callable or None
        For modules whose internals cannot be hooked (``nn.MultiheadAttention``): a function
        ``(module, args, kwargs) -> (A, V)`` recomputing weights and values from the call's inputs.
    structure : callable or None
        ``structure()`` returns the structure mask of the layer's last forward call: boolean ``(L, L)``
        or ``(B, L, L)``, True where query ``i`` may attend key ``j``, or ``None`` (no structure).
        :meth:`allowed` intersects it with the padding, causal and window rule. Set by
        :func:`attnspec.models.custom.custom_adapter` from a block's ``structure_mask``; ``None``: no
        structure.
    path : str
        Label of the attention path the layer implements (e.g. ``'temporal'``); ``''`` when unlabelled.

    Examples
    --------
    >>> import transformers
    >>> from attnspec.models import adapt
    >>> cfg = transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
    ...                               vocab_size=100)
    >>> site = adapt(transformers.BertModel(cfg)).sites[0]
    >>> site.describe()
    'encoder.layer.0.attention.self: 2 heads x 16, d_out=32, bidirectional'
    >>> site.w_out().shape, site.kv_group(1)
    (torch.Size([32, 32]), 1)
    >>> site.allowed(torch.tensor([[1, 1, 0]]))[0].int()      # padded keys are not allowed
    tensor([[1, 1, 0],
            [1, 1, 0],
            [0, 0, 0]], dtype=torch.int32)
    """

    index: int
    name: str
    module: nn.Module
    out_proj: nn.Module
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_out: int
    causal: bool = False
    window: int | None = None
    weights_module: nn.Module | None = None
    weights_pick: Callable = field(default=lambda out: out[1])
    values_module: nn.Module | None = None
    values_pick: Callable = field(default=lambda out: out)
    block: nn.Module | None = None
    recompute: Callable | None = None
    w_out_fn: Callable | None = None
    kind: str = "hf"
    application: int | None = None
    n_applications: int = 1
    stack: str | None = None
    role: str = "self"
    structure: Callable[[], torch.Tensor | None] | None = None
    path: str = ""

    def is_mine(self, counter: list) -> bool:
        """For a module shared by several layers (ALBERT): count one call in ``counter`` (a one-element list)
        and say whether it is this site's application; always True for unshared modules."""
        if self.application is None:
            return True
        k = counter[0]
        counter[0] += 1
        return k % self.n_applications == self.application

    def w_out(self) -> torch.Tensor:
        """``W_O`` as ``(H * d_head, d_out)`` so that the layer output is ``C @ W_O + b``."""
        if self.w_out_fn is not None:
            return self.w_out_fn()
        return self.out_proj.weight.detach().T

    def kv_group(self, h: int) -> int:
        """Key/value head used by query head ``h``."""
        return h // (self.n_heads // self.n_kv_heads)

    def allowed(self, attention_mask: torch.Tensor) -> torch.Tensor:
        """Boolean ``(B, L, L)`` from the site's metadata: query ``i`` may attend key ``j`` (both real
        tokens, causal, window), intersected with :attr:`structure` when set. The allowed set of the sites without
        recorded attention calls (custom modules, ``nn.MultiheadAttention``); transformers sites are read from
        their recorded calls (:mod:`attnspec.models.attention_calls`).

        Parameters
        ----------
        attention_mask : Tensor
            ``(B, L)``, nonzero for real tokens.

        Raises
        ------
        ValueError
            ``structure()`` returns a mask whose shape is neither ``(L, L)`` nor ``(B, L, L)``.

        Examples
        --------
        >>> import torch
        >>> from torch import nn
        >>> lin = nn.Linear(4, 4)
        >>> site = AttentionSite(0, "a", lin, lin, n_heads=2, n_kv_heads=2, head_dim=2, d_out=4, causal=True)
        >>> int(site.allowed(torch.ones(1, 3)).sum())                      # lower triangle of 3 x 3
        6
        >>> site.structure = lambda: torch.eye(3, dtype=torch.bool)        # each token attends itself only
        >>> int(site.allowed(torch.ones(1, 3)).sum())
        3
        """
        valid = attention_mask.bool()
        B, L = valid.shape
        ok = valid[:, :, None] & valid[:, None, :]
        i = torch.arange(L, device=valid.device)
        dist = i[:, None] - i[None, :]
        if self.causal:
            ok = ok & (dist >= 0)[None]
        if self.window is not None:
            ok = ok & ((dist if self.causal else dist.abs()) < self.window)[None]
        sm = self.structure() if self.structure is not None else None
        if sm is None:
            return ok
        sm = torch.as_tensor(sm).to(device=ok.device, dtype=torch.bool)
        if sm.dim() not in (2, 3) or sm.shape[-2:] != ok.shape[-2:] or (sm.dim() == 3 and sm.shape[0] not in (1, B)):
            raise ValueError(f"{self.name}: structure_mask has shape {tuple(sm.shape)}; expected (L, L) or (B, L, L) "
                             f"with B = {B}, L = {L}")
        return ok & (sm if sm.dim() == 3 else sm[None])

    def describe(self) -> str:
        att = "causal" if self.causal else "bidirectional"
        if self.role == "cross":
            att = "cross-attention (keys and values from the encoder)"
        if self.window is not None:
            att += f", sliding window {self.window}"
        kv = f", {self.n_kv_heads} kv heads" if self.n_kv_heads != self.n_heads else ""
        return f"{self.name}: {self.n_heads} heads x {self.head_dim}{kv}, d_out={self.d_out}, {att}"
