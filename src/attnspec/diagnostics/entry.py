"""``attnspec.diagnose``: the diagnosis in this process (:func:`.api.diagnose`) or on a Dask cluster
(:func:`.distributed.diagnose_on_cluster`), chosen by ``client``. Above both, so neither imports the other's
caller. A model implementing :class:`attnspec.CustomAttention` (:mod:`attnspec.models.custom`) is diagnosed
through its adapter (structure masks, functional output) and its tables get ``block`` and ``path`` columns."""
from __future__ import annotations

from typing import Any

from . import api
from .result import Diagnosis

__all__ = ["diagnose"]

_CLIENT_DOC = """
    client : distributed.Client or str, optional
        Run on a Dask cluster (:func:`attnspec.diagnostics.distributed.diagnose_on_cluster`): a client
        or a scheduler address. ``model`` must then be a built-in name or a path (every worker loads it
        once, with ``load_kwargs``) and ``tokenizer_or_inputs`` ``None``.
    load_kwargs : dict, optional
        With ``client``: keyword arguments of :func:`attnspec.models.load_model` on the workers.
"""

_CUSTOM_DOC = """
    Notes
    -----
    Custom models: a model implementing :class:`attnspec.CustomAttention` (``attention_blocks()`` and
    ``functional_output(*args)``, :mod:`attnspec.models.custom`) takes its inputs ``X`` ``(B, ...)`` as
    ``tokenizer_or_inputs`` (an array or tensor, or a dict ``{"args": (X,), "attention_mask": (B, L)}``);
    each block's structure mask is intersected with the padding mask, head removal is measured on the
    functional output, and the tables get ``block`` (the block's name) and ``path`` (its label) columns.
"""


def diagnose(model: Any, tokenizer_or_inputs: Any = None, texts=None, *, client: Any = None,
             load_kwargs: dict | None = None, **options) -> Diagnosis:
    from ..models.custom import is_custom

    if client is None:
        if load_kwargs is not None:
            raise ValueError("load_kwargs applies with client= only (load the model yourself otherwise)")
        if is_custom(model):
            return _diagnose_custom(model, tokenizer_or_inputs, texts, **options)
        return api.diagnose(model, tokenizer_or_inputs, texts, **options)
    if is_custom(model):
        raise ValueError("client= does not apply to a custom (attnspec.CustomAttention) model; diagnose it in "
                         "this process (client=None)")
    if tokenizer_or_inputs is not None:
        raise ValueError("with client=, pass the model as a name or path and tokenizer_or_inputs=None "
                         "(each worker loads the model and its tokenizer)")
    from .distributed import diagnose_on_cluster
    return diagnose_on_cluster(model, texts, client, load_kwargs=load_kwargs, **options)


def _diagnose_custom(model: Any, inputs: Any, texts, **options) -> Diagnosis:
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
    options.setdefault("model_name", type(model).__name__)
    diag = api.diagnose(adapter, batch, **options)
    return _label(diag, site_labels(adapter))


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


diagnose.__doc__ = api.diagnose.__doc__.replace("    reuse_forward : bool, optional",
                                                _CLIENT_DOC.strip("\n") + "\n    reuse_forward : bool, optional", 1)
diagnose.__doc__ = diagnose.__doc__.replace("    Examples\n    --------", _CUSTOM_DOC.strip("\n") + "\n\n    Examples\n    --------", 1)
