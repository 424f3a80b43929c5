"""Glue between the zoo models and :func:`attnspec.diagnose`.

Every zoo attention block is an :class:`~attnspec.zoo.attention.MHA`, which follows the
custom-module protocol (:mod:`attnspec.models.protocol`). Three things the generic path of
``attnspec.models.adapt`` does not know are added here:

* **structure masks**: the temporal/spatial paths of the anisotropic model let a token see only its
  own electrode / time patch. :class:`ZooSite` (an ``AttentionSite``) intersects the padding mask
  with the block's ``structure_mask``, so every statistic (identification, entropy baselines, null
  heads) ignores disallowed pairs;
* **the functional output**: a zoo model returns class logits [B, n_classes]; the diagnosis
  measures head-removal effects on token-shaped outputs, so :class:`ZooAdapter.run` returns the
  model's pooled pre-classifier features ``model.features(x)`` [B, F] repeated over the L tokens
  (the removal effect is then 1 - cos of the feature vector, the analogue of an encoder's
  embedding shift);
* **names**: :func:`label` adds ``block`` (module path, e.g. ``blocks.0.temporal``) and ``path``
  (``temporal``, ``spatial``, ``time``, ``spd``) columns to the diagnosis tables.

Inputs: ``{"args": (x,), "attention_mask": ones(B, L_tokens)}`` with x [B, C, T] volts
(:func:`diagnosis_inputs`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..models.adapters import ModelAdapter
from ..models.protocol import AttentionSite

__all__ = ["ZooSite", "ZooAdapter", "zoo_adapter", "diagnosis_inputs", "label", "diagnose_model"]


@dataclass
class ZooSite(AttentionSite):
    """An attention site whose ``allowed`` also applies the block's structure mask."""

    path: str = ""

    def allowed(self, attention_mask: torch.Tensor) -> torch.Tensor:
        ok = super().allowed(attention_mask)
        sm = getattr(self.module, "structure_mask", None)
        if sm is not None:
            sm = sm.to(ok.device)
            ok = ok & (sm if sm.dim() == 3 else sm[None])
        return ok


class ZooAdapter(ModelAdapter):
    """A :class:`ModelAdapter` whose functional output is the model's pooled feature vector."""

    def run(self, batch: dict) -> torch.Tensor:
        x = batch["args"][0]
        f = self.model.features(x)                                  # [B, F]
        L = batch["attention_mask"].shape[1]
        return f[:, None, :].expand(-1, L, -1)


def zoo_adapter(model) -> ZooAdapter:
    """One :class:`ZooSite` per attention block of a zoo model, in module order."""
    sites = []
    for name, mod in model.attention_blocks():
        H = int(mod.n_heads)
        sites.append(ZooSite(
            index=len(sites), name=name, module=mod, out_proj=mod.out_proj, n_heads=H, n_kv_heads=H,
            head_dim=int(mod.head_dim), d_out=mod.out_proj.out_features, causal=False, window=None,
            weights_module=mod.attn_probe, weights_pick=lambda out: out, values_module=mod.value_probe,
            values_pick=lambda out: out, kind="custom", path=mod.path))
    return ZooAdapter(model, sites, "generic", None, family=f"attnspec.zoo/{model.arch}")


def diagnosis_inputs(model, X) -> dict:
    """Batch dict for :func:`attnspec.diagnose`: x [B, C, T] and a [B, L_tokens] mask of ones."""
    x = torch.as_tensor(np.asarray(X), dtype=torch.float32)
    with torch.no_grad():
        L = model.tokens(x[:1]).shape[1]
    return {"args": (x,), "kwargs": {}, "attention_mask": torch.ones(x.shape[0], L, dtype=torch.long)}


def label(diag, adapter: ZooAdapter):
    """Add ``block`` and ``path`` columns (by layer index) to ``diag.heads``, ``.layers``, ``.pairs``."""
    names = {s.index: s.name for s in adapter.sites}
    paths = {s.index: s.path for s in adapter.sites}
    for tab in (diag.heads, diag.layers, diag.pairs):
        if len(tab) and "layer" in tab:
            if "block" not in tab:
                tab.insert(1, "block", tab["layer"].map(names))
            if "path" not in tab:
                tab.insert(2, "path", tab["layer"].map(paths))
    diag.summary["blocks"] = [{"layer": s.index, "block": s.name, "path": s.path} for s in adapter.sites]
    return diag


def diagnose_model(model, X, **kwargs):
    """Run :func:`attnspec.diagnose` on a zoo model with epochs X [B, C, T] (volts);
    returns the labelled :class:`~attnspec.Diagnosis`. ``kwargs`` go to ``diagnose``."""
    from ..diagnostics import diagnose

    model.eval()
    adapter = zoo_adapter(model)
    kwargs.setdefault("model_name", f"{type(model).__name__} ({model.arch})")
    diag = diagnose(adapter, diagnosis_inputs(model, X), **kwargs)
    return label(diag, adapter)
