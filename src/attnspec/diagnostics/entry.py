"""``attnspec.diagnose``: the diagnosis in this process (:func:`.api.diagnose`) or on a Dask cluster
(:func:`.distributed.diagnose_on_cluster`), chosen by ``client``. Above both, so neither imports the other's
caller."""
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


def diagnose(model: Any, tokenizer_or_inputs: Any = None, texts=None, *, client: Any = None,
             load_kwargs: dict | None = None, **options) -> Diagnosis:
    if client is None:
        if load_kwargs is not None:
            raise ValueError("load_kwargs applies with client= only (load the model yourself otherwise)")
        return api.diagnose(model, tokenizer_or_inputs, texts, **options)
    if tokenizer_or_inputs is not None:
        raise ValueError("with client=, pass the model as a name or path and tokenizer_or_inputs=None "
                         "(each worker loads the model and its tokenizer)")
    from .distributed import diagnose_on_cluster
    return diagnose_on_cluster(model, texts, client, load_kwargs=load_kwargs, **options)


diagnose.__doc__ = api.diagnose.__doc__.replace("    reuse_forward : bool, optional",
                                                _CLIENT_DOC.strip("\n") + "\n    reuse_forward : bool, optional", 1)
