"""The steps of a diagnosis, in order: collect, fit, spectra, removal, tables (see :mod:`..api`).

Each step's per-text state is an accumulator with ``update`` and ``merge``: :class:`.fit.LayerFitSums`,
:class:`.fit.NullFitSums`, :class:`.spectra.LayerSpectra`, :class:`.removal.RemovalSums` and
:class:`attnspec.diagnostics.api.CorpusStats`.
"""
