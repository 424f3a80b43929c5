"""Real models: safe loading, adapters exposing attention heads, hooks and exact head removal.

* :func:`load_model` — ``'minilm'``, ``'gemma3-270m'`` or a local safetensors/GGUF path (with the
  model's own tokenizer; code shipped in a model directory is never run);
* :func:`adapt` — detect the family and return a :class:`ModelAdapter` with one
  :class:`AttentionSite` per attention layer (protocol for custom modules:
  :class:`CustomAttention`, documented in :mod:`attnspec.models.protocol`);
* :func:`capture`, :func:`ablate`, :func:`gate` — hook context managers (never modify the model);
  ``capture`` also records each layer's allowed set from the mask the layer receives (``Capture.allowed``);
* :func:`exact_removal`, :func:`michel_importance` — head-removal effects;
* :func:`config_of` — the :class:`attnspec.MHSAConfig` describing a site's geometry.
"""
from .adapters import AdapterError, ModelAdapter, adapt
from .loading import BUILTIN_MODELS, ModelLoadError, cache_dir, load_model
from .protocol import AttentionSite, CustomAttention
from .hooks import Capture, HeadEdit, ablate, capture, gate
from .ablation import FunctionalMetric, exact_removal, michel_importance, run_blocks
from .inputs import generated_images, image_inputs, make_batches
from .geometry import config_of

__all__ = ["AdapterError", "ModelAdapter", "adapt", "BUILTIN_MODELS", "ModelLoadError", "cache_dir", "load_model",
           "AttentionSite", "CustomAttention", "Capture", "HeadEdit", "ablate", "capture", "gate",
           "FunctionalMetric", "exact_removal", "michel_importance", "run_blocks",
           "make_batches", "image_inputs", "generated_images", "config_of"]
