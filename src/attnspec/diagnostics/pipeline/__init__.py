"""The diagnosis pipeline: the steps in order (collect, fit, spectra, removal), each with mergeable per-text
accumulators, and the executors that run them (in this process or on a Dask cluster)."""
