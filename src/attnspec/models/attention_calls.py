"""Kernel-independent attention capture: the inputs of every attention call, not its weights.

transformers modules compute queries, keys (after the position encoding, e.g. RoPE) and values, then
hand them to an *attention function* chosen by ``config._attn_implementation`` (eager, SDPA,
FlashAttention, flex): ``fn(module, query, key, value, attention_mask, scaling=..., softcap=...,
sliding_window=..., ...)``. :func:`record_attention_calls` wraps that dispatch for the duration of a
``with`` block: the real function still runs, unchanged (the model's outputs are bit-identical), and
each call's inputs are kept as an :class:`AttentionCall`. attnspec then recomputes the attention rows
it needs, in query tiles and in float32 or float64, whatever kernel the model used:

    logits_ij = scaling * q_i . k_j  [softcap: c * tanh(logits / c)]  [+ position bias]
    A_ij      = softmax_j(logits_ij) over the allowed keys j of query i

The allowed set comes from the mask the model itself passed (boolean: True = attend; additive float:
finite entries; ``None``: the causal rule when the module is causal, else everything), intersected
with the real tokens of the batch, and with the sliding window when the kernel receives the window as
an argument rather than inside the mask (FlashAttention).

Shapes: ``query`` ``(B, H, L, d)``, ``key`` ``(B, H_kv, L, d)``, ``value`` ``(B, H_kv, L, d_v)``,
``allowed`` ``(B, L, L)`` (a :class:`.rule_mask.RuleMask` when the model passed no mask tensor: built per
tile), weights ``(B, H, rows, L)``.
"""
from __future__ import annotations

import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from .emitters import registered
from .rule_mask import RuleMask

__all__ = ["AttentionCall", "record_attention_calls", "grouped_matmul", "allowed_from_mask", "allowed_rule", "Application"]

_APPLICATIONS: "weakref.WeakKeyDictionary[torch.nn.Module, list]" = weakref.WeakKeyDictionary()


class Application(torch.nn.Module):
    """Stand-in for the ``index``-th call of an attention module shared by several layers (ALBERT): recorded
    calls of the shared module are attributed to its applications in call order. Never called itself.

    Examples
    --------
    >>> shared = torch.nn.Linear(4, 4)
    >>> app = Application(shared, 1)
    >>> app.shared is shared, app.index, list(app.parameters())         # the weights stay the shared module's
    (True, 1, [])
    """

    def __init__(self, shared: torch.nn.Module, index: int):
        super().__init__()
        object.__setattr__(self, "shared", shared)    # not a submodule: parameters stay the model's
        self.index = index


def _register_applications(shared: torch.nn.Module, applications: list) -> None:
    """Attribute the calls of ``shared`` to ``applications`` (in order, cyclically) while recording."""
    _APPLICATIONS[shared] = list(applications)


@dataclass
class AttentionCall:
    """The inputs of one attention call (detached; on the model's device and dtype).

    Attributes
    ----------
    module : nn.Module
        The attention module that made the call.
    query, key, value : Tensor
        ``(B, H, L, d)``, ``(B, H_kv, L, d)``, ``(B, H_kv, L, d_v)``; queries and keys after the
        position encoding.
    allowed : bool Tensor or RuleMask
        ``(B, L, L)``: query ``i`` may attend key ``j`` (a :class:`.rule_mask.RuleMask` builds it per tile).
    scaling : float
        Factor of ``q . k`` in the logits.
    softcap : float or None
        Logit soft-capping ``c tanh(x / c)`` (Gemma 2), ``None`` when absent.
    position_bias : Tensor or None
        Additive bias broadcastable to ``(B, H, L, L)`` (T5-style relative positions), else ``None``.

    Examples
    --------
    >>> q = torch.tensor([[[[1.0, 0.0], [0.0, 1.0]]]])                  # B = H = 1, L = 2, d = 2
    >>> call = AttentionCall(torch.nn.Identity(), q, q, q, allowed=torch.ones(1, 2, 2, dtype=torch.bool), scaling=1.0)
    >>> call.logits()
    tensor([[[[1., 0.],
              [0., 1.]]]])
    >>> call.weights().sum(-1), call.n_heads, call.n_kv_heads
    (tensor([[[1., 1.]]]), 1, 1)
    """

    module: torch.nn.Module
    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    allowed: "torch.Tensor | RuleMask"
    scaling: float
    softcap: float | None = None
    position_bias: torch.Tensor | None = None

    @property
    def n_heads(self) -> int:
        return self.query.shape[1]

    @property
    def n_kv_heads(self) -> int:
        return self.key.shape[1]

    def logits(self, rows: slice = slice(None), dtype: torch.dtype = torch.float32,
               device: "torch.device | str" = "cpu", keys: slice = slice(None)) -> torch.Tensor:
        """Raw logits ``(B, H, r, k)`` of the query rows ``rows`` on the keys ``keys`` (before masking), computed
        on the tensors' device in ``dtype`` and returned on ``device``. Query head ``h`` reads key head
        ``h // (H / H_kv)``: the ``H / H_kv`` query heads of a key head are stacked as the rows of one
        product with its keys, so the keys are never copied per query head."""
        q = self.query[:, :, rows].to(dtype=dtype)
        k = self.key[:, :, keys].to(dtype=dtype)
        s = grouped_matmul(q, k.transpose(-1, -2)).mul_(self.scaling)                     # in place: same numbers
        if self.softcap:
            s = s.div_(self.softcap).tanh_().mul_(self.softcap)
        if self.position_bias is not None:
            s = s.add_(self.position_bias[..., rows, keys].to(dtype=dtype))
        return s.to(device)

    def weights(self, rows: slice = slice(None), dtype: torch.dtype = torch.float32,
                device: "torch.device | str" = "cpu", keys: slice = slice(None)) -> torch.Tensor:
        """Attention weights ``(B, H, r, k)`` of the query rows ``rows`` on ``device``, on the keys ``keys`` (a
        slice holding every allowed key of those rows: the softmax runs over them); rows with no allowed key
        are 0."""
        s = self.logits(rows, dtype, device, keys)
        ok = self.allowed[:, None, rows][..., keys].to(s.device)
        A = torch.softmax(s.masked_fill_(~ok, float("-inf")), dim=-1)
        return A.nan_to_num_(nan=0.0)

    def values(self, dtype: torch.dtype = torch.float32, device: "torch.device | str" = "cpu") -> torch.Tensor:
        """Values ``(B, H_kv, L, d_v)`` on ``device``."""
        return self.value.to(device=device, dtype=dtype)


def grouped_matmul(X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """``X_h @ Y_{h // g}`` for every query head ``h``: ``X`` ``(B, H, r, d)``, ``Y`` ``(B, H_kv, d, k)`` with the
    ``g = H / H_kv`` query heads of a key/value head consecutive (grouped-query attention; ``H_kv = H``: one
    per head). The ``g`` heads' rows go side by side into one product per key/value head, ``(g r, d) @ (d, k)``,
    so ``Y`` is never copied per query head: ``(B, H, r, k)``.

    Examples
    --------
    >>> g = torch.Generator().manual_seed(0)
    >>> X, Y = torch.randn(2, 4, 3, 5, generator=g), torch.randn(2, 2, 5, 6, generator=g)
    >>> torch.equal(grouped_matmul(X, Y), X @ Y.repeat_interleave(2, dim=1))
    True
    """
    B, H, r, d = X.shape
    H_kv = Y.shape[1]
    return (X.reshape(B, H_kv, (H // H_kv) * r, d) @ Y).view(B, H, r, Y.shape[-1])


def allowed_from_mask(mask: torch.Tensor | None, B: int, Lq: int, Lk: int, causal: bool,
                      window: int | None = None, valid: torch.Tensor | None = None) -> torch.Tensor:
    """Boolean ``(B, Lq, Lk)`` allowed set from the mask an attention function received.

    ``mask``: ``None``, a boolean or integer ``(B or 1, 1 or H, Lq, Lk)`` (True / non-zero = attend), an additive float mask
    of that shape (finite, not ``-inf``/dtype-minimum entries are allowed) or a 2-D ``(B, Lk)`` padding
    mask (1 = real token; FlashAttention). ``None`` and 2-D masks get the causal rule (when ``causal``)
    and ``window`` (keys with ``i - j < window``; ``|i - j| < window`` for bidirectional attention);
    ``valid`` ``(B, L)`` removes padded queries and keys.

    Examples
    --------
    >>> allowed_from_mask(None, 1, 3, 3, causal=True).int()
    tensor([[[1, 0, 0],
             [1, 1, 0],
             [1, 1, 1]]], dtype=torch.int32)
    >>> allowed_from_mask(torch.tensor([[1, 1, 0]]), 1, 3, 3, causal=False).int()     # 2-D padding mask
    tensor([[[1, 1, 0],
             [1, 1, 0],
             [1, 1, 0]]], dtype=torch.int32)
    """
    i = torch.arange(Lq)[:, None] + (Lk - Lq)
    j = torch.arange(Lk)[None, :]
    if mask is None or mask.dim() == 2:
        ok = torch.ones(B, Lq, Lk, dtype=torch.bool)
        if causal:
            ok &= (j <= i)[None]
        if window is not None:
            ok &= (((i - j) if causal else (i - j).abs()) < window)[None]
        if mask is not None:
            ok &= mask.to("cpu").bool()[:, None, :]
    else:
        m = mask[:, 0].to("cpu")
        if m.dtype == torch.bool or not m.is_floating_point():   # integer 0/1 masks (DeBERTa): 1 = attend
            ok = m.bool()
        else:
            ok = m > torch.finfo(m.dtype).min / 2
        ok = ok.expand(B, Lq, Lk).clone()
    if valid is not None:
        v = valid.to("cpu").bool()
        ok &= v[:, -Lq:, None] & v[:, None, :]
    return ok


def allowed_rule(mask: torch.Tensor | None, B: int, Lq: int, Lk: int, causal: bool, window: int | None = None,
                 valid: torch.Tensor | None = None) -> "torch.Tensor | RuleMask":
    """:func:`allowed_from_mask` without the ``B Lq Lk`` tensor where the set is a rule: for ``None`` and 2-D
    padding masks a :class:`.rule_mask.RuleMask` (rows built per tile), for the model's own 3-D/4-D masks the
    dense set.

    Examples
    --------
    >>> m = allowed_rule(torch.tensor([[1, 1, 0]]), 1, 3, 3, causal=True, valid=torch.tensor([[1, 1, 0]]))
    >>> type(m).__name__, torch.equal(m.dense(), allowed_from_mask(torch.tensor([[1, 1, 0]]), 1, 3, 3, True,
    ...                                                            valid=torch.tensor([[1, 1, 0]])))
    ('RuleMask', True)
    """
    if mask is not None and mask.dim() != 2:
        return allowed_from_mask(mask, B, Lq, Lk, causal, window, valid)
    keys = torch.ones(B, Lk, dtype=torch.bool) if mask is None else mask.to("cpu").bool().expand(B, Lk).clone()
    queries = torch.ones(B, Lq, dtype=torch.bool)
    if valid is not None:
        v = valid.to("cpu").bool()
        keys &= v
        queries &= v[:, -Lq:]
    return RuleMask(keys, queries, causal, window)


def _to_call(module, query, key, value, attention_mask, kwargs, valid) -> AttentionCall:
    B, _, Lq, _ = query.shape
    Lk = key.shape[2]
    causal = bool(kwargs.get("is_causal") if kwargs.get("is_causal") is not None else getattr(module, "is_causal", True))
    window = kwargs.get("sliding_window")
    scaling = kwargs.get("scaling")
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    d = lambda t: t.detach()  # noqa: E731
    return AttentionCall(module=module, query=d(query), key=d(key), value=d(value),
                         allowed=allowed_rule(attention_mask, B, Lq, Lk, causal and Lq > 1, window, valid),
                         scaling=float(scaling), softcap=kwargs.get("softcap") or None,
                         position_bias=None if kwargs.get("position_bias") is None else d(kwargs["position_bias"]))


@contextmanager
def record_attention_calls(on_call: Callable[[AttentionCall], None], valid: torch.Tensor | None = None
                           ) -> Iterator[None]:
    """Within the block, pass every transformers attention call to ``on_call`` and then run it as usual.

    ``valid`` ``(B, L)`` (the batch's attention mask) is intersected with the allowed sets. Modules with
    an emitter (:mod:`attnspec.models.emitters`: MPNet, Falcon) are recorded by a forward pre-hook that
    rebuilds the same inputs from the module's projections. The
    dispatch ``ALL_ATTENTION_FUNCTIONS.get_interface`` is wrapped for the block only and restored on
    exit, also on error; modules and their parameters are not touched.

    Examples
    --------
    >>> import torch, transformers
    >>> tiny = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, vocab_size=100)
    >>> model = transformers.BertModel(transformers.BertConfig(**tiny)).eval()
    >>> calls = []
    >>> with torch.no_grad(), record_attention_calls(calls.append):
    ...     _ = model(input_ids=torch.tensor([[1, 5, 6, 2]]), attention_mask=torch.tensor([[1, 1, 1, 0]]))
    >>> len(calls), calls[0].query.shape, calls[0].scaling
    (1, torch.Size([1, 2, 4, 16]), 0.25)
    >>> calls[0].allowed[0, 0].tolist()                       # the padded key is not allowed
    [True, True, True, False]
    """
    from transformers.modeling_utils import AttentionInterface

    original = AttentionInterface.get_interface
    counts: dict = {}

    def alias(module):
        apps = _APPLICATIONS.get(module)
        if not apps:
            return module
        k = counts.get(id(module), 0)
        counts[id(module)] = k + 1
        return apps[k % len(apps)]

    def get_interface(self, attn_implementation, default):
        fn = original(self, attn_implementation, default)

        def recorded(module, query, key, value, attention_mask, *args, **kwargs):
            on_call(_to_call(alias(module), query, key, value, attention_mask, kwargs, valid))
            return fn(module, query, key, value, attention_mask, *args, **kwargs)
        return recorded

    handles = []
    for module, emit in registered():   # modules that compute attention themselves (emitters.py)
        if hasattr(emit, "attach"):     # read from the module's own hook points as it runs
            handles += emit.attach(module, lambda q, k, v, mask, kw, mod=module:
                                   on_call(_to_call(alias(mod), q, k, v, mask, kw, valid)))
            continue

        def pre_hook(mod, args, kwargs, emit=emit):
            with torch.no_grad():
                q, k, v, mask, kw = emit(mod, args, kwargs)
            on_call(_to_call(alias(mod), q, k, v, mask, kw, valid))
        handles.append(module.register_forward_pre_hook(pre_hook, with_kwargs=True))
    AttentionInterface.get_interface = get_interface
    try:
        yield
    finally:
        AttentionInterface.get_interface = original
        for h in handles:
            h.remove()
