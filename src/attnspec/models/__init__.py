"""Real models: safe loading, adapters exposing attention heads, hooks and exact head removal.

* :func:`load_model` — ``'minilm'``, ``'gemma3-270m'`` or a local safetensors/GGUF path (with the
  model's own tokenizer; code shipped in a model directory is never run);
* :func:`adapt` — detect the family and return a :class:`ModelAdapter` with one
  :class:`AttentionSite` per attention layer (per-block protocol for custom modules:
  :class:`AttentionBlock`, documented in :mod:`attnspec.models.protocol`);
* :func:`custom_adapter`, :func:`custom_inputs` — a whole custom model implementing the model-level
  protocol :class:`attnspec.CustomAttention` (:mod:`attnspec.models.custom`: structure masks, functional
  output) and the batch it is diagnosed on;
* :func:`capture`, :func:`ablate`, :func:`gate` — hook context managers (never modify the model);
  ``capture`` also records each layer's allowed set from the mask the layer receives (``Capture.allowed``);
* :func:`exact_removal`, :func:`michel_importance` — head-removal effects;
* :func:`config_of` — the :class:`attnspec.MHSAConfig` describing a site's geometry.
"""
from .adapters import AdapterError, ModelAdapter, adapt
from .loading import BUILTIN_MODELS, ModelLoadError, cache_dir, load_model
from .protocol import AttentionBlock, AttentionSite
from .hooks import Capture, HeadEdit, ablate, capture, gate
from .ablation import FunctionalMetric, exact_removal, michel_importance, run_blocks
from .inputs import generated_images, image_inputs, make_batches
from .geometry import config_of
from .custom import custom_adapter, custom_inputs

__all__ = ["AdapterError", "ModelAdapter", "adapt", "BUILTIN_MODELS", "ModelLoadError", "cache_dir", "load_model",
           "AttentionSite", "AttentionBlock", "Capture", "HeadEdit", "ablate", "capture", "gate",
           "FunctionalMetric", "exact_removal", "michel_importance", "run_blocks",
           "make_batches", "image_inputs", "generated_images", "config_of",
           "custom_adapter", "custom_inputs"]
