"""Custom attention models diagnosed through the public API: :class:`CustomAttention` and its adapter.

A model that is not a transformers family (EEG, SPD or any research model) is diagnosed by
:func:`attnspec.diagnose` when it implements :class:`CustomAttention`:

``attention_blocks()``
    yields ``(name, block)`` for every attention block, in forward order. Each block follows the
    per-block protocol :class:`~attnspec.models.protocol.AttentionBlock` (``attnspec_protocol = 1``, ``n_heads``,
    ``head_dim``, ``attn_probe`` called on the post-softmax weights ``A`` ``(B, H, L, L)``,
    ``value_probe`` called on the values ``(B, H_kv, L, head_dim)``, ``out_proj`` applied to the
    head-major concatenation of the contexts ``A_h V_h``). A block may also expose

    * ``structure_mask``: the boolean structure mask of its last forward call, ``(L, L)`` or
      ``(B, L, L)``, True where query ``i`` may attend key ``j`` (``None``: no structure). The
      diagnosis intersects it with the padding mask, so every statistic (identification, entropy
      baselines, null heads) ignores the pairs the block never allows;
    * ``path``: a label of the attention path the block implements (e.g. ``temporal``); it becomes the
      ``path`` column of the tables.

``functional_output(*args)``
    what head removal is measured on: ``(B, F)`` (one vector per input, e.g. pooled pre-classifier
    features) or ``(B, L, F)``. The removal effect of a head is ``1 - cos`` between this output with
    and without the head, averaged over inputs (for ``(B, L, F)`` outputs, of the mean over real tokens).

Head removal is the library's own: a forward pre-hook on the block's ``out_proj`` zeroes (or
mean-replaces) the head's slice of the concatenated contexts (:func:`attnspec.models.ablate`).

:func:`custom_adapter` wraps such a model in a :class:`~attnspec.models.adapters.ModelAdapter` (kind
``'generic'``) whose sites are the library's :class:`~attnspec.models.protocol.AttentionSite` of each block
with its structure mask and path label (``AttentionSite.structure``, ``AttentionSite.path``), and whose forward
is the functional output. :func:`custom_inputs` turns inputs
``X`` ``(B, ...)`` into the batch the diagnosis runs on (a complete example: :func:`custom_adapter`).
``attnspec.diagnose(net, X)`` does both and adds ``block`` and ``path`` columns to the tables.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterable, Protocol, runtime_checkable

import numpy as np
import torch
from torch import nn

from .adapters import AdapterError, ModelAdapter, adapt
from .hooks import capture

__all__ = ["CustomAttention", "custom_adapter", "custom_inputs", "is_custom", "site_labels"]


@runtime_checkable
class CustomAttention(Protocol):
    """A model whose attention blocks attnspec diagnoses (see the module docstring).

    Methods
    -------
    attention_blocks() -> iterable of (str, nn.Module)
        Every attention block in forward order, each following :mod:`attnspec.models.protocol`,
        optionally with ``structure_mask`` (bool ``(L, L)`` or ``(B, L, L)``, True = allowed) and ``path``.
    functional_output(*args) -> torch.Tensor
        ``(B, F)`` or ``(B, L, F)``: the output head removal is measured on.

    Examples
    --------
    >>> import torch
    >>> from torch import nn
    >>> from attnspec.models.custom import CustomAttention
    >>> class Net(nn.Module):
    ...     def attention_blocks(self):
    ...         return []
    ...     def functional_output(self, x):
    ...         return x.mean(1)
    >>> isinstance(Net(), CustomAttention), isinstance(nn.Linear(2, 2), CustomAttention)
    (True, False)
    """

    def attention_blocks(self) -> Iterable[tuple[str, nn.Module]]: ...

    def functional_output(self, *args: Any) -> torch.Tensor: ...


def is_custom(model: Any) -> bool:
    """True for a model implementing :class:`CustomAttention` (an adapter or a transformers model is not).

    Examples
    --------
    >>> from torch import nn
    >>> is_custom(nn.MultiheadAttention(4, 2))
    False
    """
    return isinstance(model, nn.Module) and isinstance(model, CustomAttention)


class _FunctionalOutput(nn.Module):
    """The forward the diagnosis runs: ``model.functional_output(*args)``, a ``(B, F)`` output repeated over the
    ``n_tokens`` tokens (``(B, L, F)``; its mean over real tokens is the vector itself)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, *args: Any, n_tokens: int | None = None, **kwargs: Any) -> torch.Tensor:
        out = self.model.functional_output(*args, **kwargs)
        if not isinstance(out, torch.Tensor) or out.dim() not in (2, 3):
            raise AdapterError(f"{type(self.model).__name__}.functional_output must return a (B, F) or (B, L, F) "
                               f"tensor, got {getattr(out, 'shape', type(out).__name__)}")
        if out.dim() == 2:
            if n_tokens is None:
                raise AdapterError("a (B, F) functional output needs the token count: build the inputs with "
                                   "attnspec.models.custom.custom_inputs")
            out = out[:, None, :].expand(-1, int(n_tokens), -1)
        return out


def custom_adapter(model: nn.Module) -> ModelAdapter:
    """:class:`ModelAdapter` of a :class:`CustomAttention` model: one :class:`AttentionSite` per block of
    ``model.attention_blocks()`` (in that order), the per-block protocol's site (:func:`attnspec.models.adapt`)
    with ``structure`` reading the block's ``structure_mask`` and ``path`` its ``path`` label; its forward is
    the model's functional output.

    Raises
    ------
    AdapterError
        The model does not implement :class:`CustomAttention`, has no block, or a block does not follow
        :mod:`attnspec.models.protocol`.

    Examples
    --------
    A causal block written against the per-block protocol, in a model implementing the protocol
    (also the examples of :func:`custom_inputs` and :func:`site_labels`):

    >>> import torch
    >>> from torch import nn
    >>> class Block(nn.Module):
    ...     attnspec_protocol, path = 1, "time"
    ...     def __init__(self, d=8, H=2, L=5):
    ...         super().__init__()
    ...         self.n_heads, self.head_dim = H, d // H
    ...         self.qkv, self.out_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
    ...         self.attn_probe, self.value_probe = nn.Identity(), nn.Identity()
    ...         self.structure_mask = torch.ones(L, L, dtype=torch.bool).tril()
    ...     def forward(self, x):
    ...         B, L, _ = x.shape
    ...         q, k, v = self.qkv(x).view(B, L, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
    ...         s = (q @ k.transpose(-1, -2)).masked_fill(~self.structure_mask, float("-inf"))
    ...         A = self.attn_probe(s.softmax(-1))
    ...         return self.out_proj((A @ self.value_probe(v)).transpose(1, 2).reshape(B, L, -1))
    >>> class Net(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.block = Block()
    ...     def attention_blocks(self):
    ...         return [("block", self.block)]
    ...     def functional_output(self, x):
    ...         return self.block(x).mean(1)
    >>> adapter = custom_adapter(Net())
    >>> batch = custom_inputs(adapter, torch.randn(3, 5, 8))
    >>> tuple(batch["attention_mask"].shape), batch["kwargs"]
    ((3, 5), {'n_tokens': 5})
    >>> with torch.no_grad():
    ...     tuple(adapter.run(batch).shape)          # (B, F) features repeated over the 5 tokens
    (3, 5, 8)
    >>> int(adapter.sites[0].allowed(batch["attention_mask"])[0].sum())   # the 15 pairs of the lower triangle
    15
    >>> site_labels(adapter)
    [{'layer': 0, 'block': 'block', 'path': 'time'}]
    """
    if not is_custom(model):
        raise AdapterError(f"{type(model).__name__} does not implement attnspec.CustomAttention "
                           "(attention_blocks() and functional_output(*args))")
    blocks = list(model.attention_blocks())
    if not blocks:
        raise AdapterError(f"{type(model).__name__}.attention_blocks() yields no block")
    found = {id(s.module): s for s in adapt(model).sites}
    sites = []
    for name, block in blocks:
        base = found.get(id(block))
        if base is None:
            raise AdapterError(f"{name}: block does not follow attnspec.models.protocol (attnspec_protocol = 1, "
                               "n_heads, head_dim, attn_probe, value_probe, out_proj)")
        sites.append(replace(base, index=len(sites), name=name,
                             structure=lambda b=block: getattr(b, "structure_mask", None),
                             path=str(getattr(block, "path", "") or "")))
    return ModelAdapter(_FunctionalOutput(model), sites, "generic", None, family=f"custom/{type(model).__name__}")


def custom_inputs(adapter: ModelAdapter, X: Any, attention_mask: torch.Tensor | None = None) -> dict:
    """The batch :func:`attnspec.diagnose` runs a custom model on: ``X`` (array or tensor ``(B, ...)``, cast to
    the model's floating dtype), the token count ``L`` read from one forward of the first input (in eval
    mode, without gradient: the model is not changed), and ``attention_mask`` ``(B, L)`` (default all ones:
    every token real).

    Raises
    ------
    ValueError
        ``X`` is empty, no block runs in ``functional_output``, the blocks see different token counts, or
        ``attention_mask`` is not ``(B, L)``.

    Examples
    --------
    See :func:`custom_adapter`.
    """
    p = next(adapter.model.parameters(), None)
    dtype = p.dtype if p is not None and p.is_floating_point() else torch.float32
    x = torch.as_tensor(np.asarray(X) if not isinstance(X, torch.Tensor) else X, dtype=dtype)
    if x.dim() == 0 or x.shape[0] == 0:
        raise ValueError(f"inputs must have at least one item on axis 0, got shape {tuple(x.shape)}")
    model = adapter.model.model
    was_training = model.training
    model.eval()           # a token count must not move batch-norm statistics or draw dropout
    try:
        with torch.no_grad(), capture(adapter.sites) as cap:
            model.functional_output(x[:1].to(adapter.device))
    finally:
        model.train(was_training)
    lengths = {int(w.shape[-1]) for w in cap.weights if w is not None}
    if not lengths:
        raise ValueError("no attention block ran during functional_output(X[:1]): it must run the blocks of "
                         "attention_blocks() (their attn_probe)")
    if len(lengths) != 1:
        raise ValueError(f"the attention blocks see different token counts {sorted(lengths)}; diagnose blocks with "
                         "one token count at a time")
    L = lengths.pop()
    mask = torch.ones(x.shape[0], L, dtype=torch.long) if attention_mask is None else torch.as_tensor(attention_mask)
    if tuple(mask.shape) != (x.shape[0], L):
        raise ValueError(f"attention_mask must have shape (B, L) = ({x.shape[0]}, {L}), got {tuple(mask.shape)}")
    return {"args": (x,), "kwargs": {"n_tokens": L}, "attention_mask": mask.long()}


def site_labels(adapter: ModelAdapter) -> list[dict]:
    """``[{"layer": i, "block": name, "path": label}, ...]`` for the sites of a :func:`custom_adapter`.

    Examples
    --------
    See :func:`custom_adapter`.
    """
    return [{"layer": s.index, "block": s.name, "path": s.path} for s in adapter.sites]
