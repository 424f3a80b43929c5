"""Compare and track: per-head differences between two diagnoses with paired bootstrap intervals
(:mod:`.comparison`), and diagnoses over training checkpoints (:mod:`.tracking`).

The module is callable: ``attnspec.compare(a, b)`` is :func:`compare` (``attnspec.compare.compare``).

* :func:`compare` / :class:`Comparison`: ``b - a`` for every diagnostic with replicates, its paired 95 %
  interval, ``changed`` and ``changed_in`` (docs/compare.md);
* :func:`track` / :class:`Tracking`: one diagnosis per checkpoint on the same texts, one long table, resumable.
"""
from __future__ import annotations

import sys
import types

from .comparison import DIAGNOSTICS, MARGINS, Comparison, ComparisonError, compare
from .tracking import Tracking, track, find_checkpoints

__all__ = ["compare", "Comparison", "ComparisonError", "DIAGNOSTICS", "MARGINS", "track", "Tracking",
           "find_checkpoints"]


class _CallableModule(types.ModuleType):
    """``attnspec.compare(a, b)`` calls :func:`compare`."""

    def __call__(self, a, b, **kwargs):
        return compare(a, b, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
