"""Diagnosis of trained models: per layer and per head (docs/theory.md, section *From theory to diagnosis*).

``diagnose(model, tokenizer_or_inputs, texts, options=DiagnoseOptions(...))`` (or the options as keyword
arguments) returns a :class:`Diagnosis` whose ``heads`` table has one row per layer x head (every column:
:mod:`.result.columns`, docs/columns.md): identification of the Gaussian equivalent, selection, dependence,
head-removal sensitivity, each with bootstrap intervals and a verdict.

The package, from the bottom up (each part imports only those below it):

* :mod:`.statistics`: the statistics, pure functions of accumulated sums (selection, dependence, spectral
  distances, identification, removal effects, noise, rotations, the bootstrap);
* :mod:`.options`: :class:`DiagnoseOptions`, every option and its allowed values, declared once;
* :mod:`.pipeline`: the steps (collect, fit, spectra, removal) with their mergeable accumulators, the step
  sequence written once (:mod:`.pipeline.run`) and its executors (this process, a Dask cluster);
* :mod:`.result`: the tables built from the merged accumulators, intervals, verdicts, the summary and the
  :class:`Diagnosis` object;
* :mod:`.entry` (``diagnose``) and :mod:`.distributed` (``diagnose_on_cluster``): the public entry points.
"""
from .entry import diagnose
from .options import DiagnoseOptions, OptionError
from .result.diagnosis import Diagnosis

__all__ = ["diagnose", "DiagnoseOptions", "OptionError", "Diagnosis"]
