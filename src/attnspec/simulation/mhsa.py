"""Monte-Carlo spectra of softmax MHSA and of its Gaussian-equivalent surrogate.

For each draw, the same inputs and weights feed both models (docs/theory.md, sections "Model and normalization"
and "The Gaussian equivalent"):

    softmax:    O = sum_h rowsoftmax(beta S_h) V_h W_O^h
    surrogate:  O = sum_h (1 1^T + beta S_h + alpha Z_h)/l V_h W_O^h,   Z_h independent per head

with ``S_h = Q_h K_h^T / sqrt(d_qk^h)``. The reported matrix is ``Y = sqrt(l/d_out) P O`` with
``P = I - 1 1^T/l`` (``centering='tokens'``) or ``O - (1/l) 1 1^T sum_h V_h W_O^h``
(``centering='values'``); for ``target='attention'`` it is ``Y_att = sqrt(l) (A - 1 1^T/l)``. The
spectrum is the ``l`` eigenvalues of ``Y Y^T`` (no further ``1/l``; first moment ``e^{beta^2} - 1``).

Randomness: draw ``k`` uses ``SeedSequence(seed).spawn(draws)[k]``, split into a weights stream and
a noise stream, so a draw does not depend on how draws are batched nor on which models run.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from tqdm.auto import tqdm

from ..config import MHSAConfig, alpha_of_beta
from ..spectra import gram_eigenvalues, ks_distance, split_outliers, summarize, wasserstein1
from .attention import softmax_rows
from .blocks import Blocks, draw_blocks, stack_blocks

__all__ = ["SimulationResult", "simulate", "simulate_outputs", "MODELS"]

MODELS = ("softmax", "surrogate")
_BATCH_BYTES = 512 * 2**20


def _check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def simulate_outputs(config: MHSAConfig, blocks: Blocks, noise_rngs: list[np.random.Generator],
                     models=MODELS) -> dict[str, np.ndarray]:
    """The centered, normalized matrices ``Y`` for a stack of ``b`` draws.

    Parameters
    ----------
    blocks : Blocks with arrays of shape ``(b, l, w)``
    noise_rngs : one generator per draw, the source of the surrogate noise ``Z_h``
    models : subset of ``('softmax', 'surrogate')``

    Returns
    -------
    dict model -> ndarray of shape ``(b, l, d_out)`` (``(b, l, l)`` for ``target='attention'``).

    Examples
    --------
    >>> from attnspec.simulation import draw_blocks, stack_blocks
    >>> cfg = MHSAConfig.uniform(32, 64, heads=2)
    >>> blocks = stack_blocks([draw_blocks(cfg, np.random.default_rng(s)) for s in (0, 1)])
    >>> Y = simulate_outputs(cfg, blocks, [np.random.default_rng(2), np.random.default_rng(3)])
    >>> Y["softmax"].shape, Y["surrogate"].shape
    ((2, 32, 64), (2, 32, 64))
    """
    l, beta = config.seq_len, config.beta
    alpha = alpha_of_beta(beta)
    contexts: dict[str, list[np.ndarray]] = {m: [] for m in models}
    out: dict[str, np.ndarray] = {}
    for h in range(config.n_heads):
        Q, K, V = blocks.Q[h], blocks.K[h], blocks.V[h]
        S = Q @ np.swapaxes(K, -1, -2) / np.sqrt(config.d_qk[h])
        if "surrogate" in models:
            Z = np.stack([rng.standard_normal((l, l)) for rng in noise_rngs])
            R = beta * S + alpha * Z  # l A - 1 1^T for the surrogate
            if config.target == "attention":
                out["surrogate"] = R / np.sqrt(l)
            else:
                contexts["surrogate"].append((V.sum(axis=-2, keepdims=True) + R @ V) / l)
            del Z, R
        if "softmax" in models:
            A = softmax_rows(S, beta)
            if config.target == "attention":
                out["softmax"] = np.sqrt(l) * (A - 1.0 / l)
            else:
                contexts["softmax"].append(A @ V)
            del A
    if config.target == "attention":
        return out
    if config.centering == "values":
        VW = np.concatenate(blocks.V, axis=-1) @ blocks.W_O
        offset = VW.mean(axis=-2, keepdims=True)
    for m in models:
        O = np.concatenate(contexts[m], axis=-1) @ blocks.W_O
        O = O - (O.mean(axis=-2, keepdims=True) if config.centering == "tokens" else offset)
        out[m] = np.sqrt(l / config.d_out) * O
    return out


@dataclass(frozen=True)
class SimulationResult:
    """Spectra of ``Y Y^T`` from ``draws`` independent draws.

    Attributes
    ----------
    config : MHSAConfig
    seed : int
    softmax, surrogate : ndarray, shape (draws, l), or None if not simulated
        Ascending eigenvalues per draw.

    Examples
    --------
    >>> res = simulate(MHSAConfig.uniform(32, 64, heads=2), seed=0, draws=2)
    >>> res.draws, res.softmax.shape, sorted(res.distances())[:3]
    (2, (2, 32), ['bulk_edge', 'ks', 'ks_bulk'])
    """

    config: MHSAConfig
    seed: int
    softmax: np.ndarray | None = field(repr=False)
    surrogate: np.ndarray | None = field(repr=False)

    @property
    def draws(self) -> int:
        return (self.softmax if self.softmax is not None else self.surrogate).shape[0]

    def distances(self, rel_tol: float = 0.02) -> dict:
        """W1 and KS between the pooled softmax and surrogate spectra, over everything and over the bulk.

        The bulk edge is the largest surrogate eigenvalue (the Gaussian equivalent has no outliers);
        softmax eigenvalues above ``edge * (1 + rel_tol)`` are counted as outliers and dropped from
        the ``*_bulk`` distances.
        """
        if self.softmax is None or self.surrogate is None:
            raise ValueError("distances need both the softmax and the surrogate spectra")
        edge = float(self.surrogate.max())
        bulk, outliers = split_outliers(self.softmax, edge, rel_tol)
        return {
            "w1": wasserstein1(self.softmax, self.surrogate),
            "ks": ks_distance(self.softmax, self.surrogate),
            "w1_bulk": wasserstein1(bulk, self.surrogate),
            "ks_bulk": ks_distance(bulk, self.surrogate),
            "bulk_edge": edge,
            "n_outliers": int(outliers.size),
        }

    def summary(self) -> dict:
        """Plain-data summary: per model moments, atom at zero, quantiles; distances if both ran."""
        out = {"config": self.config.to_dict(), "seed": self.seed, "draws": self.draws}
        for m in MODELS:
            if getattr(self, m) is not None:
                out[m] = summarize(getattr(self, m))
        if self.softmax is not None and self.surrogate is not None:
            out["distances"] = self.distances()
        return out


def simulate(config: MHSAConfig, seed: int = 0, draws: int = 1, models=MODELS,
             progress: bool = False, batch_bytes: int = _BATCH_BYTES) -> SimulationResult:
    """Simulate ``draws`` independent realizations and return the spectra of ``Y Y^T``.

    Draws are computed in batches (stacked along a leading axis) of at most ``batch_bytes`` of
    working memory; eigenvalues come from ``eigvalsh`` of the smaller Gram matrix.

    Examples
    --------
    >>> res = simulate(MHSAConfig.uniform(32, 64, heads=2), seed=0, draws=2)
    >>> res.surrogate.shape                               # ascending eigenvalues of Y Y^T per draw
    (2, 32)
    >>> bool(np.allclose(res.surrogate, simulate(res.config, seed=0, draws=2).surrogate))   # seeded
    True
    """
    if not isinstance(config, MHSAConfig):
        raise TypeError(f"config must be an MHSAConfig, got {type(config).__name__}")
    seed = _check_int("seed", seed, 0)
    draws = _check_int("draws", draws, 1)
    models = tuple(models)
    if not models or any(m not in MODELS for m in models):
        raise ValueError(f"models must be a non-empty subset of {MODELS}, got {models}")
    l = config.seq_len
    per_draw = 8 * (4 * l * l + 3 * l * (sum(config.d_qk) + sum(config.d_v) + config.d_out))
    batch = max(1, min(draws, batch_bytes // per_draw))
    streams = [ss.spawn(2) for ss in np.random.SeedSequence(seed).spawn(draws)]
    eigs: dict[str, list[np.ndarray]] = {m: [] for m in models}
    with tqdm(total=draws, desc="simulate", unit="draw", disable=not progress, leave=False) as bar:
        for start in range(0, draws, batch):
            chunk = streams[start:start + batch]
            blocks = stack_blocks([draw_blocks(config, np.random.default_rng(w)) for w, _ in chunk])
            Y = simulate_outputs(config, blocks, [np.random.default_rng(n) for _, n in chunk], models)
            for m in models:
                eigs[m].append(gram_eigenvalues(Y[m]))
            bar.update(len(chunk))
    return SimulationResult(config=config, seed=seed,
                            softmax=np.concatenate(eigs["softmax"]) if "softmax" in models else None,
                            surrogate=np.concatenate(eigs["surrogate"]) if "surrogate" in models else None)
