"""Model families for identification: a parameter vector ``theta`` -> a law (quantile function).

A family exposes

* ``names``: the free continuous parameters, ``bounds[name] = (lo, hi)`` and ``log_scale`` (names
  optimized in log coordinates);
* ``quantiles(theta, u)``: the law's quantile function ``Q_theta(u)``;
* ``right_edge(theta)``: the law's right edge (outliers are counted above it);
* ``sample(theta, rng, model=None)``: one simulated spectrum of the observed size (for the parametric
  bootstrap and the calibration of the goodness-of-fit statistic); for MHSA families ``model`` is
  ``'softmax'`` (the finite softmax layer at ``theta``) or ``'surrogate'`` (its Gaussian equivalent).

:class:`MHSAFamily` is the Gaussian-equivalent family of an MHSA configuration. Its parameters are
any of ``beta`` (inverse temperature), ``psi`` (``d_qk/d`` per head, all heads equal), ``phi``
(``d_v/d``) and ``scale`` (an overall factor on the eigenvalues: the law of ``scale * lambda``); the
head count is discrete and handled by profiling (one family per ``H``, see :func:`identify`).
Its law comes from

* the closed-form quartic of :func:`attnspec.identify.laws.attention_law` when
  ``target='attention'`` (convention A) — milliseconds per evaluation;
* otherwise :func:`attnspec.theory.solve_law`, evaluated on a configuration scaled to a large
  virtual width so that ratios are continuous (the law depends on ratios only);

cached by ``theta``. Samples come from :func:`attnspec.simulation.simulate` at the base
configuration's actual size, with ``models=('softmax',)`` or ``('surrogate',)``.
:class:`MarchenkoPasturFamily` (parameters ``scale`` and optionally ``ratio``) is a closed-form
family used to test the fitter and as an alternative model in goodness-of-fit studies.

:class:`~attnspec.identify.tables.TabulatedFamily` (and its one-parameter special case
:class:`~attnspec.identify.tables.TabulatedBetaFamily`) replaces a slow law by a table on a small box of
parameters, for the many evaluations of bootstrap refits.
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Mapping, Sequence

import numpy as np

from ..config import MHSAConfig, sigma2_of_beta
from .laws import attention_law, marchenko_pastur_law

__all__ = ["Family", "MHSAFamily", "MarchenkoPasturFamily", "law_backend", "SAMPLE_MODELS"]

#: What a bootstrap spectrum of an MHSA family can be simulated from.
SAMPLE_MODELS = ("softmax", "surrogate")

_VIRTUAL_D = 1 << 20


class Family:
    """Base class (see module docstring).

    Examples
    --------
    >>> import numpy as np
    >>> fam = MarchenkoPasturFamily(100, 200)             # a Family: names, bounds, quantiles, right_edge, sample
    >>> fam.names, fam.to_eta({"scale": np.e}), fam.from_eta([0.0])
    (('scale',), array([1.]), {'scale': 1.0})
    """

    names: tuple[str, ...] = ()
    fixed: dict[str, float] = {}
    bounds: dict[str, tuple[float, float]] = {}
    log_scale: frozenset = frozenset({"scale", "psi", "phi", "ratio"})

    def full(self, theta: Mapping[str, float]) -> dict[str, float]:
        """``theta`` completed with the fixed values of the parameters it does not set."""
        out = dict(self.fixed)
        out.update({k: float(v) for k, v in theta.items()})
        return out

    def to_eta(self, theta: Mapping[str, float], names: Sequence[str] | None = None) -> np.ndarray:
        """Fit coordinates ``eta`` of ``theta``: ``log`` for the names in ``log_scale``, the value otherwise
        (over ``names``, default :attr:`names`)."""
        names = self.names if names is None else names
        return np.array([math.log(theta[k]) if k in self.log_scale else float(theta[k]) for k in names])

    def from_eta(self, eta, names: Sequence[str] | None = None) -> dict[str, float]:
        """Inverse of :meth:`to_eta`."""
        names = self.names if names is None else names
        return {k: (math.exp(v) if k in self.log_scale else float(v)) for k, v in zip(names, eta)}

    def law(self, theta: Mapping[str, float]):  # pragma: no cover - interface
        """The law at ``theta`` (with ``quantile(u)`` and ``right_edge``), before the overall ``scale``."""
        raise NotImplementedError

    def quantiles(self, theta: Mapping[str, float], u: np.ndarray) -> np.ndarray:
        """``Q_theta(u) = scale * Q_law(u)``."""
        t = self.full(theta)
        return t.get("scale", 1.0) * self.law(t).quantile(u)

    def right_edge(self, theta: Mapping[str, float]) -> float:
        """``scale`` times the law's right edge (outliers are counted above it)."""
        t = self.full(theta)
        return t.get("scale", 1.0) * float(self.law(t).right_edge)

    def sample(self, theta: Mapping[str, float], rng: np.random.Generator,
               model: str | None = None) -> np.ndarray:  # pragma: no cover - interface
        raise NotImplementedError

    def start(self, eigs: np.ndarray) -> dict[str, float]:
        """A starting point from the data (moment matching where possible)."""
        return {k: 0.5 * (lo + hi) if k not in self.log_scale else math.sqrt(lo * hi) for k, (lo, hi) in
                ((k, self.bounds[k]) for k in self.names)}


def law_backend(config: MHSAConfig) -> str:
    """``'closed-form'`` (attention target, convention A) or ``'solver'``.

    Examples
    --------
    >>> from attnspec.config import MHSAConfig
    >>> law_backend(MHSAConfig.uniform(64, 64, target="attention")), law_backend(MHSAConfig.uniform(64, 64, heads=2))
    ('closed-form', 'solver')
    """
    return "closed-form" if (config.target == "attention" and config.inputs == "orthonormal") else "solver"


class MHSAFamily(Family):
    """Gaussian-equivalent laws around a base MHSA configuration (see module docstring).

    Parameters
    ----------
    base : MHSAConfig
        Fixes everything that is not free (sizes of the simulated surrogate, sharing, tying, ...).
    free : names among ``beta, psi, phi, scale``
    fixed : values for parameters that are not free (default: from ``base``; ``scale`` 1)
    draws : independent draws pooled in one surrogate sample (match the observed spectrum's pooling)

    Examples
    --------
    >>> import numpy as np
    >>> from attnspec.config import MHSAConfig
    >>> fam = MHSAFamily(MHSAConfig.uniform(100, 100, target="attention"))       # free: beta
    >>> round(float(fam.quantiles({"beta": 1.0}, np.array([0.5]))[0]), 4), round(fam.right_edge({"beta": 1.0}), 4)
    (0.9079, 9.0095)
    >>> fam.sample({"beta": 1.0}, np.random.default_rng(0)).shape    # a surrogate spectrum at l = 100
    (100,)
    """

    def __init__(self, base: MHSAConfig, free=("beta",), fixed: Mapping[str, float] | None = None,
                 bounds: Mapping[str, tuple[float, float]] | None = None, draws: int = 1):
        unknown = set(free) - {"beta", "psi", "phi", "scale"}
        if unknown:
            raise ValueError(f"unknown free parameters {sorted(unknown)}; choose among beta, psi, phi, scale")
        if base.target == "attention" and "phi" in free:
            raise ValueError("phi (value width) does not enter the attention-matrix law")
        self.base = base
        self.draws = int(draws)
        self.names = tuple(free)
        self.fixed = {"beta": base.beta, "psi": float(np.mean(base.psi)), "phi": float(np.mean(base.phi)), "scale": 1.0}
        self.fixed.update(fixed or {})
        self.bounds = {"beta": (0.05, 3.0), "psi": (0.01, 4.0), "phi": (0.01, 4.0), "scale": (1e-4, 1e4)}
        self.bounds.update(bounds or {})
        self.backend = law_backend(base)
        self._law = lru_cache(maxsize=4096)(self._law_uncached)

    def describe(self) -> str:
        return f"Gaussian-equivalent law ({self.backend}) of {self.base.describe()}; free: {', '.join(self.names)}"

    def config(self, theta: Mapping[str, float], d: int | None = None) -> MHSAConfig:
        """The configuration at ``theta`` (widths rounded at width ``d``, default the base width)."""
        t = self.full(theta)
        b = self.base
        d = d or b.d_model
        H = b.n_heads
        scale_to = d / b.d_model
        psi_changed = abs(t["psi"] - float(np.mean(b.psi))) > 1e-15
        phi_changed = abs(t["phi"] - float(np.mean(b.phi))) > 1e-15
        dq = (max(1, round(t["psi"] * d)),) * H if psi_changed else tuple(max(1, round(w * scale_to)) for w in b.d_qk)
        if b.values == "tied-to-keys":
            dv = dq
        else:
            dv = (max(1, round(t["phi"] * d)),) * H if phi_changed else tuple(max(1, round(w * scale_to)) for w in b.d_v)
        return b.replace(seq_len=max(2, round(b.seq_len * scale_to)), d_model=d, d_qk=dq, d_v=dv,
                         d_out=max(1, round(b.d_out * scale_to)), beta=float(t["beta"]))

    def _law_uncached(self, key: tuple):
        t = dict(key)
        if self.backend == "closed-form":
            return attention_law(t["beta"], gamma=self.base.gamma, psi=t["psi"])
        from ..theory import solve_law

        return solve_law(self.config(t, d=_VIRTUAL_D))

    def law(self, theta: Mapping[str, float]):
        t = self.full(theta)
        return self._law(tuple(sorted((k, round(v, 12)) for k, v in t.items() if k != "scale")))

    def sample(self, theta: Mapping[str, float], rng: np.random.Generator, model: str | None = None) -> np.ndarray:
        """``scale`` times the pooled eigenvalues of ``draws`` simulated layers at ``theta`` (base size).

        ``model``: ``'surrogate'`` (default; the Gaussian equivalent, whose limit is this family's law) or
        ``'softmax'`` (the finite softmax layer, whose spectrum differs from the law at finite size).
        """
        from ..simulation import simulate

        model = model or "surrogate"
        if model not in SAMPLE_MODELS:
            raise ValueError(f"model must be one of {', '.join(SAMPLE_MODELS)}, got {model!r}")
        t = self.full(theta)
        seed = int(rng.integers(2 ** 62))
        res = simulate(self.config(t), seed=seed, draws=self.draws, models=(model,))
        return t["scale"] * getattr(res, model).ravel()

    def start(self, eigs: np.ndarray) -> dict[str, float]:
        s = super().start(eigs)
        m1 = float(np.mean(eigs))
        if "beta" in s and "scale" not in self.names:
            # m1 = e^{beta^2} - 1 for untied values (docs/theory.md, "Closed forms"), divided by the fixed scale
            s["beta"] = float(np.clip(math.sqrt(math.log1p(max(m1 / self.fixed["scale"], 1e-6))),
                                      *self.bounds["beta"]))
        if "scale" in s:
            s["scale"] = float(np.clip(m1 / max(sigma2_of_beta(s.get("beta", self.fixed["beta"])), 1e-12),
                                       *self.bounds["scale"]))
        return s


class MarchenkoPasturFamily(Family):
    """``sigma^2 W W^T / n`` (``W`` ``p x n``) with free ``scale`` (= sigma^2) and optionally ``ratio`` = p/n.

    Examples
    --------
    >>> import numpy as np
    >>> fam = MarchenkoPasturFamily(100, 200)
    >>> round(fam.right_edge({"scale": 2.0}), 4)          # 2 (1 + sqrt(1/2))^2
    5.8284
    """

    def __init__(self, p: int, n: int, free=("scale",)):
        self.p, self.n = p, n
        self.names = tuple(free)
        self.fixed = {"scale": 1.0, "ratio": p / n}
        self.bounds = {"scale": (1e-4, 1e4), "ratio": (0.01, 1.0)}
        self._law = lru_cache(maxsize=4096)(lambda r: marchenko_pastur_law(r, 1.0))

    def describe(self) -> str:
        return f"Marchenko-Pastur (p={self.p}, n={self.n}); free: {', '.join(self.names)}"

    def law(self, theta):
        return self._law(round(self.full(theta)["ratio"], 12))

    def sample(self, theta, rng, model=None):
        """A Marchenko–Pastur spectrum (``model`` is ignored: this family has one generative model)."""
        t = self.full(theta)
        n = max(self.p, round(self.p / t["ratio"]))
        W = rng.standard_normal((self.p, n))
        return t["scale"] * np.linalg.eigvalsh(W @ W.T / n)

    def start(self, eigs):
        s = super().start(eigs)
        if "scale" in s:
            s["scale"] = float(np.mean(eigs))
        return s
