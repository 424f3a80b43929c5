"""Multi-head attention with structure masks: the one attention primitive of every zoo model.

Architecture of :class:`MHA` (H heads of width d_h, model width D, D_v = H * d_h)::

    Q, K, V = x W_Q, x W_K, x W_V                         x: [B, L, D] -> each [B, H, L, d_h]
    S       = Q K^T / sqrt(d_h)                            scores, [B, H, L, L] (= logits / beta)
    A       = softmax(beta * S) over the allowed keys      probs,  [B, H, L, L], 0 on disallowed pairs
    C_h     = A_h V_h                                      context, [B, H, L, d_h]
    out     = out_proj(concat_h C_h)                       out_proj = nn.Linear(D_v, D)

``allowed`` ([B, L, L] bool, True = query i may attend to key j) merges a structure mask
([L, L] or [B, L, L]) and a key-padding mask ([B, L], True = padding). Block-structured attention
(a token sees only its own electrode, or only its own time step) is expressed through this mask.

Every block follows the per-block protocol of :mod:`attnspec.models.protocol` (``attn_probe`` on A,
``value_probe`` on V, ``out_proj`` on the head-major contexts) and keeps the structure mask of its last
call in ``structure_mask``, so the zoo models implement :class:`attnspec.CustomAttention`: the library
records A and V (:func:`attnspec.models.capture`), removes heads (:func:`attnspec.models.ablate`, a pre-hook
on ``out_proj``) and ignores the disallowed pairs. What is specific to a model (the anisotropic gate, the
first pass of the diffuse corrector) is kept, detached, in ``block.extra`` after each forward.
:func:`attention_blocks` yields ``(name, block)`` for every block of a model; the name is the module's
qualified name (e.g. ``blocks.0.temporal``) and ``block.path`` says which attention path (``temporal``,
``spatial``, ``time``, ``spd``, ``tokens``) it implements.
"""
from __future__ import annotations

import math
from typing import Iterator

import torch
from torch import nn

__all__ = ["MHA", "attention_blocks", "masked_softmax", "block_diagonal_mask"]


def masked_softmax(logits: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Softmax over the last axis restricted to ``allowed`` (broadcastable bool); rows with no
    allowed key are all zero (never NaN).

    Examples
    --------
    >>> import torch
    >>> masked_softmax(torch.zeros(2, 3), torch.tensor([[True, True, False], [False, False, False]]))
    tensor([[0.5000, 0.5000, 0.0000],
            [0.0000, 0.0000, 0.0000]])
    """
    neg = torch.finfo(logits.dtype).min
    z = logits.masked_fill(~allowed, neg)
    p = torch.softmax(z, dim=-1)
    return p * allowed


def block_diagonal_mask(groups: torch.Tensor) -> torch.Tensor:
    """[L, L] bool mask: token i may attend to token j iff ``groups[i] == groups[j]``.

    Examples
    --------
    >>> import torch
    >>> block_diagonal_mask(torch.tensor([0, 0, 1]))
    tensor([[ True,  True, False],
            [ True,  True, False],
            [False, False,  True]])
    """
    return groups[:, None] == groups[None, :]


class MHA(nn.Module):
    """Multi-head self-attention that exposes scores, probabilities, values and head contexts.

    Follows the per-block protocol of :mod:`attnspec.models.protocol` (``attnspec_protocol = 1``:
    ``n_heads``, ``head_dim``, ``attn_probe`` called on the probabilities, ``value_probe`` called on
    the values, ``out_proj``). The structure mask of the last call is kept in ``structure_mask``
    ([L, L] or [B, L, L], True = allowed) so that a diagnosis can ignore disallowed pairs, and the
    model-specific quantities of the last call (see :meth:`refine`) in ``extra``.

    Parameters
    ----------
    d_model: token width D.
    n_heads: H.
    d_head: per-head query/key/value width d_h (default D // H).
    beta: nominal inverse temperature; the logits are ``beta * S``.
    dropout: dropout on the attention probabilities (training only).
    path: a label saying which attention path this block implements.

    Examples
    --------
    >>> import torch
    >>> _ = torch.manual_seed(0)
    >>> att = MHA(d_model=8, n_heads=2, path="time")
    >>> band = block_diagonal_mask(torch.tensor([0, 0, 1, 1, 1]))          # two groups of tokens
    >>> att(torch.randn(1, 5, 8), mask=band).shape, att.head_dim
    (torch.Size([1, 5, 8]), 4)
    >>> att.structure_mask is band
    True
    """

    attnspec_protocol = 1
    causal = False
    window = None

    def __init__(self, d_model: int, n_heads: int, d_head: int | None = None, beta: float = 1.0,
                 dropout: float = 0.0, path: str = "tokens"):
        super().__init__()
        d_head = d_head or d_model // n_heads
        self.d_model, self.n_heads, self.d_head, self.beta, self.path = d_model, n_heads, d_head, float(beta), path
        self.head_dim = d_head
        self.q_proj = nn.Linear(d_model, n_heads * d_head)
        self.k_proj = nn.Linear(d_model, n_heads * d_head)
        self.v_proj = nn.Linear(d_model, n_heads * d_head)
        self.out_proj = nn.Linear(n_heads * d_head, d_model)
        self.dropout = nn.Dropout(dropout)
        # per-block protocol of attnspec.models.protocol (attnspec_protocol = 1)
        self.attn_probe = nn.Identity()     # called on probs  [B, H, L, L]
        self.value_probe = nn.Identity()    # called on values [B, H, L, d_h]
        self.structure_mask: torch.Tensor | None = None   # last structure mask used ([L, L] or [B, L, L])
        self.extra: dict[str, torch.Tensor] = {}           # model-specific quantities of the last call

    # -- pieces a subclass may override -------------------------------------------------------
    def refine(self, scores: torch.Tensor, allowed: torch.Tensor) -> tuple[torch.Tensor, dict]:
        """Second-pass hook: return (possibly refined) scores [B, H, L, L] and a dict of model-specific
        tensors kept (detached) in ``self.extra``. The base block does nothing."""
        return scores, {}

    # -- forward -------------------------------------------------------------------------------
    @staticmethod
    def merge_masks(B: int, L: int, mask: torch.Tensor | None, key_padding_mask: torch.Tensor | None,
                    device) -> torch.Tensor:
        allowed = torch.ones(B, L, L, dtype=torch.bool, device=device)
        if mask is not None:
            allowed = allowed & (mask if mask.dim() == 3 else mask[None])
        if key_padding_mask is not None:
            allowed = allowed & ~key_padding_mask[:, None, :]
        return allowed

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                key_padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """x [B, L, D] -> [B, L, D]; see the module docstring for the masks."""
        B, L, _ = x.shape
        H, dh = self.n_heads, self.d_head
        q = self.q_proj(x).view(B, L, H, dh).transpose(1, 2)
        k = self.k_proj(x).view(B, L, H, dh).transpose(1, 2)
        v = self.v_proj(x).view(B, L, H, dh).transpose(1, 2)
        scores = q @ k.transpose(-1, -2) / math.sqrt(dh)
        allowed = self.merge_masks(B, L, mask, key_padding_mask, x.device)
        scores, extra = self.refine(scores, allowed[:, None])
        probs = self.attn_probe(masked_softmax(self.beta * scores, allowed[:, None]))
        v = self.value_probe(v)
        self.structure_mask = mask
        context = self.dropout(probs) @ v
        out = self.out_proj(context.transpose(1, 2).reshape(B, L, H * dh))
        self.extra = {k_: t.detach() for k_, t in extra.items()}
        return out


def attention_blocks(model: nn.Module) -> Iterator[tuple[str, MHA]]:
    """Yield ``(qualified name, block)`` for every :class:`MHA` of ``model``, in module order.

    Examples
    --------
    >>> from torch import nn
    >>> net = nn.Sequential(MHA(8, 2), nn.Linear(8, 8), MHA(8, 4))
    >>> [(name, b.n_heads) for name, b in attention_blocks(net)]
    [('0', 2), ('2', 4)]
    """
    for name, mod in model.named_modules():
        if isinstance(mod, MHA):
            yield name, mod
