"""Random draws of the inputs and weights of an MHSA layer, projected to the blocks the output uses.

For one draw, :func:`draw_blocks` returns per head the query block ``Q_h = X W_Q^h``, the key block
``K_h = X W_K^h`` and the value block ``V_h = X W_V^h`` (all ``l x width``), and the concatenated
output projection ``W_O`` (``D_v x d_out``, entries ``N(0, 1/D_v)``).

Convention A (orthonormal rows, ``X X^T = I_l``): for ``W`` with iid ``N(0, 1)`` entries, ``X W`` has
iid ``N(0, 1)`` entries, and blocks from independent ``W`` are independent. The blocks are therefore
drawn directly, which is exact in distribution and avoids the ``l x d`` input entirely.
Convention B (iid ``N(0, 1/d)`` inputs): ``X`` is drawn and multiplied out.

Sharing: heads in one key (value) group hold the *same* array object. Tying: ``V_h`` is ``K_h``.
Key-dependent values: ``V_h = K_h M_g`` with ``M_g`` iid ``N(0, s^2/d_qk)`` per value group ``g``.
Draw order within one generator is fixed (X, keys, queries, values, W_O), so a seed reproduces
every block bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import MHSAConfig

__all__ = ["Blocks", "draw_blocks", "stack_blocks"]


@dataclass(frozen=True)
class Blocks:
    """Per-head blocks of one draw (shapes ``(l, w)``) or of a stack of draws (``(b, l, w)``).

    Examples
    --------
    >>> b = draw_blocks(MHSAConfig.uniform(32, 64, heads=2), np.random.default_rng(0))
    >>> len(b.Q), b.Q[0].shape, b.W_O.shape
    (2, (32, 32), (64, 64))
    """

    Q: tuple[np.ndarray, ...]
    K: tuple[np.ndarray, ...]
    V: tuple[np.ndarray, ...]
    W_O: np.ndarray


def draw_blocks(config: MHSAConfig, rng: np.random.Generator) -> Blocks:
    """Draw one realization of ``(Q_h, K_h, V_h)_h`` and ``W_O`` for ``config``.

    Examples
    --------
    >>> cfg = MHSAConfig.uniform(32, 64, heads=2, key_groups=1)          # multi-query: one shared K
    >>> b = draw_blocks(cfg, np.random.default_rng(0))
    >>> b.K[0] is b.K[1], b.Q[0] is b.Q[1]
    (True, False)
    """
    l, d, H = config.seq_len, config.d_model, config.n_heads
    if config.inputs == "gaussian":
        X = rng.standard_normal((l, d)) / np.sqrt(d)
        project = lambda w: X @ rng.standard_normal((d, w))  # noqa: E731
    else:
        project = lambda w: rng.standard_normal((l, w))  # noqa: E731

    heads_of = lambda groups, g: range(g * (H // groups), (g + 1) * (H // groups))  # noqa: E731
    K = [None] * H
    for g in range(config.key_groups):
        block = project(config.d_qk[heads_of(config.key_groups, g)[0]])
        for h in heads_of(config.key_groups, g):
            K[h] = block
    Q = [project(config.d_qk[h]) for h in range(H)]
    V = [None] * H
    for g in range(config.value_groups):
        first = heads_of(config.value_groups, g)[0]
        if config.values == "tied-to-keys":
            block = K[first]
        elif config.values == "key-dependent":
            dqk, dv = config.d_qk[first], config.d_v[first]
            M = rng.standard_normal((dqk, dv)) * (config.value_key_scale / np.sqrt(dqk))
            block = K[first] @ M
        else:
            block = project(config.d_v[first])
        for h in heads_of(config.value_groups, g):
            V[h] = block
    D_v = sum(config.d_v)
    W_O = rng.standard_normal((D_v, config.d_out)) / np.sqrt(D_v)
    return Blocks(tuple(Q), tuple(K), tuple(V), W_O)


def stack_blocks(blocks: list[Blocks]) -> Blocks:
    """Stack draws along a new leading axis, keeping shared heads shared.

    Examples
    --------
    >>> b = draw_blocks(MHSAConfig.uniform(32, 64, heads=2), np.random.default_rng(0))
    >>> stack_blocks([b, b]).Q[0].shape                   # (draws, l, d_qk)
    (2, 32, 32)
    """
    def stack(per_draw: list[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
        cache: dict[tuple[int, ...], np.ndarray] = {}
        out = []
        for h in range(len(per_draw[0])):
            key = tuple(id(b[h]) for b in per_draw)
            if key not in cache:
                cache[key] = np.stack([b[h] for b in per_draw])
            out.append(cache[key])
        return tuple(out)
    return Blocks(stack([b.Q for b in blocks]), stack([b.K for b in blocks]), stack([b.V for b in blocks]),
                  np.stack([b.W_O for b in blocks]))
