"""Published figures recomputed from scratch with the simulator and the limiting laws (``attnspec reproduce``).

* :mod:`.hayase2025` — Hayase, Collins and Karakida (2025, arXiv 2510.06685): the bulk of the squared singular
  values of ``sqrt(d) A`` (single-head softmax attention) against the Gaussian-equivalent law and against
  Marchenko–Pastur.

``STUDIES`` maps each study's name to the function that runs it (keyword arguments: the study's parameters).
"""
from .hayase2025 import Hayase2025, hayase2025

STUDIES = {"hayase2025": hayase2025}

__all__ = ["STUDIES", "Hayase2025", "hayase2025"]
