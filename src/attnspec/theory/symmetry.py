"""Symmetries of the Dyson equation among identical heads, and the savings they allow.

Heads with equal widths and the same sharing pattern enter a pencil alike. An *exchange* ``pi`` of two heads
(their pencil blocks swapped in order of creation, the output blocks fixed) that preserves the block ratios,
``A_0`` and the covariance map ``eta`` maps solutions to solutions: if ``G = (Lambda - A_0 - eta(G))^{-1}``,
so does ``pi G pi^T``, and the physical solution, being unique, is invariant. Two consequences:

* unknowns: the entries of ``G`` that ``eta`` reads are constant on orbits of the group the exchanges
  generate; Newton runs on one representative per orbit (:func:`read_orbits`), the Jacobian summing the
  columns of an orbit. Their number does not grow with the number of identical heads;
* inversion: on each *class* of heads (heads connected by exchanges) the exchanges generate the full
  symmetric group. On a *unit* (a union of components of ``G``'s support closed under the group) the
  matrix ``M = Lambda - A_0 - eta(G)`` commutes with it, so with ``Q`` the normalized indicators of the
  block orbits (one column per orbit)

      M^{-1} = Q (Q^T M Q)^{-1} Q^T + sum_c (I_{n_c} - 1 1^T / n_c) (x) (D_c - C_c)^{-1},

  where for a class ``c`` of ``n_c`` heads ``D_c[i, j] = M[i_h, j_h]`` and ``C_c[i, j] = M[i_h, j_h']``
  (``h != h'``; ``i, j`` the positions of the class's blocks in the unit): vectors that sum to zero over the
  heads of a class see only ``D_c - C_c`` (their couplings to anything else are uniform over the class).
  The cost no longer grows with the number of identical heads (convention B, where every head reads the
  same ``X`` and heads cannot be merged into one block with a multiplicity, see :func:`.pencil.build_pencil`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from .pencil import Pencil, closure

__all__ = ["head_symmetries", "read_orbits", "entry_orbits", "Unit", "SymmetricInverse", "plan_units"]


def head_symmetries(pencil: Pencil) -> list[tuple[int, int, np.ndarray]]:
    """Exchanges ``(h, h', pi)`` of two heads that leave the Dyson equation of ``pencil`` invariant.

    ``pi`` (a permutation of the ``m`` pencil blocks) swaps the blocks of heads ``h`` and ``h'`` in their
    order of creation (the trie builds identical heads alike) and fixes the rest. It is kept when it
    preserves the block ratios, ``A_0`` (``A_0[pi a, pi b] = A_0[a, b]``) and the active covariance terms
    of :func:`.pencil.closure` (the terms ``(pi a, pi b, pi c, pi d, coef)``, aggregated over ``g[c, d] =
    g[d, c]``, are the terms ``(a, b, c, d, coef)``), to 1e-12 relative.

    Examples
    --------
    >>> from attnspec.config import MHSAConfig
    >>> from attnspec.theory.pencil import build_pencil
    >>> cfg = MHSAConfig.uniform(100, 100, heads=3, inputs="gaussian")
    >>> [(h, h2) for h, h2, _ in head_symmetries(build_pencil(cfg))]
    [(0, 1), (0, 2), (1, 2)]
    """
    m = pencil.size
    _, (a, b, c, d, coef) = closure(pencil)
    heads = np.array(pencil.heads)

    def table(perm):
        pc, pd = perm[c], perm[d]
        key = ((perm[a] * m + perm[b]) * m + np.minimum(pc, pd)) * m + np.maximum(pc, pd)
        keys, inv = np.unique(key, return_inverse=True)
        return keys, np.bincount(inv, weights=coef)

    ref_keys, ref_coef = table(np.arange(m))
    owned = {h: np.flatnonzero(heads == h) for h in sorted(set(pencil.heads)) if h >= 0}
    hs = list(owned)
    found = []
    for i, h in enumerate(hs):
        for h2 in hs[i + 1:]:
            x, y = owned[h], owned[h2]
            if x.size != y.size:
                continue
            perm = np.arange(m)
            perm[x], perm[y] = y, x
            if not (np.allclose(pencil.ratios[perm], pencil.ratios, rtol=1e-12, atol=0)
                    and np.array_equal(pencil.a0[np.ix_(perm, perm)], pencil.a0)):
                continue
            keys, cf = table(perm)
            if np.array_equal(keys, ref_keys) and np.allclose(cf, ref_coef, rtol=1e-12, atol=0):
                found.append((h, h2, perm))
    return found


def read_orbits(ukeys: np.ndarray, m: int, exchanges: list) -> tuple[np.ndarray, np.ndarray]:
    """``(orbit, reps)`` of the read entries ``ukeys = min(c, d) m + max(c, d)`` (sorted) under the group the
    exchanges generate: the orbit of every entry (numbered by first member) and each orbit's first member.

    Examples
    --------
    >>> from attnspec.config import MHSAConfig
    >>> from attnspec.theory.pencil import build_pencil, closure
    >>> pencil = build_pencil(MHSAConfig.uniform(64, 64, heads=2, inputs="gaussian"))   # two heads coupled by X
    >>> comp, (a, b, c, d, coef) = closure(pencil)
    >>> keys = np.unique(np.minimum(c, d) * pencil.size + np.maximum(c, d))
    >>> orbit, reps = read_orbits(keys, pencil.size, head_symmetries(pencil))
    >>> keys.size, reps.size                              # 31 read entries, 17 unknowns
    (31, 17)
    """
    n = ukeys.size
    if not exchanges:
        return np.arange(n), np.arange(n)
    c, d = ukeys // m, ukeys % m
    dst = []
    for _, _, p in exchanges:
        img = np.minimum(p[c], p[d]) * m + np.maximum(p[c], p[d])
        j = np.minimum(np.searchsorted(ukeys, img), n - 1)
        if not np.array_equal(ukeys[j], img):
            raise ValueError("a head exchange maps a read entry of G outside the read entries (not a symmetry)")
        dst.append(j)
    return _label_orbits(n, np.tile(np.arange(n), len(exchanges)), np.concatenate(dst))



def _label_orbits(n: int, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Orbits of ``n`` items linked by ``src[i] ~ dst[i]``, numbered by first member; and the first members."""
    _, lab = connected_components(coo_matrix((np.ones(src.size), (src, dst)), shape=(n, n)), directed=False)
    _, first = np.unique(lab, return_index=True)
    order = np.argsort(first)
    relabel = np.empty_like(order)
    relabel[order] = np.arange(order.size)
    return relabel[lab], first[order]


def entry_orbits(where: np.ndarray, K: int, exchanges: list) -> tuple[np.ndarray, np.ndarray]:
    """``(cmap, first)``: for the compact layout ``where`` of ``G`` (``K`` entries inside components, ``K``
    itself the zero slot), the orbit of every compact index under the exchanges (``cmap[K]`` = the number
    of orbits, the new zero slot) and each orbit's first compact index. ``G`` and ``M`` are constant on
    orbits, so one value per orbit is stored.

    Examples
    --------
    >>> where = np.array([[0, 2], [2, 1]])                # entries 0 and 1 inside, 2 = the zero slot
    >>> entry_orbits(where, 2, [])                        # no exchanges: every entry its own orbit
    (array([0, 1, 2]), array([0, 1]))
    """
    if not exchanges:
        return np.arange(K + 1), np.arange(K)
    x, y = np.nonzero(where < K)
    src = where[x, y]
    dst = []
    for _, _, p in exchanges:
        img = where[p[x], p[y]]
        if np.any(img >= K):
            raise ValueError("a head exchange maps an entry of G's support outside it (not a symmetry)")
        dst.append(img)
    lab, first = _label_orbits(K, np.tile(src, len(exchanges)), np.concatenate(dst))
    return np.append(lab, first.size), first

@dataclass
class Unit:
    """A union of components of ``G``'s support closed under head exchanges, inverted by symmetry (module
    docstring). Local indices refer to ``blocks``; ``classes`` holds, per class of heads, the local positions
    ``i0`` (first head) and ``i1`` (second head) and the scatter ``(rows, cols, weights, bi, bj)`` of
    ``(I - 1 1^T / n_c) (x) B_c``.

    Examples
    --------
    >>> from attnspec.config import MHSAConfig
    >>> from attnspec.theory import DysonSolver, build_pencil
    >>> solver = DysonSolver(build_pencil(MHSAConfig.uniform(48, 48, heads=3, inputs="gaussian")))
    >>> [u.blocks.size for u in solver.units][:3]         # the units the solver inverts by symmetry
    [6, 12, 6]
    """
    blocks: np.ndarray
    Q: np.ndarray
    classes: list

    def small_matrices(self, where: np.ndarray, K: int) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """The unit's small matrices ``(s, gather, scatter)`` for the compact layout ``where`` (``K`` entries
        and the zero slot; several entries may share an index, one value per orbit, :func:`entry_orbits`):
        the ``s x s`` matrix is ``M[:, :K + 1] @ gather`` (``Q^T M Q``, or ``D_c - C_c``), and its inverse adds
        ``inverse @ scatter`` to compact ``G``."""
        ub, Q, r = self.blocks, self.Q, self.Q.shape[1]
        entries = where[ub[:, None], ub[None, :]]
        li, lj = np.nonzero(entries < K)
        idx = entries[li, lj]
        _, first = np.unique(idx, return_index=True)
        outer = (Q[li, :, None] * Q[lj, None, :]).reshape(li.size, r * r)
        gather = np.zeros((K + 1, r * r))
        np.add.at(gather, idx, outer)                                    # Q^T M Q from M's entries
        scatter = np.zeros((r * r, K + 1))
        scatter[:, idx[first]] = outer[first].T                          # G = Q (Q^T M Q)^{-1} Q^T, once per index
        mats = [(r, gather, scatter)]
        pair = {(int(li[t]), int(lj[t])): int(idx[t]) for t in first}
        for i0, i1, rows, cols, wts, bi, bj in self.classes:
            k = i0.size
            gather = np.zeros((K + 1, k * k))
            flat = np.arange(k * k)
            np.add.at(gather, (entries[i0[:, None], i0[None, :]].ravel(), flat), 1.0)      # D_c
            np.add.at(gather, (entries[i0[:, None], i1[None, :]].ravel(), flat), -1.0)     # - C_c
            gather[K] = 0.0
            scatter = np.zeros((k * k, K + 1))
            for x, y, w, a, b in zip(rows, cols, wts, bi, bj):
                j = pair.get((int(x), int(y)))        # written once per index: at its first entry
                if j is not None:
                    scatter[a * k + b, j] += w
            mats.append((k, gather, scatter))
        return mats


class SymmetricInverse:
    """The entries of ``G = M^{-1}`` on every unit at once: all small matrices (:meth:`Unit.small_matrices`)
    of one size are gathered by one product with compact ``M``, inverted in one batch (closed forms for sizes
    1 and 2) and scattered back by one product.

    Examples
    --------
    >>> from attnspec.config import MHSAConfig
    >>> from attnspec.theory.pencil import build_pencil, closure
    >>> pencil = build_pencil(MHSAConfig.uniform(64, 64, heads=2, inputs="gaussian"))   # two heads coupled by X
    >>> from attnspec.theory import DysonSolver
    >>> isinstance(DysonSolver(pencil).sym_inverse, SymmetricInverse)   # built by the solver from plan_units
    True
    """

    def __init__(self, units: list[Unit], where: np.ndarray, K: int):
        by_size: dict[int, list] = {}
        for unit in units:
            for s, gather, scatter in unit.small_matrices(where, K):
                by_size.setdefault(s, []).append((gather, scatter))
        scat = np.concatenate([sc for mats in by_size.values() for _, sc in mats], axis=0)
        self.out = np.flatnonzero(np.any(scat != 0, axis=0))
        self.plan = []
        for s, mats in by_size.items():
            gather = np.concatenate([g for g, _ in mats], axis=1)
            cols = np.flatnonzero(np.any(gather != 0, axis=1))
            scatter = np.concatenate([sc for _, sc in mats], axis=0)[:, self.out]
            self.plan.append((s, len(mats), cols, gather[cols], scatter))

    def __call__(self, M: np.ndarray) -> np.ndarray:
        """``G``'s entries at ``self.out`` from compact ``M`` (shape ``(n, K + 1)``)."""
        n = M.shape[0]
        G = np.zeros((n, self.out.size), dtype=M.dtype)
        for s, nm, cols, gather, scatter in self.plan:
            A = M[:, cols] @ gather
            if s == 1:
                inv = 1.0 / A
            elif s == 2:
                q = A.reshape(n, nm, 4)
                det = q[..., 0] * q[..., 3] - q[..., 1] * q[..., 2]
                inv = (np.stack([q[..., 3], -q[..., 1], -q[..., 2], q[..., 0]], axis=-1) / det[..., None]).reshape(n, -1)
            else:
                inv = np.linalg.inv(A.reshape(n, nm, s, s)).reshape(n, -1)
            G += inv @ scatter
        return G


def _classes(pencil: Pencil, exchanges: list) -> tuple[dict, list[list[int]]]:
    """``(owned, classes)``: each head's blocks in order of creation; the heads connected by exchanges."""
    heads = np.array(pencil.heads)
    owned = {h: np.flatnonzero(heads == h) for h in sorted(set(pencil.heads)) if h >= 0}
    idx = {h: i for i, h in enumerate(owned)}
    n = len(owned)
    src = np.array([idx[h] for h, _, _ in exchanges], dtype=int)
    dst = np.array([idx[h2] for _, h2, _ in exchanges], dtype=int)
    _, lab = connected_components(coo_matrix((np.ones(src.size), (src, dst)), shape=(n, n)), directed=False)
    hs = list(owned)
    groups = [[hs[i] for i in np.flatnonzero(lab == k)] for k in range(lab.max() + 1)] if n else []
    return owned, [g for g in groups if len(g) > 1]


def _unit(ub: np.ndarray, borb: np.ndarray, owned: dict, classes: list[list[int]]) -> Unit:
    """The :class:`Unit` on blocks ``ub`` (``borb``: each block's orbit label)."""
    loc = {int(b): i for i, b in enumerate(ub)}
    orbits, lab, counts = np.unique(borb[ub], return_inverse=True, return_counts=True)
    Q = np.zeros((ub.size, orbits.size))
    Q[np.arange(ub.size), lab] = 1.0 / np.sqrt(counts[lab])
    parts = []
    for cls in classes:
        pos = np.array([i for i, blk in enumerate(owned[cls[0]]) if int(blk) in loc], dtype=int)
        if pos.size == 0:
            continue
        L = np.array([[loc[int(owned[h][i])] for i in pos] for h in cls])       # (n_c, k_c) local indices
        n_c, k_c = L.shape
        hh, hk, ii, jj = np.meshgrid(np.arange(n_c), np.arange(n_c), np.arange(k_c), np.arange(k_c), indexing="ij")
        wts = (hh == hk).astype(float) - 1.0 / n_c
        parts.append((L[0], L[1], L[hh, ii].ravel(), L[hk, jj].ravel(), wts.ravel(), ii.ravel(), jj.ravel()))
    return Unit(blocks=ub, Q=Q, classes=parts)


def plan_units(pencil: Pencil, comp: np.ndarray, exchanges: list) -> tuple[list[Unit], np.ndarray]:
    """``(units, in_unit)``: the symmetric units of ``G``'s support (components ``comp``) under the
    exchanges, unbound (see :meth:`Unit.bind`), and per component whether it belongs to one.

    Examples
    --------
    >>> from attnspec.config import MHSAConfig
    >>> from attnspec.theory.pencil import build_pencil, closure
    >>> pencil = build_pencil(MHSAConfig.uniform(64, 64, heads=2, inputs="gaussian"))   # two heads coupled by X
    >>> units, in_unit = plan_units(pencil, closure(pencil)[0], head_symmetries(pencil))
    >>> len(units), int(in_unit.sum())
    (5, 9)
    """
    m = pencil.size
    ncomp = int(comp.max()) + 1
    owned, classes = _classes(pencil, exchanges)
    borb = np.arange(m)                       # orbit label of a block: its counterpart in the class's first head
    for cls in classes:
        for h in cls[1:]:
            borb[owned[h]] = owned[cls[0]]
    graph = coo_matrix((np.ones(m), (comp, comp[borb])), shape=(ncomp, ncomp))
    _, ulab = connected_components(graph, directed=False)
    units, in_unit = [], np.zeros(ncomp, dtype=bool)
    for k in range(int(ulab.max()) + 1):
        ub = np.flatnonzero(ulab[comp] == k)
        if np.all(borb[ub] == ub):
            continue
        units.append(_unit(ub, borb, owned, classes))
        in_unit[ulab == k] = True
    return units, in_unit
