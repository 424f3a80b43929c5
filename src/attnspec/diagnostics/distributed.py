"""``diagnose_on_cluster()``: the diagnosis on a Dask cluster: connecting to it (a client, a scheduler address or
a new LocalCluster), then the one step sequence of :mod:`.pipeline.run` through the Dask executor
(:class:`.pipeline.dask_executor.DaskExecutor`). Only where the steps run changes:

* the **model** is named, not shipped: every worker process loads it once from a :class:`ModelSpec`
  (a built-in name or a local path, plus :func:`attnspec.models.load_model` keyword arguments such as
  ``dtype`` or ``device``) and keeps it for later tasks and later diagnoses of the same model;
* the **texts** are resolved and length-bucketed once, on a worker (the client needs neither the
  model nor its tokenizer), exactly as a single-process diagnosis buckets them, in the run's first task:
  texts longer than the model's positions are refused there, with the message of a diagnosis in one
  process, before any other task (then every worker loads the model); the batches are then
  dealt out to tasks in contiguous groups. Each batch is computed as in one process, so the tables
  equal a single-process run's up to the order of float64 sums (far below 1e-9);
* the **client** merges each step's accumulators and computes the fits the next step needs:
  fit (one task per group) -> merged fits -> null fits (per group, where the group's masks are) ->
  spectra (per group, preferably on the worker that kept the group's forward records on disk) and
  removal and gradient importance (one task per group of the finer removal batches; these queue
  behind the spectra and fill the workers the spectra's tail leaves idle); the tables are built by
  one last task on a worker (the client never loads the model). Within a step the costliest tasks
  (longest texts) run first and the last ones to run are short, so that no worker waits long at
  the step's end (``summary['timings_s']``: spectra and removal overlap);
* a **worker that dies** (killed, out of memory, node lost) costs only the tasks it was running or
  holding: the scheduler reruns them elsewhere (``distributed.scheduler.allowed-failures`` deaths per
  task, 3 by default) and the result equals an uninterrupted run's, since every task is a pure
  function of its batches, the merged fits and the seed.

Exact removal is split over tasks by groups of removal batches, or, with fewer removal batches than
tasks wanted, by (layer, head block) within each batch; ``'screened'`` chooses its heads on the client
from the merged first-order effects of the whole corpus. ``torch_threads`` sets ``torch.set_num_threads``
in every task: Dask's nanny starts workers with one BLAS/OpenMP thread, and the tasks of one worker
process share its model and run one at a time, so use one Dask thread per worker and give it the
process's cores. ``summary['cluster']['task_times']`` sums each step's task wall and CPU seconds (CPU of
the worker process while the task ran: CPU over wall well below 1 means the workers were starved of cores).

Task keys start with ``attnspec-prepare``, ``attnspec-fit``, ``attnspec-null``, ``attnspec-spectra``,
``attnspec-removal`` and ``attnspec-tables`` (the dashboard groups them by step).
"""
from __future__ import annotations

import logging
import os
import time
import warnings
from typing import Any, Sequence

from .checks import checked_texts, note_duplicates
from .options import DiagnoseOptions
from .pipeline.dask_executor import DaskExecutor
from .pipeline.dask_worker import ModelSpec, model_loads_in_this_process
from .pipeline.run import run_steps
from .result.build import build_diagnosis
from .result.diagnosis import Diagnosis

__all__ = ["ModelSpec", "diagnose_on_cluster", "model_loads_in_this_process"]


def _connect(client, n_workers: int | None, cluster_kwargs: dict | None):
    """``(client, owned)``: the given client, a client of the scheduler at the given address, or of a
    new LocalCluster (``n_workers`` processes, one thread each); ``owned`` are what to close."""
    from distributed import Client, LocalCluster
    if client is not None and not isinstance(client, str):
        if n_workers is not None:
            raise ValueError("pass either client (an existing cluster) or n_workers (a new LocalCluster), not both")
        return client, []
    if isinstance(client, str):
        c = Client(client)
        return c, [c]
    kw = dict(n_workers=n_workers or os.cpu_count() or 1, threads_per_worker=1, processes=True,
              dashboard_address=None, silence_logs=logging.ERROR)
    kw.update(cluster_kwargs or {})
    cluster = LocalCluster(**kw)
    c = Client(cluster)
    return c, [c, cluster]


def diagnose_on_cluster(model: str | os.PathLike | ModelSpec, texts: Sequence[str] | str | None = None,
                        client: Any = None, *, n_workers: int | None = None, load_kwargs: dict | None = None,
                        n_shards: int | None = None, torch_threads: int | None = None,
                        cluster_kwargs: dict | None = None, options: DiagnoseOptions | None = None,
                        **kwargs) -> Diagnosis:
    """Diagnose every attention head of a named model on a Dask cluster (see module docstring).

    Parameters
    ----------
    model : str, path or ModelSpec
        A built-in name or a model directory / GGUF file every worker can read (not a model object).
    texts : list of str or 'builtin' or None
        As :func:`attnspec.diagnose` (resolved on a worker with the model's tokenizer): checked here, a text that
        repeats an earlier one dropped with a note (``summary['n_duplicate_texts']``).
    client, n_workers, cluster_kwargs : distributed.Client or str or None, int, dict
        A client (left open), a scheduler address (``'tcp://10.0.0.5:8786'``), or ``None``: a new LocalCluster
        of ``n_workers`` one-thread processes (default: CPU count) with ``cluster_kwargs``, closed at the end.
    load_kwargs : dict, optional
        :func:`attnspec.models.load_model` keywords on the workers, e.g. ``{'dtype': 'bfloat16'}``.
    options, **kwargs : DiagnoseOptions, fields of it
        As :func:`attnspec.diagnose` (``reuse_forward``: on each worker's local disk).
    n_shards, torch_threads : int, optional
        Groups of length buckets per step (default: 4 per worker thread, at most one per bucket);
        ``torch.set_num_threads`` in every task (the cores per worker process; see module docstring).

    Returns
    -------
    Diagnosis
        The tables of :func:`attnspec.diagnose` on the same texts (equal to 1e-9); ``summary['cluster']``:
        scheduler, worker threads, tasks per step and their wall and CPU seconds (module docstring).

    Raises
    ------
    TypeError, ValueError
        A model object or an unknown option; an option outside its allowed values; texts that are not strings or
        blank (before any cluster is touched); texts longer than the model's positions (by the first task, before
        any other).

    Examples
    --------
    >>> import logging, tempfile, transformers; from distributed import Client
    >>> from attnspec.models.packaged import minilm_dir
    >>> tmp = tempfile.TemporaryDirectory()
    >>> tok = transformers.AutoTokenizer.from_pretrained(minilm_dir())
    >>> cfg = transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
    ...                               intermediate_size=64, vocab_size=tok.vocab_size)
    >>> transformers.BertModel(cfg).save_pretrained(tmp.name); _ = tok.save_pretrained(tmp.name)
    >>> texts = ["A short text about cats.", "Another one, on dogs and birds."]
    >>> with Client(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None,
    ...             silence_logs=logging.ERROR) as client:    # the worker loads the model from the directory
    ...     d = diagnose_on_cluster(tmp.name, texts, client, max_length=16, n_boot=20, min_tokens=0)
    >>> d.heads[["layer", "head", "n_tokens"]].values.tolist(), d.summary["cluster"]["tasks"]["fit"]
    ([[0, 0, 18], [0, 1, 18]], 1)
    >>> tmp.cleanup()
    """
    spec = ModelSpec.of(model, load_kwargs)
    opts = DiagnoseOptions.of(options, **kwargs)
    for name, v in (("n_workers", n_workers), ("n_shards", n_shards), ("torch_threads", torch_threads)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise ValueError(f"{name} must be an integer >= 1 or None, got {v!r}")
    texts, n_given, n_dropped = checked_texts(texts)
    c, owned = _connect(client, n_workers, cluster_kwargs)
    try:
        c.wait_for_workers(1)
        diag = _diagnose(DaskExecutor(c, spec, n_shards, torch_threads, opts.progress), texts, opts)
    finally:
        for obj in owned:
            obj.close()
    note_duplicates(diag.summary, n_dropped, n_given)
    return diag


def _diagnose(ex: DaskExecutor, texts, opts: DiagnoseOptions) -> Diagnosis:
    """Prepare on a worker (inputs it refuses are refused before any other task), every worker loads the model,
    the step sequence, the tables on a worker."""
    from distributed import wait
    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    prep = ex.prepare(texts, opts)       # the first task: texts longer than the model's positions end here
    warm = ex.warm_up()
    wait(warm)                           # every worker ready: the first tasks spread over all of them
    timings["prepare"] = time.perf_counter() - t0
    try:
        res = run_steps(ex, prep, opts, timings)
    finally:
        ex.close()
        del warm
    t0 = time.perf_counter()
    with warnings.catch_warnings():      # the merged spectra go to one worker for the tables, once, with the
        warnings.filterwarnings("ignore", message="Sending large graph")     # cluster's threads (the rest idle)
        diag = ex.submit("tables", build_diagnosis, res, opts, prep.source, prep.model_name, dict(timings),
                         torch_threads=max(ex.n_threads, ex.torch_threads or 1)).result()
    timings["tables"] = time.perf_counter() - t0
    timings["total"] = time.perf_counter() - t_start
    diag.summary["timings_s"] = {k: round(v, 3) for k, v in timings.items()}
    diag.summary["cluster"] = {"scheduler": ex.client.scheduler.address, "threads": ex.n_threads,
                               "tasks": dict(ex.counts), "task_times": ex.task_times(),
                               "model_spec": {"name_or_path": ex.spec.name_or_path,
                                              **{k: str(v) for k, v in ex.spec.load_kwargs}}}
    return diag
