"""Compare and track: per-head differences between two diagnoses with paired bootstrap intervals
(:mod:`.comparison`), and diagnoses over training checkpoints (:mod:`.tracking`).

``attnspec.compare(a, b)`` and ``attnspec.track(...)`` are the functions :func:`compare` and :func:`track` of this
package (a plain package: ``attnspec.compare`` is the function, not a module).

* :func:`compare` / :class:`Comparison`: ``b - a`` for every diagnostic with replicates, its paired 95 %
  interval, ``changed`` and ``changed_in`` (docs/compare.md);
* :func:`track` / :class:`Tracking`: one diagnosis per checkpoint on the same texts, one long table, resumable;
* :func:`load_diagnosis`: a diagnosis folder read back with every file checked (:mod:`.folders`).
"""
from __future__ import annotations

from .comparison import DIAGNOSTICS, MARGINS, Comparison, ComparisonError, compare
from .folders import DiagnosisFileError, load_diagnosis
from .tracking import Tracking, find_checkpoints, track

__all__ = ["compare", "Comparison", "ComparisonError", "DIAGNOSTICS", "MARGINS", "track", "Tracking",
           "find_checkpoints", "load_diagnosis", "DiagnosisFileError"]
