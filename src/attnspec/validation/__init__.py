"""Validation of attnspec's diagnostics on models whose attention properties are known.

* :mod:`.planted`: tiny random BERT encoders with planted selective heads, dependent head pairs,
  signal-carrying heads and inverse temperatures (ground truth beside the saved model);
* :mod:`.scoring`: ROC AUC, false-positive rates and temperature errors of diagnosis columns against
  that truth;
* :mod:`.probes`: the standard previous-token and induction probes (Olsson et al. 2022) from a model's
  own eager attention, and the per-query selection statistic computed from the same weights.
"""
from .planted import OFFSETS, ROLES, PlantedModel, PlantSpec, build_planted_model, calibration_texts

__all__ = ["OFFSETS", "ROLES", "PlantedModel", "PlantSpec", "build_planted_model", "calibration_texts"]
