"""First-order (gradient) head importance: Michel et al. (2019) and the first-order removal effect.

With per-text gates ``xi_{b,h} = 1`` on each head's output, one forward and one backward pass give
``g_{b,h} = dF_b / dxi_{b,h}`` for every head and text: the loss change of removing the head is
``-g_{b,h}`` to first order (causal LMs, ``F_b`` the text's summed NLL); encoders, whose ``1 - cos`` is
flat at ``xi = 1``, use ``(1/2) (r_b . de_b/dxi / ||e_b||)^2`` with a seeded random probe ``r_b``
(unbiased for the second-order ``(1/2) theta^2``). The LM head's gradient is taken in closed form
(:meth:`.metric.FunctionalMetric.gradient_loss`). Exact removal computes the same from its own reference pass
(:func:`.ablation.reference_pass` with ``with_first_order``), one backward pass on top of a forward pass it runs
anyway.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch

from .adapters import ModelAdapter
from .hooks import gate
from .metric import FunctionalMetric, _block_out

__all__ = ["michel_importance", "first_order", "head_gates", "gate_effects"]


def michel_importance(adapter: ModelAdapter, batch: dict, seed: int = 0) -> np.ndarray:
    """Per-text gate gradients ``|dL_b / d xi_{b,h}|``, summed over texts: ``(n_sites, H)``.

    Michel et al. (2019): gate each head's output by ``xi_h = 1`` and take ``E_x |dL/dxi_h|``, from one
    forward and one backward pass (gates are per text, so one backward gives every per-text gradient).
    ``L_b`` is the text's mean next-token NLL for causal LMs. Encoders have no loss: ``L_b = r_b^T
    e_b / ||e_b||`` with ``e_b`` the mean-pooled embedding and ``r_b`` a standard Gaussian vector
    (seeded by ``seed`` and the text's position ``batch['order'][b]``) projected orthogonally to the
    unmodified ``e_b``; then ``E_r |dL/dxi| = sqrt(2/pi)
    ||J_perp|| / ||e||``, the first-order size of the embedding's rotation when the head is scaled.

    Examples
    --------
    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> ad, batch = tiny_causal_lm()
    >>> imp = michel_importance(ad, batch)
    >>> imp.shape, bool((imp >= 0).all())
    ((2, 2), True)
    """
    return first_order(adapter, batch, seed)[0]


def first_order(adapter: ModelAdapter, batch: dict, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Michel importance summed over texts ``(n_sites, H)``, first-order removal effects per text
    ``(n_sites, H, B)`` and their normalizers ``(B,)``, from one forward and one backward pass.

    With ``g_{b,h} = dF_b / dxi_{b,h}`` (``F_b`` the text's summed NLL for causal LMs, the probe
    ``r_b^T e_b / ||e_b||`` of :func:`michel_importance` for encoders): Michel ``sum_b |g_{b,h}| / n_b``
    (``sqrt(pi/2) sum_b |g_{b,h}|`` for encoders), first-order removal effect ``-g_{b,h}`` over ``n_b``
    predicted positions (``g_{b,h}^2 / 2`` per text for encoders; see the module docstring).

    Examples
    --------
    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> ad, batch = tiny_causal_lm()
    >>> imp, effect, n = first_order(ad, batch)
    >>> effect.shape, n.tolist()                                   # per text; 5 predicted positions each
    ((2, 2, 2), [5.0, 5.0])
    >>> bool(np.allclose(imp, np.abs(effect / n).sum(-1)))          # Michel = sum_b |dF_b/dxi| / n_b
    True
    """
    gates = head_gates(adapter, batch["attention_mask"].shape[0])
    metric = FunctionalMetric(adapter, batch, adapter.tail)
    with torch.enable_grad(), gate(adapter.sites, gates):
        if adapter.kind == "causal-lm" and adapter.tail is None:
            loss_b = metric._nll_from_logits(adapter.run(batch))[0]
        elif adapter.kind == "causal-lm":
            loss_b = metric.gradient_loss(_hidden_before_tail(adapter, batch))
        else:
            loss_b = metric.gradient_loss(adapter.run(batch), seed)
        grads = torch.autograd.grad(loss_b.sum(), gates)
    return gate_effects(adapter, grads, metric)


def head_gates(adapter: ModelAdapter, B: int) -> list[torch.Tensor]:
    """Gates ``xi_{b,h} = 1`` ``(B, H_i)`` per site, requiring gradients (:func:`.hooks.gate`).

    Examples
    --------
    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> ad, batch = tiny_causal_lm()
    >>> [(tuple(g.shape), g.requires_grad) for g in head_gates(ad, 2)]        # 2 texts x 2 heads, per layer
    [((2, 2), True), ((2, 2), True)]
    """
    dtype = next(adapter.model.parameters()).dtype
    return [torch.ones(B, s.n_heads, requires_grad=True, device=adapter.device, dtype=dtype) for s in adapter.sites]


def gate_effects(adapter: ModelAdapter, grads: Sequence[torch.Tensor], metric: FunctionalMetric
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`first_order`'s ``(Michel, effects, normalizers)`` from the gate gradients ``g_{b,h} = dF_b / dxi_{b,h}``
    ``(B, H_i)`` per site, of :meth:`.metric.FunctionalMetric.gradient_loss`.

    Examples
    --------
    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> ad, batch = tiny_causal_lm()
    >>> metric = FunctionalMetric(ad, batch, ad.tail)                 # 5 predicted positions per text
    >>> michel, effect, n = gate_effects(ad, [torch.full((2, 2), -5.0)] * 2, metric)
    >>> michel.tolist(), effect[0, :, 0].tolist(), n.tolist()        # Michel sum_b |g| / n_b; effect -g
    ([[2.0, 2.0], [2.0, 2.0]], [5.0, 5.0], [5.0, 5.0])
    """
    sites = adapter.sites
    H = max(s.n_heads for s in sites)
    g = np.full((len(sites), H, grads[0].shape[0]), np.nan)
    for i, gi in enumerate(grads):
        g[i, :gi.shape[1]] = gi.double().cpu().numpy().T
    n = metric.counts()
    if adapter.kind == "causal-lm":
        return np.abs(g / np.maximum(n, 1)).sum(-1), -g, n
    return math.sqrt(math.pi / 2) * np.abs(g).sum(-1), g ** 2 / 2, n


def _hidden_before_tail(adapter: ModelAdapter, batch: dict) -> torch.Tensor:
    """Final hidden states before the tail (the LM head's gradient: :meth:`.metric.FunctionalMetric.gradient_loss`)."""
    last = adapter.sites[-1].block
    store = {}
    h = last.register_forward_hook(lambda m, a, o: store.__setitem__("h", _block_out(o)))
    try:
        adapter.run_base(batch)
    finally:
        h.remove()
    return store["h"]
