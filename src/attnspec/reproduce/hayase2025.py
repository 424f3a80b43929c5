"""Hayase, Collins and Karakida (2025, arXiv 2510.06685): the single-head attention-matrix figure.

Setting of the figure: one head, ``d = d_qk = l = 1000`` (``gamma = psi = 1``), ``beta = 1``, 10 independent
draws. For each draw the squared singular values of ``sqrt(d) A`` (``A = rowsoftmax(beta S)``, ``S`` the
scores, entries approximately ``N(0, 1)``) are computed and the top ``n_remove = 3`` removed: the largest is
the rank-one mean ``sqrt(d) 1 1^T / l`` (squared singular value about ``d``), the next ones are outliers made by
the fluctuating row normalization. The remaining ``l - 3`` values (the *bulk*) are compared with

* the limiting law of the linear Gaussian-equivalent model ``(1 1^T + beta S + alpha Z) / l``,
  ``alpha^2 = e^{beta^2} - 1 - beta^2`` (:func:`attnspec.theory.solve_law` with ``target='attention'``; the
  rank-one mean does not change the bulk's law, so it is the law of ``sqrt(l) (A - 1 1^T / l)``);
* the square Marchenko–Pastur law with the same variance ``sigma^2 = e^{beta^2} - 1``, what an iid model of the
  entries would give (:func:`attnspec.theory.closed_forms.marchenko_pastur_cdf`, edge ``4 sigma^2``).

The linear model itself is sampled on the same draws (its noise ``Z`` from the draw's noise stream) as a
control. Distances pool the bulks of all draws: ``W1`` (:func:`attnspec.spectra.wasserstein1_to_cdf`) and
``KS`` (:func:`attnspec.spectra.ks_to_cdf`). Draw ``k`` uses ``SeedSequence(seed).spawn(draws)[k]`` split into a
weights and a noise stream, exactly as :func:`attnspec.simulation.simulate`, so the centered spectra are those of
``attnspec simulate`` with the same seed. Inputs follow convention A (orthonormal rows) by default;
``inputs='gaussian'`` uses iid Gaussian inputs (convention B), whose law differs (docs/theory.md,
"Input conventions A and B").
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from ..config import INPUTS, MHSAConfig
from ..jsonio import write_json
from ..simulation import draw_blocks, simulate_outputs, stack_blocks
from ..spectra import gram_eigenvalues, ks_to_cdf, wasserstein1_to_cdf
from ..theory import Law, solve_law
from ..theory import closed_forms as cf

__all__ = ["Hayase2025", "hayase2025", "attention_config", "squared_singular_values", "MODELS", "BETA_RANGE"]

#: sample name -> simulated model: softmax attention and the linear Gaussian-equivalent model
MODELS = {"softmax": "softmax", "linear": "surrogate"}
#: inverse temperatures accepted (the law's solver range; the figure uses 1)
BETA_RANGE = (0.05, 4.0)


def attention_config(d: int, beta: float = 1.0, inputs: str = "orthonormal") -> MHSAConfig:
    """The figure's single head at width ``d``: ``l = d_qk = d_model = d``, ``target='attention'``.

    Parameters
    ----------
    d : int
        Sequence length, model width and query/key width (``gamma = psi = 1``).
    beta : float
        Inverse temperature.
    inputs : 'orthonormal' (convention A) or 'gaussian' (convention B)

    Returns
    -------
    MHSAConfig
        Its ``sigma2 = e^{beta^2} - 1`` and ``alpha2 = e^{beta^2} - 1 - beta^2`` are the variances of the
        Marchenko–Pastur comparison and of the linear model's noise.

    Examples
    --------
    >>> c = attention_config(32)
    >>> c.seq_len, c.d_qk, c.target, c.inputs
    (32, (32,), 'attention', 'orthonormal')
    >>> round(c.sigma2, 6), round(c.alpha2, 6)          # e - 1, e - 2
    (1.718282, 0.718282)
    """
    return MHSAConfig(seq_len=d, d_model=d, d_qk=(d,), d_v=(d,), d_out=d, beta=beta, target="attention", inputs=inputs)


def squared_singular_values(config: MHSAConfig, seed: int = 0, draws: int = 10,
                            progress: bool = False) -> dict[str, np.ndarray]:
    """Squared singular values of ``sqrt(d) A`` per draw, ascending, shape ``(draws, l)``, for the softmax attention
    (``'softmax'``) and the linear model (``'linear'``).

    :func:`attnspec.simulation.simulate_outputs` returns ``Y = sqrt(l) (A - 1 1^T / l)``; the uncentered matrix is
    ``sqrt(d) A = sqrt(d / l) (Y + 1 1^T / sqrt(l))``. Seeds as :func:`attnspec.simulation.simulate`.

    Parameters
    ----------
    config : MHSAConfig
        A single attention head (:func:`attention_config`).
    seed : int
    draws : int
    progress : bool
        Show a progress bar over the draws.

    Returns
    -------
    dict of str to ndarray
        ``{'softmax': (draws, l), 'linear': (draws, l)}``, ascending per row.

    Examples
    --------
    The largest value of each draw is the rank-one mean ``sqrt(d) 1 1^T / l``, about ``d``:

    >>> v = squared_singular_values(attention_config(32), seed=0, draws=2)
    >>> v["softmax"].shape, v["linear"].shape
    ((2, 32), (2, 32))
    >>> bool(np.all(np.abs(v["softmax"][:, -1] / 32 - 1) < 0.2))
    True
    """
    l, d = config.seq_len, config.d_model
    out = {name: np.empty((draws, l)) for name in MODELS}
    streams = [ss.spawn(2) for ss in np.random.SeedSequence(seed).spawn(draws)]
    for k, (w, n) in enumerate(tqdm(streams, desc="hayase2025", unit="draw", disable=not progress, leave=False)):
        blocks = stack_blocks([draw_blocks(config, np.random.default_rng(w))])
        Y = simulate_outputs(config, blocks, [np.random.default_rng(n)], tuple(MODELS.values()))
        for name, model in MODELS.items():
            out[name][k] = gram_eigenvalues(math.sqrt(d / l) * (Y[model][0] + 1.0 / math.sqrt(l)))
    return out


@dataclass(frozen=True, eq=False)
class Hayase2025:
    """The reproduced figure, made by :func:`hayase2025`.

    Attributes
    ----------
    summary : dict
        Plain numbers (also written as ``hayase2025.json``).
    bulk : dict of str to ndarray
        Per sample (``'softmax'``, ``'linear'``): ``(draws, l - n_remove)``, ascending.
    removed : dict of str to ndarray
        Per sample: the dropped values, ``(draws, n_remove)``, descending.
    law : Law
        The Gaussian-equivalent law of the bulk.

    Examples
    --------
    >>> import tempfile
    >>> r = hayase2025(d=64, draws=1)
    >>> r.bulk["softmax"].shape, r.removed["softmax"].shape
    ((1, 61), (1, 3))
    >>> h = r.histogram(bins=10)
    >>> list(h)
    ['bin_lo', 'bin_hi', 'softmax', 'linear', 'law', 'marchenko_pastur']
    >>> round(float(h["law"] @ (h["bin_hi"] - h["bin_lo"])), 6)      # the law's whole mass lies in the cells
    1.0
    >>> with tempfile.TemporaryDirectory() as out:
    ...     [p.name for p in r.write(out)]
    ['hayase2025.png', 'hayase2025.json', 'hayase2025.csv']
    """
    summary: dict
    bulk: dict = field(repr=False)
    removed: dict = field(repr=False)
    law: Law = field(repr=False)

    def histogram(self, bins: int = 80) -> dict[str, np.ndarray]:
        """Densities on ``bins`` equal cells of ``[0, 1.02 max(bulk max, law edge, MP edge)]``: each sample's
        histogram (normalized to its bulk), and the law's and Marchenko–Pastur's mean density per cell
        (CDF differences over the cell width).

        Examples
        --------
        >>> h = hayase2025(d=64, draws=1).histogram(bins=4)
        >>> h["bin_lo"].shape, round(float(h["softmax"] @ (h["bin_hi"] - h["bin_lo"])), 6)
        ((4,), 1.0)
        """
        s2 = self.summary["sigma2"]
        top = 1.02 * max(max(float(b.max()) for b in self.bulk.values()), self.law.right_edge, 4.0 * s2)
        edges = np.linspace(0.0, top, bins + 1)
        width = np.diff(edges)
        out = {"bin_lo": edges[:-1], "bin_hi": edges[1:]}
        for name, b in self.bulk.items():
            out[name] = np.histogram(b.ravel(), bins=edges)[0] / (b.size * width)
        out["law"] = np.diff(self.law.cdf(edges)) / width
        out["marchenko_pastur"] = np.diff(cf.marchenko_pastur_cdf(edges, s2)) / width
        return out

    def write(self, out_dir: str | Path) -> list[Path]:
        """Write ``hayase2025.png`` (the figure), ``hayase2025.json`` (``summary``) and ``hayase2025.csv``
        (:meth:`histogram`) into ``out_dir`` (created if missing); returns the paths. See the class example."""
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        hist = self.histogram()
        csv_path = out_dir / "hayase2025.csv"
        tmp = csv_path.with_name(".tmp-" + csv_path.name)
        with tmp.open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(list(hist))
            for row in zip(*hist.values()):
                w.writerow([f"{v:.10g}" for v in row])
        tmp.replace(csv_path)
        from ..figures.reproduce import hayase2025_figure

        return [hayase2025_figure(self, hist, out_dir / "hayase2025.png"),
                write_json(out_dir / "hayase2025.json", self.summary), csv_path]


def _check(d: int, beta: float, draws: int, n_remove: int, seed: int, inputs: str) -> None:
    def is_int(v):
        return isinstance(v, (int, np.integer)) and not isinstance(v, bool)
    if not is_int(d) or not 16 <= d <= 4000:
        raise ValueError(f"d must be an integer in [16, 4000], got {d!r}")
    if not isinstance(beta, (int, float)) or not BETA_RANGE[0] <= beta <= BETA_RANGE[1]:
        raise ValueError(f"beta must be a number in [{BETA_RANGE[0]:g}, {BETA_RANGE[1]:g}], got {beta!r}")
    if not is_int(draws) or draws < 1:
        raise ValueError(f"draws must be an integer >= 1, got {draws!r}")
    if not is_int(n_remove) or not 0 <= n_remove <= d // 4:
        raise ValueError(f"n_remove must be an integer in [0, d/4 = {d // 4}], got {n_remove!r}")
    if not is_int(seed) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    if inputs not in INPUTS:
        raise ValueError(f"inputs must be one of {INPUTS}, got {inputs!r}")


def _sample_numbers(bulk: np.ndarray, removed: np.ndarray, law: Law, s2: float) -> dict:
    """Distances of one pooled bulk to the law and to Marchenko–Pastur, its edge, moments and removed values."""
    x = bulk.ravel()
    mp_edge = 4.0 * s2
    return {
        "w1_to_law": wasserstein1_to_cdf(x, law.cdf, law.right_edge),
        "ks_to_law": ks_to_cdf(x, law.cdf),
        "w1_to_mp": wasserstein1_to_cdf(x, lambda t: cf.marchenko_pastur_cdf(t, s2), mp_edge),
        "ks_to_mp": ks_to_cdf(x, lambda t: cf.marchenko_pastur_cdf(t, s2)),
        "bulk_max_mean": float(bulk[:, -1].mean()),
        "bulk_m1": float(x.mean()),
        "bulk_m2": float(np.mean(x * x)),
        "beyond_law_edge": int(np.sum(x > law.right_edge * 1.02)),
        "beyond_mp_edge": int(np.sum(x > mp_edge * 1.02)),
        "removed_mean": [float(v) for v in removed.mean(axis=0)],
    }


def hayase2025(d: int = 1000, beta: float = 1.0, draws: int = 10, n_remove: int = 3, seed: int = 0,
               inputs: str = "orthonormal", progress: bool = False) -> Hayase2025:
    """Recompute the figure: bulks of ``sqrt(d) A`` against the Gaussian-equivalent law and Marchenko–Pastur.

    Parameters
    ----------
    d : int in [16, 4000]
        ``l = d_qk = d_model`` (the figure: 1000).
    beta : float in [0.05, 4]
        Inverse temperature (the figure: 1).
    draws : int >= 1
        Independent draws, pooled (the figure: 10).
    n_remove : int in [0, d/4]
        Largest squared singular values dropped per draw (the figure: 3).
    seed : int >= 0
    inputs : 'orthonormal' (convention A, default) or 'gaussian' (convention B)

    Returns
    -------
    Hayase2025
        ``summary`` holds, per sample (``softmax``: ``sqrt(d) A``; ``linear``: the linear model), ``w1_to_law``,
        ``ks_to_law``, ``w1_to_mp``, ``ks_to_mp``, the mean largest bulk value, bulk moments, counts beyond each
        edge and the mean removed values; and the law's and Marchenko–Pastur's edges and moments.

    Examples
    --------
    >>> r = hayase2025(d=64, draws=1)
    >>> r.summary["softmax"]["ks_to_law"] < r.summary["softmax"]["ks_to_mp"]
    True
    """
    _check(d, beta, draws, n_remove, seed, inputs)
    config = attention_config(d, float(beta), inputs)
    law = solve_law(config)
    values = squared_singular_values(config, seed, draws, progress)
    s2 = config.sigma2
    bulk = {k: v[:, :v.shape[1] - n_remove] for k, v in values.items()}
    removed = {k: v[:, v.shape[1] - n_remove:][:, ::-1] for k, v in values.items()}
    summary = {
        "study": "Hayase, Collins and Karakida (2025), arXiv 2510.06685: single-head attention matrix",
        "d": d, "l": d, "d_qk": d, "beta": float(beta), "draws": draws, "n_remove": n_remove, "seed": seed,
        "inputs": inputs, "sigma2": s2, "alpha2": config.alpha2,
        "law": {"right_edge": law.right_edge, "m1": float(law.moments[0]), "m2": float(law.moments[1]),
                "mass": law.mass},
        "marchenko_pastur": {"right_edge": 4.0 * s2, "m1": s2, "m2": 2.0 * s2 * s2},
    }
    for name in MODELS:
        summary[name] = _sample_numbers(bulk[name], removed[name], law, s2)
    return Hayase2025(summary=summary, bulk=bulk, removed=removed, law=law)
