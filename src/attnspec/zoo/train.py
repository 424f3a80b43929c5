"""A small, deterministic training loop for the zoo models.

``train_model`` = AdamW + cosine learning-rate decay + cross-entropy, mini-batches drawn with a seeded
``torch.Generator`` (same seed, same thread count -> same weights) and a tqdm progress bar.
Training runs for exactly ``epochs`` epochs: there is no time budget, so the weights do not depend
on how busy the machine is (seconds are recorded in the history, never acted on).
Before the first epoch ``model.prepare(X_train)`` fits the data-dependent buffers (input
normalization, SPD reference point). ``split`` makes a stratified held-out split of trials.

Shapes: X [n, C, T] float32 (volts), y [n] int64 class indices.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from torch import nn

__all__ = ["TrainResult", "split", "train_model", "evaluate", "train_and_evaluate"]


@dataclass
class TrainResult:
    """Accuracies, timings and history of one training run (:func:`train_and_evaluate`).

    ``chance`` is ``1 / n_classes``; ``seconds`` and ``cpu_seconds`` are the wall and CPU time of
    :func:`train_model`; ``history`` its per-epoch records.

    Examples
    --------
    >>> r = TrainResult(train_accuracy=1.0, test_accuracy=0.75, chance=0.5, seconds=2.0, cpu_seconds=1.9,
    ...                 epochs=3, n_train=12, n_test=4, threads=1)
    >>> r.line("staged")
    'staged: held-out accuracy 0.750 (chance 0.500, n_test=4), train accuracy 1.000, 3 epochs in 2.0 s wall ...'
    >>> r.to_dict()["test_accuracy"]
    0.75
    """

    train_accuracy: float
    test_accuracy: float
    chance: float
    seconds: float
    cpu_seconds: float
    epochs: int
    n_train: int
    n_test: int
    threads: int
    history: list[dict] = field(default_factory=list)

    def line(self, name: str = "") -> str:
        return (f"{name}: held-out accuracy {self.test_accuracy:.3f} (chance {self.chance:.3f}, n_test={self.n_test}), "
                f"train accuracy {self.train_accuracy:.3f}, {self.epochs} epochs in {self.seconds:.1f} s wall "
                f"({self.cpu_seconds:.1f} s CPU) on {self.threads} torch thread(s)")

    def to_dict(self) -> dict:
        return asdict(self)


def _set_seed(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed % (2 ** 32))


def split(y: np.ndarray, test_fraction: float = 0.25, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Stratified split of trial indices: (train_idx, test_idx), sorted.

    Each class gives ``round(test_fraction * n_class)`` trials, drawn with ``seed``, to the test set.

    Examples
    --------
    >>> import numpy as np
    >>> split(np.array([0, 0, 0, 0, 1, 1, 1, 1]), test_fraction=0.25, seed=0)
    (array([...]), array([..., ...]))
    >>> tr, te = split(np.array([0, 0, 0, 0, 1, 1, 1, 1]), 0.5)
    >>> len(tr), len(te), sorted(set(tr) | set(te)) == list(range(8))
    (4, 4, True)
    """
    rng = np.random.default_rng(seed)
    tr, te = [], []
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        k = int(round(test_fraction * len(idx)))
        te.append(idx[:k])
        tr.append(idx[k:])
    return np.sort(np.concatenate(tr)), np.sort(np.concatenate(te))


@torch.no_grad()
def predict(model: nn.Module, X, batch_size: int = 128) -> np.ndarray:
    model.eval()
    X = torch.as_tensor(np.asarray(X), dtype=torch.float32)
    out = [model(X[i:i + batch_size]).argmax(-1) for i in range(0, len(X), batch_size)]
    return torch.cat(out).numpy()


def evaluate(model: nn.Module, X, y, batch_size: int = 128) -> float:
    """Accuracy of ``model`` on (X, y): the fraction of trials whose largest logit is the label.

    Examples
    --------
    >>> import numpy as np, torch
    >>> class Sign(torch.nn.Module):          # logits (-x, x) of the first feature
    ...     def forward(self, x):
    ...         return torch.stack([-x[:, 0], x[:, 0]], 1)
    >>> evaluate(Sign(), np.array([[1.0], [-2.0], [3.0]]), np.array([1, 0, 0]))
    0.666...
    """
    return float((predict(model, X, batch_size) == np.asarray(y)).mean())


def train_model(model: nn.Module, X, y, *, epochs: int = 30, batch_size: int = 32, lr: float = 3e-3,
                weight_decay: float = 1e-2, seed: int = 0, progress: bool = True, prepare: bool = True,
                callbacks=()) -> list[dict]:
    """Train ``model`` in place for ``epochs`` epochs; returns the per-epoch history (loss, accuracy,
    wall and CPU seconds).

    The result is a function of the model's initial state, the data, the arguments and the torch
    thread count only: the learning-rate schedule (cosine decay over ``epochs``) and the stopping
    point do not look at any clock.

    Parameters
    ----------
    model : nn.Module
        Maps X [B, ...] to logits [B, n_classes]; its ``prepare(X)`` (if any) is called first
        when ``prepare`` is True (input normalization of the zoo models).
    X, y : array-like
        Trials and integer labels.
    epochs, batch_size, lr, weight_decay : AdamW with cosine decay of ``lr`` to 0 over all steps.
    seed : int
        Seeds torch, numpy and the mini-batch order.
    progress : bool
        Show a tqdm bar.
    callbacks : sequence of callable
        Each called as ``cb(model, epoch, record)`` after every epoch (``record``: that epoch's history entry); a
        dict it returns is merged into the record. torch's random state is saved and restored around the calls, so
        the training does not depend on them (e.g. :class:`attnspec.callbacks.AttnspecCallback`, which diagnoses
        the model).

    Examples
    --------
    >>> import numpy as np, torch
    >>> X = np.random.default_rng(0).standard_normal((8, 3)); y = (X[:, 0] > 0).astype(int)
    >>> _ = torch.manual_seed(0); model = torch.nn.Linear(3, 2)
    >>> hist = train_model(model, X, y, epochs=2, batch_size=4, lr=0.1, progress=False)
    >>> [h["epoch"] for h in hist], sorted(hist[0])
    ([1, 2], ['cpu_seconds', 'epoch', 'loss', 'seconds', 'train_acc'])
    >>> _ = torch.manual_seed(0); model = torch.nn.Linear(3, 2)
    >>> hist = train_model(model, X, y, epochs=2, batch_size=4, lr=0.1, progress=False,
    ...                    callbacks=[lambda m, epoch, rec: {"weight_norm": float(m.weight.norm())}])
    >>> "weight_norm" in hist[1]
    True
    """
    from tqdm.auto import tqdm

    _set_seed(seed)
    X = torch.as_tensor(np.asarray(X), dtype=torch.float32)
    y = torch.as_tensor(np.asarray(y), dtype=torch.long)
    if prepare and hasattr(model, "prepare"):
        model.prepare(X)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    steps = epochs * ((len(X) + batch_size - 1) // batch_size)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + np.cos(np.pi * min(s, steps) / steps)))
    gen = torch.Generator().manual_seed(seed)
    loss_fn = nn.CrossEntropyLoss()
    history = []
    t0, c0 = time.perf_counter(), time.process_time()
    bar = tqdm(range(epochs), desc=type(model).__name__, disable=not progress, leave=False)
    for ep in bar:
        model.train()
        perm = torch.randperm(len(X), generator=gen)
        tot, correct = 0.0, 0
        for i in range(0, len(X), batch_size):
            idx = perm[i:i + batch_size]
            logits = model(X[idx])
            loss = loss_fn(logits, y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            tot += float(loss.detach()) * len(idx)
            correct += int((logits.argmax(-1) == y[idx]).sum())
        rec = dict(epoch=ep + 1, loss=tot / len(X), train_acc=correct / len(X), seconds=time.perf_counter() - t0,
                   cpu_seconds=time.process_time() - c0)
        if callbacks:
            cpu_rng = torch.get_rng_state()
            for cb in callbacks:
                extra = cb(model, ep + 1, rec)
                if isinstance(extra, dict):
                    rec.update(extra)
            torch.set_rng_state(cpu_rng)
            model.train()
        history.append(rec)
        bar.set_postfix(loss=f"{rec['loss']:.3f}", acc=f"{rec['train_acc']:.2f}")
    model.eval()
    return history


def train_and_evaluate(model: nn.Module, X_train, y_train, X_test, y_test, **fit_kwargs) -> TrainResult:
    """``train_model`` on the training trials, then accuracy on both sets; chance = 1 / n_classes.

    Examples
    --------
    >>> import numpy as np, torch
    >>> X = np.random.default_rng(0).standard_normal((12, 3)); y = (X[:, 0] > 0).astype(int)
    >>> _ = torch.manual_seed(0)
    >>> res = train_and_evaluate(torch.nn.Linear(3, 2), X[:8], y[:8], X[8:], y[8:], epochs=2, progress=False)
    >>> res.chance, res.n_train, res.n_test, res.epochs
    (0.5, 8, 4, 2)
    """
    t0, c0 = time.perf_counter(), time.process_time()
    hist = train_model(model, X_train, y_train, **fit_kwargs)
    secs, cpu = time.perf_counter() - t0, time.process_time() - c0
    n_classes = int(max(np.max(y_train), np.max(y_test)) + 1)
    return TrainResult(train_accuracy=evaluate(model, X_train, y_train), test_accuracy=evaluate(model, X_test, y_test),
                       chance=1.0 / n_classes, seconds=secs, cpu_seconds=cpu, epochs=len(hist), n_train=len(y_train),
                       n_test=len(y_test), threads=torch.get_num_threads(), history=hist)
