"""``diagnose_on_cluster()``: the diagnosis pipeline of :mod:`.api` run over a Dask cluster.

The steps and their mergeable accumulators are those of :func:`attnspec.diagnostics.api.run_steps`;
only where they run changes:

* the **model** is named, not shipped: every worker process loads it once from a :class:`ModelSpec`
  (a built-in name or a local path, plus :func:`attnspec.models.load_model` keyword arguments such as
  ``dtype`` or ``device``) and keeps it for later tasks and later diagnoses of the same model;
* the **texts** are resolved and length-bucketed once, on a worker (the client needs neither the
  model nor its tokenizer), exactly as a single-process diagnosis buckets them; the batches are then
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

import dataclasses
import inspect
import logging
import os
import time
import warnings
from typing import Any, Callable, Sequence

from . import selection as sel
from . import workers as wk
from .api import merge_parts
from .bootstrap import N_BOOT
from .cluster_jobs import _Run, _threads
from .cluster_jobs import groups as _groups
from .cluster_jobs import priority as _priority
from .cluster_jobs import removal_jobs as _removal_jobs
from .result import Diagnosis
from .steps.collect import DEFAULT_TILE_BYTES
from .workers import ModelSpec, model_loads_in_this_process

__all__ = ["ModelSpec", "diagnose_on_cluster", "model_loads_in_this_process"]

#: Groups of batches per worker thread (more groups: finer load balance and a smaller loss when a
#: worker dies; each group costs one task and one accumulator transfer).
GROUPS_PER_THREAD = 4
#: Exact-removal tasks per worker thread, at most (removal is most of a diagnosis' work: finer tasks,
#: run longest first, leave less idle tail; a task's result is only a few numbers per head).
REMOVAL_JOBS_PER_THREAD = 16


# --------------------------------------------------------------------------------------- client side

def _fit_steps(run: _Run, groups: list) -> tuple:
    """Fit and null passes: merged fit sums, fits, null sums, corpus counts, fit workers per group and a
    future of the merged Gram sums (computed on the cluster from the fit tasks' results)."""
    from distributed import wait
    futs = run.submit_all("fit", wk.fit_task, [(_priority(g), (run.run_id, g, run.opts), {}) for g in groups])
    grams = run.client.submit(wk.merged_grams, futs, key=f"attnspec-grams-0-{run.run_id}", pure=False)
    parts = run.gather(futs, "fit")
    fit_sums, corpus = merge_parts([p[0] for p in parts]), merge_parts([p[2] for p in parts])
    fits = [s.fit() for s in fit_sums]
    nulls = run.submit_all("null", wk.null_task, [(_priority(g), (f, fits, run.opts), {})    # where the masks are
                                                   for f, g in zip(futs, groups)], urgency=1)
    null_sums = merge_parts(run.gather(nulls, "null fit"))
    wait(grams)            # the spectra wait for nothing: they start at once, ahead of the removal tasks
    del futs, nulls
    return fit_sums, fits, null_sums, corpus, [p[3] for p in parts], grams


def _start_spectra(run: _Run, groups: list, fits: list, null_fits: list, powers: list, where: list,
                   grams: list) -> Callable[[], tuple]:
    """Submit the spectra per group, on the worker that fitted the group when it is still there (its forward
    records are on that worker's disk; anywhere else the group's forward pass is simply rerun), ahead of
    the removal tasks submitted after them (those fill the workers that the spectra's tail leaves idle).
    ``grams``: a future of the merged Gram sums (for the CKA bootstrap), computed on the cluster. Returns
    a function that waits for them: ``(merged spectra, seconds from submission to the last one done)``."""
    t0, done = time.perf_counter(), []
    futs = run.submit_all("spectra", wk.spectra_task, [
        (_priority(g), (run.run_id, g, fits, null_fits, powers, run.opts, grams),
         dict(workers=[w], allow_other_workers=True) if w else {}) for g, w in zip(groups, where)], urgency=1)
    for f in futs:
        f.add_done_callback(lambda _: done.append(time.perf_counter()))

    def finish() -> tuple:
        parts = run.gather(futs, "spectra")
        run.counts["spectra_cache_hits"] = sum(bool(p[1]) for p in parts)
        return merge_parts([p[0] for p in parts]), max(done, default=time.perf_counter()) - t0
    return finish


def _removal_step(run: _Run, prep: dict, groups: list, fit_sums: list, n: int, n_fine: int, timings: dict,
                  n_texts: int) -> tuple:
    """Step 4 (:func:`.steps.removal.removal_step`, as in one process) with tasks: exact removal over the removal
    jobs (``n``, ``n_fine``: as :func:`.cluster_jobs.removal_jobs`), first order in the first job of
    each batch ('screened': first order over the statistics' groups first), both on the plan's texts; an
    adaptive plan's later stages are more of the same tasks on the added texts, merged in. Returns ``(RemovalSums, screen code, plan)``."""
    from .steps.removal import removal_step
    from .steps.removal_plan import RemovalPlan, only_texts
    o = run.opts
    plan = RemovalPlan.of(prep["mode"], n_texts, o["seed"], o["removal_positions"], o["removal_texts"],
                          o["removal_vocab"], o["removal_target"])
    o_ex = dict(o, extra=dict(o["extra"], vocab_top=plan.vocab_top, per_text=plan.target is not None))

    def first_order(texts):
        parts = [g for g in (only_texts(g, texts) for g in groups) if g]
        fo = run.submit_all("first-order", wk.first_order_task, [(_priority(g), (g, o), {}) for g in parts])
        return lambda: merge_parts(run.gather(fo, "first order"))

    def exact(heads_of, texts, first_order=False):
        means = [s.context_means() for s in fit_sums]
        jobs = _removal_jobs(only_texts(prep["removal_batches"], texts), prep["n_heads"], heads_of, n,
                             o["max_tokens"], n_fine)
        fo, seen = [], set()     # first order once per batch: in the first job that removes heads on it
        for b, _ in jobs:
            ids = {tuple(x["order"]) for x in b}
            fo.append(first_order and not ids <= seen)
            seen |= ids
        ex = run.submit_all("removal", wk.exact_task, [
            (_priority(b, sum(map(len, h.values())) if h else 0), (b, means, h, plan.positions, o_ex, f), {})
            for (b, h), f in zip(jobs, fo)])
        return lambda: merge_parts(run.gather(ex, "head removal"))
    return removal_step(plan, prep["n_heads"], first_order, exact, timings, gradient=o["gradient"],
                        screen_top=o["screen_top"], screen_sample=o["screen_sample"], seed=o["seed"], fuse=True)


def _run_steps(run: _Run, prep: dict, n_threads: int, timings: dict):
    """Steps 2-4 on the cluster (as :func:`attnspec.diagnostics.api.run_steps`)."""
    from .api import StepResults
    n = run.opts["n_shards"] or GROUPS_PER_THREAD * n_threads
    groups = _groups(prep["batches"], n)
    t0 = time.perf_counter()
    fit_sums, fits, null_sums, corpus, where, grams = _fit_steps(run, groups)
    null_fits = [s.fit() for s in null_sums]
    timings["fit"] = time.perf_counter() - t0
    finish_spectra = _start_spectra(run, groups, fits, null_fits, [s.head_power() for s in fit_sums], where, grams)
    del grams
    timings["spectra"] = 0.0         # (set below: the steps' order in the summary)
    t0 = time.perf_counter()         # removal overlaps the spectra's tail (its tasks queue behind them)
    n_fine = run.opts["n_shards"] or REMOVAL_JOBS_PER_THREAD * n_threads
    rem, code, plan = _removal_step(run, prep, groups, fit_sums, n, n_fine, timings, corpus.n_texts)
    timings["removal"] = time.perf_counter() - t0
    spectra, timings["spectra"] = finish_spectra()
    run.counts["fit_workers"] = len({w for w in where if w})
    res = dict(fit_sums=fit_sums, fits=fits, null_fits=null_fits, spectra=spectra, removal=rem, corpus=corpus,
               removal_plan=plan, screen_code=code, null_sums=null_sums, n_boot=run.opts["n_boot"])
    names = {f.name for f in dataclasses.fields(StepResults)}
    return StepResults(**{k: v for k, v in res.items() if k in names})


def _warm_up(run: _Run) -> list:
    """One model-loading task per worker now (preferred there, allowed elsewhere: never stuck on a worker
    that leaves), so that the model loads everywhere at once rather than in the first tasks."""
    workers = sorted(run.client.scheduler_info(n_workers=-1)["workers"])
    return [run.client.submit(wk.in_task, run.spec, None, (run.run_id, "load"), wk.load_only, pure=False,
                              key=f"attnspec-load-{k}-{run.run_id}", workers=[w], allow_other_workers=True)
            for k, w in enumerate(workers)]


def _diagnose(run: _Run, texts) -> Diagnosis:
    from distributed import wait
    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    n_threads = _threads(run.client)
    warm = _warm_up(run)                  # every worker loads the model while one prepares the texts
    t0 = time.perf_counter()
    prep = run.client.submit(wk.prepare, run.spec, texts, run.opts, key=f"attnspec-prepare-0-{run.run_id}",
                             pure=False).result()
    wait(warm)                            # every worker ready: the first tasks spread over all of them
    timings["prepare"] = time.perf_counter() - t0
    try:
        res = _run_steps(run, prep, n_threads, timings)
    finally:
        run.client.run(wk.drop_cache, run.run_id, on_error="ignore")
        del warm
    t0 = time.perf_counter()
    with warnings.catch_warnings():      # the merged spectra go to one worker for the tables, once, with the
        warnings.filterwarnings("ignore", message="Sending large graph")     # cluster's threads (the rest idle)
        heads, layers, pairs, summary, store = run.submit(
            "tables", wk.tables_task, res, run.opts, prep["source"], prep["model_name"], dict(timings),
            torch_threads=max(n_threads, run.opts["torch_threads"] or 1)).result()
    timings["tables"] = time.perf_counter() - t0
    timings["total"] = time.perf_counter() - t_start
    summary["timings_s"] = {k: round(v, 3) for k, v in timings.items()}
    summary["cluster"] = {"scheduler": run.client.scheduler.address, "threads": n_threads,
                          "tasks": dict(run.counts), "task_times": run.task_times(),
                          "model_spec": {"name_or_path": run.spec.name_or_path,
                                         **{k: str(v) for k, v in run.spec.load_kwargs}}}
    return Diagnosis(heads=heads, layers=layers, pairs=pairs, spectra=store, summary=summary)


# ------------------------------------------------------------------------------------------ public

_INT_OPTIONS = (("max_length", 2), ("bucket_size", 1), ("removal_bucket_size", 1), ("max_tokens", 1),
                ("tile_bytes", 1), ("min_tokens", 0), ("n_boot", 0))
_OPTIONAL_INT_OPTIONS = (("removal_positions", 1), ("screen_top", 0), ("screen_sample", 0), ("n_shards", 1),
                         ("torch_threads", 1), ("removal_vocab", 1))


#: Arguments of the step functions that this module sets itself (not accepted as ``**options``).
_SET_HERE = {"adapter", "tokenizer", "texts", "n_shards", "batches", "grad_batches", "rm_batches", "res", "progress",
             "timings", "means", "heads_of", "positions", "seed", "mean_ablation", "max_tokens", "gradient",
             "threshold", "min_tokens", "source", "max_length", "bucket_size", "removal_bucket_size", "model_name",
             "removal_positions", "n_boot", "vocab_top", "removal_texts", "removal_vocab", "per_text",
             "removal_target"}


def _check(opts: dict) -> None:
    """The checks of :func:`attnspec.diagnose` on the options, before any cluster is touched."""
    for name, lo in _INT_OPTIONS + _OPTIONAL_INT_OPTIONS:
        v = opts[name]
        if (v is not None or (name, lo) in _INT_OPTIONS) and (not isinstance(v, int) or isinstance(v, bool) or v < lo):
            raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    from .steps.removal_plan import MODES, check_removal_texts
    if opts["removal"] not in (True, False, "auto") + tuple(MODES):
        raise ValueError(f"removal must be one of {', '.join(MODES + ('auto',))}, got {opts['removal']!r}")
    explicit = {True: "exact", False: "none"}.get(opts["removal"], opts["removal"])
    check_removal_texts(opts["removal_texts"], None if explicit == "auto" else explicit, opts["removal_target"])
    from . import api
    fns = [getattr(api, f) for f in ("make_shards", "first_order_pass", "exact_pass", "tables_and_summary")]
    known = set().union(*(inspect.signature(f).parameters for f in fns)) - _SET_HERE
    unknown = sorted(set(opts["extra"]) - known)
    if unknown:
        raise TypeError(f"diagnose_on_cluster() got unexpected keyword arguments {unknown}")


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
                        n_texts: int | None = None, max_length: int = 128, bucket_size: int = 16,
                        removal: str | bool = "auto", mean_ablation: bool = False, gradient: bool = True,
                        threshold: float = sel.DIFFUSE_THRESHOLD, min_tokens: int = sel.MIN_TOKENS_FOR_LABEL,
                        seed: int = 0, max_tokens: int = 16384, removal_bucket_size: int = 4,
                        tile_bytes: int = DEFAULT_TILE_BYTES, pack: bool | None = None, progress: bool = False,
                        model_name: str | None = None, reuse_forward: bool | None = None,
                        removal_positions: int | None = None, screen_top: int | None = None,
                        screen_sample: int | None = None, n_shards: int | None = None, torch_threads: int | None = None,
                        cluster_kwargs: dict | None = None, n_boot: int = N_BOOT, removal_texts: int | str | None = None,
                        removal_vocab: int | None = None, removal_target: float | None = None, **options) -> Diagnosis:
    """Diagnose every attention head of a named model on a Dask cluster (see module docstring).

    Parameters
    ----------
    model : str, path or ModelSpec
        A built-in name or a model directory / GGUF file every worker can read (not a model object).
    texts : list of str or 'builtin' or None
        As :func:`attnspec.diagnose` (resolved on a worker with the model's tokenizer).
    client, n_workers, cluster_kwargs : distributed.Client or str or None, int, dict
        A client (left open), a scheduler address (``'tcp://10.0.0.5:8786'``), or ``None``: a new LocalCluster
        of ``n_workers`` one-thread processes (default: CPU count) with ``cluster_kwargs``, closed at the end.
    load_kwargs : dict, optional
        :func:`attnspec.models.load_model` keywords on the workers, e.g. ``{'dtype': 'bfloat16'}``.
    n_texts, max_length, bucket_size, removal, mean_ablation, gradient, threshold, min_tokens, seed, max_tokens, \
removal_bucket_size, tile_bytes, pack, model_name, reuse_forward, removal_positions, screen_top, screen_sample, \
n_boot, progress, removal_texts, removal_vocab, removal_target
        As :func:`attnspec.diagnose` (``reuse_forward``: on each worker's local disk).
    n_shards, torch_threads : int, optional
        Groups of length buckets per step (default: 4 per worker thread, at most one per bucket);
        ``torch.set_num_threads`` in every task (the cores per worker process; see module docstring).
    **options
        Keywords of :func:`.api.make_shards`, :func:`.api.first_order_pass`, :func:`.api.exact_pass` or
        :func:`.api.tables_and_summary`, passed to those that take them.

    Returns
    -------
    Diagnosis
        The tables of :func:`attnspec.diagnose` on the same texts (equal to 1e-9); ``summary['cluster']``:
        scheduler, worker threads, tasks per step and their wall and CPU seconds (module docstring).

    Raises
    ------
    TypeError, ValueError
        A model object or an unknown keyword; an option outside its range (before any cluster is touched).

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
    opts = dict(n_texts=n_texts, max_length=max_length, bucket_size=bucket_size, removal=removal,
                mean_ablation=mean_ablation, gradient=gradient, threshold=threshold, min_tokens=min_tokens, seed=seed,
                max_tokens=max_tokens, removal_bucket_size=removal_bucket_size, tile_bytes=tile_bytes, pack=pack,
                progress=progress, model_name=model_name, reuse_forward=reuse_forward, removal_positions=removal_positions,
                screen_top=screen_top, screen_sample=screen_sample, n_shards=n_shards, torch_threads=torch_threads,
                n_boot=n_boot, removal_texts=removal_texts, removal_vocab=removal_vocab,
                removal_target=removal_target, extra=dict(options))
    _check(opts)
    c, owned = _connect(client, n_workers, cluster_kwargs)
    try:
        c.wait_for_workers(1)
        return _diagnose(_Run(c, spec, opts), texts)
    finally:
        for obj in owned:
            obj.close()
