"""``attnspec.diagnose``: the options checked once (:class:`.options.DiagnoseOptions`), then the one step sequence
(:mod:`.pipeline.run`) through an executor: this process (:class:`.pipeline.executor.LocalExecutor`) or a Dask
cluster (:func:`.distributed.diagnose_on_cluster`), chosen by ``client`` / ``n_workers``. A model implementing
:class:`attnspec.CustomAttention` (:mod:`attnspec.models.custom`) is diagnosed through its adapter (structure
masks, functional output) and its tables get ``block`` and ``path`` columns."""
from __future__ import annotations

import time
from typing import Any, Sequence

from .checks import check_finite_model, checked_texts, note_duplicates, unique_inputs
from .options import DiagnoseOptions
from .pipeline.executor import LocalExecutor
from .pipeline.resources import _one_blas_thread
from .pipeline.run import prepare, run_steps
from .result.build import build_diagnosis
from .result.diagnosis import Diagnosis

__all__ = ["diagnose"]


def diagnose(model: Any, tokenizer_or_inputs: Any = None, texts: Sequence[str] | str | None = None, *,
             options: DiagnoseOptions | None = None, client: Any = None, n_workers: int | None = None,
             load_kwargs: dict | None = None, n_shards: int | None = None, torch_threads: int | None = None,
             cluster_kwargs: dict | None = None, **kwargs) -> Diagnosis:
    """Diagnose every attention head of ``model``.

    Parameters
    ----------
    model : nn.Module or ModelAdapter or str
        A supported model (see :func:`attnspec.models.adapt`), with any attention implementation, also held by a
        TransformerLens 4.x ``TransformerBridge`` or an nnsight ``LanguageModel`` (:mod:`attnspec.models.toolkits`);
        on a cluster a built-in name or a path that every worker loads (``load_kwargs``).
    tokenizer_or_inputs : tokenizer, dict or tensor
        A tokenizer (then ``texts`` are tokenized, truncated to ``max_length`` and length-bucketed),
        a dict/BatchEncoding of ``input_ids``/``attention_mask``, or inputs for generic models (see
        :func:`attnspec.models.make_batches`). ``None`` on a cluster (each worker loads the tokenizer), and for a
        toolkit's model (its own tokenizer is taken).
    texts : list of str or 'builtin' or None
        Texts (policy in :mod:`attnspec.diagnostics.pipeline.texts`: ``'builtin'``/``None`` takes ``n_texts``
        texts of the built-in corpus, packed to ``max_length`` tokens for causal LMs unless ``pack``).
    options : DiagnoseOptions, optional
        Every option of the diagnosis (:class:`attnspec.DiagnoseOptions`: its fields, their allowed values and
        defaults); keyword arguments ``**kwargs`` are its fields too, and change ``options`` when both are given.
    client, n_workers, n_shards, torch_threads, cluster_kwargs : optional
        Run on a Dask cluster (:func:`attnspec.diagnostics.distributed.diagnose_on_cluster`): a client or a
        scheduler address, or ``n_workers`` processes of a new local cluster; groups of batches per step;
        torch threads per task. Where it runs changes no number of the result (to 1e-9).
    load_kwargs : dict, optional
        On a cluster: keyword arguments of :func:`attnspec.models.load_model` on the workers.
    **kwargs
        Fields of :class:`attnspec.DiagnoseOptions`: ``n_texts``, ``max_length``, ``removal``, ``n_boot``,
        ``seed``, ...

    Returns
    -------
    Diagnosis
        ``.heads`` (a row per layer x head), ``.layers``, ``.pairs``, ``.summary`` (columns:
        :mod:`attnspec.diagnostics.result.columns`, docs/columns.md).

    Raises
    ------
    OptionError
        (a ``ValueError``) An option outside its allowed values, naming it, before any work.
    TypeError
        An unknown option; texts that are not strings (``None``, bytes, numbers), or one string for a list.
    ValueError
        Blank texts, non-finite weights, texts longer than the model's positions (:mod:`.checks`), texts given beside
        pre-tokenized inputs (they would not be read), before any work.

    Notes
    -----
    A text given twice is diagnosed once: the bootstrap resamples texts as independent draws, and a repeated
    text would count as several (``summary['n_duplicate_texts']`` and a note say how many were dropped). So is a
    row of pre-tokenized ``input_ids`` that repeats an earlier row over the same ``attention_mask``, a repeated
    image and a repeated row of a generic model's inputs (:func:`.checks.unique_inputs`; on a cluster inputs are not
    taken: the workers tokenize the texts).

    Custom models: a model implementing :class:`attnspec.CustomAttention` (``attention_blocks()`` and
    ``functional_output(*args)``, :mod:`attnspec.models.custom`) takes its inputs ``X`` ``(B, ...)`` as
    ``tokenizer_or_inputs`` (an array or tensor, or a dict ``{"args": (X,), "attention_mask": (B, L)}``);
    each block's structure mask is intersected with the padding mask, head removal is measured on the
    functional output, and the tables get ``block`` (the block's name) and ``path`` (its label) columns.

    Examples
    --------
    A seeded 2-layer, 2-head GPT-2 on 2 texts of 6 random tokens, every head removed exactly:

    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> ad, batch = tiny_causal_lm()
    >>> inputs = {k: batch[k] for k in ("input_ids", "attention_mask")}
    >>> d = diagnose(ad, inputs, min_tokens=0, n_boot=20)
    >>> d.heads[["layer", "head", "n_tokens"]].values.tolist()
    [[0, 0, 12], [0, 1, 12], [1, 0, 12], [1, 1, 12]]
    >>> d.summary["removal_effect"], len(d.layers), len(d.pairs)      # one pair of heads per layer
    ('loss_increase', 2, 2)
    >>> d2 = diagnose(ad, inputs, options=DiagnoseOptions(min_tokens=0, n_boot=20))   # the same options
    >>> d2.heads.equals(d.heads)
    True
    """
    opts = DiagnoseOptions.of(options, **kwargs)
    if texts is not None and _holds_inputs(tokenizer_or_inputs):
        raise ValueError(f"texts ({type(texts).__name__}) would not be read: tokenizer_or_inputs holds inputs "
                         f"({type(tokenizer_or_inputs).__name__}), which are what is diagnosed; pass a tokenizer with the "
                         "texts, or the inputs alone")
    texts, n_given, n_dropped = checked_texts(texts)
    tokenizer_or_inputs, n_rows, n_rows_dropped = unique_inputs(tokenizer_or_inputs)
    unit = "text"
    if n_rows:                          # inputs given as arrays are what is diagnosed: rows repeating an earlier one
        n_given, n_dropped = n_rows, n_rows_dropped
        unit = "text" if hasattr(tokenizer_or_inputs, "keys") and "input_ids" in tokenizer_or_inputs else "input row"
    diag = _diagnose(model, tokenizer_or_inputs, texts, opts, client, n_workers, load_kwargs, n_shards, torch_threads,
                     cluster_kwargs)
    note_duplicates(diag.summary, n_dropped, n_given, unit)
    return diag


def _holds_inputs(x: Any) -> bool:
    """Whether ``tokenizer_or_inputs`` is inputs (a dict or ``BatchEncoding``, a tensor or array), not a tokenizer."""
    import numpy as np
    import torch
    return hasattr(x, "keys") or isinstance(x, (torch.Tensor, np.ndarray))


def _diagnose(model, tokenizer_or_inputs, texts, opts: DiagnoseOptions, client, n_workers, load_kwargs, n_shards,
              torch_threads, cluster_kwargs) -> Diagnosis:
    from ..models.custom import is_custom

    _check_placement(n_workers, n_shards, torch_threads, load_kwargs, cluster_kwargs)
    if client is None and n_workers is None:
        for name, v in (("load_kwargs", load_kwargs), ("n_shards", n_shards), ("torch_threads", torch_threads),
                        ("cluster_kwargs", cluster_kwargs)):
            if v is not None:
                raise ValueError(f"{name} applies on a cluster only (client= or n_workers=)")
        _check_local(model, tokenizer_or_inputs, is_custom(model))
        if is_custom(model):
            return _diagnose_custom(model, tokenizer_or_inputs, texts, opts)
        return _diagnose_here(model, tokenizer_or_inputs, texts, opts)
    if is_custom(model):
        raise ValueError("client= does not apply to a custom (attnspec.CustomAttention) model; diagnose it in "
                         "this process (client=None)")
    if tokenizer_or_inputs is not None:
        raise ValueError("with client=, pass the model as a name or path and tokenizer_or_inputs=None "
                         "(each worker loads the model and its tokenizer)")
    from .distributed import diagnose_on_cluster
    return diagnose_on_cluster(model, texts, client, n_workers=n_workers, load_kwargs=load_kwargs,
                               n_shards=n_shards, torch_threads=torch_threads, cluster_kwargs=cluster_kwargs,
                               options=opts)


def _check_placement(n_workers, n_shards, torch_threads, load_kwargs, cluster_kwargs) -> None:
    """The arguments of where a diagnosis runs, each named when of the wrong type or range."""
    import numbers
    for name, v in (("n_workers", n_workers), ("n_shards", n_shards), ("torch_threads", torch_threads)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1):
            raise ValueError(f"{name} must be an integer >= 1 or None, got {v!r}")
    for name, v in (("load_kwargs", load_kwargs), ("cluster_kwargs", cluster_kwargs)):
        if v is not None and not isinstance(v, dict):
            raise TypeError(f"{name} must be a dict or None, got {type(v).__name__}")


def _check_local(model, tokenizer_or_inputs, custom: bool) -> None:
    """A model for a diagnosis in this process: an object, not a name or path (a cluster's workers load those) nor
    a plain value (a number, a string, a container); what else it must be, :func:`attnspec.models.adapt` says."""
    import os
    if isinstance(model, (str, os.PathLike)):
        raise TypeError(f"model is a name or path ({str(model)!r}): load it with attnspec.models.load_model(...) and "
                        "pass the model and its tokenizer, or diagnose it on a cluster (client= or n_workers=)")
    if model is None or isinstance(model, (int, float, complex, bytes, bytearray, list, tuple, dict, set)):
        raise TypeError(f"model must be a torch.nn.Module (or an attnspec adapter), got {type(model).__name__}")


def _diagnose_here(model: Any, tokenizer_or_inputs: Any, texts, opts: DiagnoseOptions) -> Diagnosis:
    """The step sequence in this process, on the caller's model (put in eval mode, restored after)."""
    from ..models import adapt
    from ..models.protocol import evaluation_mode
    adapter = adapt(model)
    check_finite_model(adapter.model)
    own_tokenizer = tokenizer_or_inputs is None and adapter.tokenizer is not None
    if own_tokenizer:                   # a toolkit's own (TransformerLens, nnsight): the tokens it would feed
        tokenizer_or_inputs = adapter.tokenizer
    with _one_blas_thread():
        t_start = time.perf_counter()
        timings: dict[str, float] = {}
        with evaluation_mode(adapter.model):       # each submodule back in its own mode after
            prep = prepare(adapter, tokenizer_or_inputs, texts, opts)
            res = run_steps(LocalExecutor(adapter, opts.progress), prep, opts, timings)
        diag = build_diagnosis(adapter, res, opts, prep.source, prep.model_name, timings)
    if own_tokenizer:
        bos = " (it prepends a BOS token to each text)" if adapter.toolkit.get("name") == "transformer_lens" else ""
        diag.summary["notes"].append(f"no tokenizer given: the texts were tokenized by the {adapter.toolkit['wrapper']}'s "
                                     f"own tokenizer{bos}")
    timings["total"] = time.perf_counter() - t_start
    diag.summary["timings_s"] = {k: round(v, 3) for k, v in timings.items()}
    return diag


def _diagnose_custom(model: Any, inputs: Any, texts, opts: DiagnoseOptions) -> Diagnosis:
    """A :class:`attnspec.CustomAttention` model on inputs ``X``: its adapter, then labelled tables."""
    from ..models.custom import custom_adapter, custom_inputs, site_labels

    if texts is not None:
        raise ValueError("texts do not apply to a custom (attnspec.CustomAttention) model; pass its inputs X")
    if inputs is None:
        raise ValueError("a custom (attnspec.CustomAttention) model needs its inputs X as tokenizer_or_inputs")
    adapter = custom_adapter(model)
    if isinstance(inputs, dict):
        if "args" not in inputs:
            raise ValueError("custom model inputs as a dict need 'args' (and optionally 'attention_mask')")
        batch = custom_inputs(adapter, inputs["args"][0], inputs.get("attention_mask"))
    else:
        batch = custom_inputs(adapter, inputs)
    if opts.model_name is None:
        opts = opts.replace(model_name=type(model).__name__)
    return _label(_diagnose_here(adapter, batch, None, opts), site_labels(adapter))


def _label(diag: Diagnosis, labels: list[dict]) -> Diagnosis:
    """Insert ``block`` and ``path`` columns (by layer index) after ``layer`` in every table; the labels
    also go to ``summary["blocks"]``."""
    names = {r["layer"]: r["block"] for r in labels}
    paths = {r["layer"]: r["path"] for r in labels}
    for tab in (diag.heads, diag.layers, diag.pairs):
        if len(tab) and "layer" in tab:
            if "block" not in tab:
                tab.insert(1, "block", tab["layer"].map(names))
            if "path" not in tab:
                tab.insert(2, "path", tab["layer"].map(paths))
    diag.summary["blocks"] = labels
    return diag
