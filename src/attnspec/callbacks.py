"""Diagnoses during training: :class:`AttnspecCallback`, a ``transformers.TrainerCallback`` (and a callback of the
zoo's training loop, :func:`attnspec.zoo.train.train_model`).

Every ``every`` steps (or at each evaluation, by default) it diagnoses the model being trained on a fixed, seeded
sample of texts with a cheap default (16 built-in texts, no head removal, no gradient importance, 200 bootstrap
replicates), logs summary scalars (:func:`attnspec.comparing.tracking.summary_scalars`) through the Trainer's own
logging (so they reach TensorBoard or W&B when the Trainer reports to them) and appends the rows of the long table
of :func:`attnspec.track` (same columns, ``checkpoint`` named ``checkpoint-<step>``), written to
``out/track.csv`` after each diagnosis and with its trajectories and report at the end of training. The model is
put in evaluation mode for the diagnosis and restored, and the random state of torch is saved and restored
around it, so training proceeds exactly as without the callback.
"""
from __future__ import annotations

import time
from pathlib import Path

import pandas as pd

try:                                     # transformers is a dependency of the model loaders, not of attnspec's core
    from transformers import TrainerCallback as _Base
except ImportError:                      # pragma: no cover - the zoo's loop needs only __call__
    _Base = object

__all__ = ["AttnspecCallback"]


class _RNG:
    """Saves torch's random state (CPU and CUDA) on entry and restores it on exit."""

    def __enter__(self):
        import torch
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
        return self

    def __exit__(self, *exc):
        import torch
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)
        return False


class AttnspecCallback(_Base):
    """Diagnose the model every ``every`` steps (or at each evaluation) while it trains (module docstring).

    Parameters
    ----------
    tokenizer : optional
        The model's tokenizer (a ``transformers`` Trainer's ``processing_class`` is used when None).
    texts : list of str, optional
        The fixed texts (default: ``n_texts`` built-in texts, the default of ``attnspec track``).
    inputs : optional
        Model inputs instead of texts (an :class:`attnspec.CustomAttention` model's trials, e.g. the zoo's EEG).
    every : int, optional
        Diagnose every ``every`` optimizer steps (epochs in the zoo's loop); None: at each evaluation (Trainer) or
        every epoch (zoo).
    out : str or pathlib.Path, optional
        Folder of the long table (``track.csv``, ``summary.json``; ``trajectories.png`` and ``report.html`` at the
        end of training).
    n_texts : int
        Built-in texts when ``texts`` is None (16).
    options : DiagnoseOptions, optional
        Diagnosis options; default ``removal='none'``, ``gradient=False`` and ``kwargs``.
    trainer : transformers.Trainer, optional
        The Trainer whose ``log`` receives the scalars (also set by :meth:`attach`); without it the scalars go to
        ``state.log_history`` only.
    **kwargs
        Options of :func:`attnspec.diagnose` (``seed``, ``n_boot``, ``removal``, ``max_length``, ...).

    Attributes
    ----------
    table : pandas.DataFrame
        The long table so far.
    seconds : float
        Wall time spent diagnosing.

    Examples
    --------
    In the zoo's training loop (no Trainer needed): a tiny random BERT "trained" for two epochs by a loop that only
    calls the callback, on 8 built-in texts.

    >>> import torch, transformers
    >>> from attnspec.models import load_model
    >>> tok = load_model("minilm")[1]
    >>> _ = torch.manual_seed(0)
    >>> cfg = transformers.BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=1,
    ...                               num_attention_heads=2, intermediate_size=64)
    >>> model = transformers.BertModel(cfg)
    >>> cb = AttnspecCallback(tok, n_texts=8, n_boot=20)
    >>> for epoch in (1, 2):
    ...     scalars = cb(model, epoch, {})
    >>> cb.table[["step", "checkpoint", "layer", "head"]].values.tolist()
    [[1, 'checkpoint-1', 0, 0], [1, 'checkpoint-1', 0, 1], [2, 'checkpoint-2', 0, 0], [2, 'checkpoint-2', 0, 1]]
    >>> sorted(scalars)[:2], model.training
    (['attnspec/n_dependent_heads', 'attnspec/n_diffuse'], True)
    """

    def __init__(self, tokenizer=None, texts=None, *, inputs=None, every: int | None = None,
                 out: str | Path | None = None, n_texts: int = 16, options=None, trainer=None, **kwargs):
        from .diagnostics import DiagnoseOptions
        from .diagnostics.checks import check_texts, schedule_problem
        problem = schedule_problem(every)
        if problem is not None:
            raise ValueError(problem)
        self.tokenizer, self.inputs, self.every = tokenizer, inputs, every
        if texts is None and inputs is None:
            from .data import builtin_texts
            texts = builtin_texts(n_texts)
        self.texts = check_texts(texts) if texts is not None else None
        base = dict(removal="none", gradient=False, progress=False)
        base.update(kwargs)
        self.options = DiagnoseOptions.of(options, **kwargs) if options is not None else DiagnoseOptions(**base)
        self.out = Path(out) if out is not None else None
        self.trainer = trainer
        self.table = pd.DataFrame()
        self.scalars: dict[int, dict] = {}
        self.seconds = 0.0
        self._done: set[int] = set()

    def attach(self, trainer) -> "AttnspecCallback":
        """Add this callback to ``trainer`` and log through ``trainer.log`` (TensorBoard, W&B, ...).

        Parameters
        ----------
        trainer : transformers.Trainer

        Returns
        -------
        AttnspecCallback
            ``self``.

        Examples
        --------
        >>> class FakeTrainer:
        ...     def __init__(self): self.callbacks = []
        ...     def add_callback(self, cb): self.callbacks.append(cb)
        >>> t = FakeTrainer()
        >>> cb = AttnspecCallback(texts=["a"] * 8).attach(t)
        >>> t.callbacks == [cb], cb.trainer is t
        (True, True)
        """
        self._refuse(getattr(trainer, "args", None), getattr(trainer, "model", None),
                     getattr(trainer, "processing_class", None))
        if self not in getattr(trainer, "callbacks", []) and \
                self not in getattr(getattr(trainer, "callback_handler", None), "callbacks", []):
            trainer.add_callback(self)
        self.trainer = trainer
        return self

    def _refuse(self, args, model, tokenizer) -> None:
        """What the diagnosis would refuse, refused before training: a schedule that never diagnoses
        (:func:`attnspec.diagnostics.checks.schedule_problem`), a model with non-finite weights and texts longer than
        its positions (:func:`attnspec.diagnostics.checks.check_model_inputs`)."""
        from .diagnostics.checks import check_finite_model, check_model_inputs, schedule_problem
        problem = schedule_problem(self.every, args)
        if problem is not None:
            raise ValueError(f"AttnspecCallback: {problem}")
        if model is None:
            return
        if self.inputs is not None:
            check_finite_model(model)
        else:
            check_model_inputs(model, tokenizer if tokenizer is not None else self.tokenizer, self.texts, self.options)

    # ------------------------------------------------------------------------------------------------ the work
    def diagnose_now(self, model, step: int, tokenizer=None) -> dict:
        """Diagnose ``model`` as it is now (evaluation mode, torch's random state preserved), append its rows at
        ``step`` to :attr:`table` (and ``out/track.csv``) and return its summary scalars.

        Parameters
        ----------
        model : torch.nn.Module
        step : int
        tokenizer : optional
            Overrides the callback's tokenizer.

        Returns
        -------
        dict of str to float

        Examples
        --------
        See the class's example.
        """
        from .comparing.tracking import summary_scalars, track_rows, write_track
        from .diagnostics import diagnose
        from .models.protocol import evaluation_mode
        t0 = time.perf_counter()
        tok = tokenizer if tokenizer is not None else self.tokenizer
        with _RNG(), evaluation_mode(model):           # each submodule back in its own mode after
            if self.inputs is not None:
                d = diagnose(model, self.inputs, options=self.options)
            else:
                if tok is None:
                    raise ValueError("AttnspecCallback needs a tokenizer (or inputs) to diagnose texts")
                d = diagnose(model, tok, self.texts, options=self.options)
        rows = track_rows(d, step, f"checkpoint-{int(step)}")
        self.table = rows if self.table.empty else pd.concat([self.table, rows], ignore_index=True)
        scalars = summary_scalars(d)
        self.scalars[int(step)] = scalars
        self._done.add(int(step))
        self.seconds += time.perf_counter() - t0
        if self.out is not None:
            write_track(self.table, self.out, self._summary(d), report=False)
        return scalars

    def _summary(self, d=None) -> dict:
        s = {"source": "AttnspecCallback", "scalars": self.scalars, "diagnose_seconds": round(self.seconds, 3)}
        if d is not None:
            s["model"] = d.summary.get("model")
        return s

    def _log(self, scalars: dict, state) -> None:
        if self.trainer is not None:
            self.trainer.log(dict(scalars))
        elif state is not None:
            state.log_history.append({**scalars, "step": state.global_step})

    # ------------------------------------------------------------------------------------------ the zoo's loop
    def __call__(self, model, epoch: int, record: dict | None = None) -> dict | None:
        """The zoo's training-loop hook (:func:`attnspec.zoo.train.train_model`): diagnose after epoch ``epoch``
        when it is a multiple of ``every`` (every epoch when None); returns the scalars (merged into the epoch's
        record) or None."""
        if self.every is not None and epoch % self.every:
            return None
        return self.diagnose_now(model, epoch)

    # ------------------------------------------------------------------------------------ transformers events
    def on_train_begin(self, args, state, control, **kwargs):
        """Before the first step: refuse (``ValueError``) a callback that would never run and a model or texts that
        the diagnosis would refuse mid-training (:meth:`_refuse`), and warn when the Trainer reports to loggers
        (``report_to``) that the scalars would miss (not attached)."""
        self._refuse(args, kwargs.get("model"), kwargs.get("processing_class") or kwargs.get("tokenizer"))
        if self.trainer is None and _integrations(args):
            import warnings
            warnings.warn(f"AttnspecCallback is not attached: its scalars go to state.log_history only, not to "
                          f"{', '.join(_integrations(args))}; add it with cb.attach(trainer) to log through "
                          "trainer.log", RuntimeWarning, stacklevel=2)
        return control

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        if self.every is not None and model is not None and state.global_step % self.every == 0 \
                and state.global_step not in self._done:
            self._log(self.diagnose_now(model, state.global_step, processing_class or kwargs.get("tokenizer")),
                      state)
        return control

    def on_evaluate(self, args, state, control, model=None, processing_class=None, **kwargs):
        if self.every is None and model is not None and state.global_step not in self._done:
            self._log(self.diagnose_now(model, state.global_step, processing_class or kwargs.get("tokenizer")),
                      state)
        return control

    def on_train_end(self, args, state, control, **kwargs):
        if self.out is not None and not self.table.empty:
            from .comparing.tracking import write_track
            write_track(self.table, self.out, self._summary(), report=True)
        return control


def _integrations(args) -> list[str]:
    """The loggers a Trainer reports to (``args.report_to``, ``'none'`` and empty removed)."""
    rep = getattr(args, "report_to", None) or []
    rep = [rep] if isinstance(rep, str) else list(rep)
    return [r for r in rep if r not in ("none", "")]

