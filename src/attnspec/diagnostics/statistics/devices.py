"""Where the statistics run: on the device of their input tensors (the model's CUDA device, or the CPU), with
only small results (per-head sums, eigenvalues) handed to the host as numpy arrays.

Every statistic of the diagnosis follows two rules, so that one code path serves every device:

* tensors it creates live on the device of its inputs (``device=x.device``, :func:`like`), and random draws,
  made on the host by numpy's generators (:mod:`.noise`: the same numbers on every device), are moved there;
* results leave the device only through :func:`host`.

Sums stay in float64 on the device (CUDA supports it; MPS does not, so a model on MPS has its statistics on the
CPU, :func:`statistics_device`). Eigensolves of matrices larger than :data:`DEVICE_EIGVALSH_MAX_N` run on the
host: torch's CUDA ``eigvalsh`` is a batched Jacobi solver only up to ``n = 32`` and loops over the matrices
above (pytorch issues #174674 and #183806), while the diagnosis' Grams are ``d_head`` or ``min(L, d_out)``
wide, 64 to 4,096. The threshold is the documented one, not a measured one.
"""
from __future__ import annotations

import numpy as np
import torch

__all__ = ["host", "like", "statistics_device", "STATISTICS_DEVICES", "DEVICE_EIGVALSH_MAX_N"]

#: Values of the ``statistics_device`` option: ``'cpu'``, or ``'model'`` (the device of the model's parameters).
STATISTICS_DEVICES = ("cpu", "model")
#: Largest symmetric matrix whose eigenvalues are computed on a non-CPU device (larger ones go to the host).
DEVICE_EIGVALSH_MAX_N = 32


def host(x: "torch.Tensor | np.ndarray | float") -> np.ndarray:
    """``x`` as a numpy array on the host (a tensor on any device is copied to the CPU first).

    Examples
    --------
    >>> host(torch.tensor([1.0, 2.0])), host(np.arange(2))
    (array([1., 2.], dtype=float32), array([0, 1]))
    """
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def like(x, ref: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``x`` (a number, a numpy array or a tensor) as a tensor on ``ref``'s device, in ``dtype`` (default ``ref``'s).

    Examples
    --------
    >>> like(np.array([1, 2]), torch.zeros(1, dtype=torch.float64))
    tensor([1., 2.], dtype=torch.float64)
    """
    return torch.as_tensor(x, dtype=ref.dtype if dtype is None else dtype, device=ref.device)


def statistics_device(choice: str, model: torch.nn.Module | None = None) -> torch.device:
    """The device of a diagnosis' statistics for the option ``statistics_device`` (:data:`STATISTICS_DEVICES`).

    ``'cpu'``: the CPU whatever the model's device (the recorded attention inputs are copied there). ``'model'``:
    the device of the model's first parameter, except MPS (no float64 sums there: the CPU) and a model without
    parameters (the CPU).

    Raises
    ------
    ValueError
        When ``choice`` is not one of :data:`STATISTICS_DEVICES`.

    Examples
    --------
    >>> statistics_device("model", torch.nn.Linear(2, 2)), statistics_device("cpu")
    (device(type='cpu'), device(type='cpu'))
    """
    if choice not in STATISTICS_DEVICES:
        raise ValueError(f"statistics_device must be one of {', '.join(map(repr, STATISTICS_DEVICES))}, got {choice!r}")
    p = None if model is None or choice == "cpu" else next(model.parameters(), None)
    if p is None or p.device.type == "mps":
        return torch.device("cpu")
    return p.device
