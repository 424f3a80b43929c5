"""Hermitian linear pencils (linearization trick) for MHSA configurations.

Every target of docs/theory.md ("Model and normalization", "Sharing and within-head dependence") is
``Y = sum_j c_j F_j1 F_j2 ... F_jk``: a sum of products of independent rectangular Gaussian blocks. Blocks are
normalized to iid ``N(0, 1/d)`` entries; a block of size ``n x m`` is described by its aspect ratios
``(n/d, m/d)``; every other scale goes into coefficients.

Linearization (non-Hermitian first): the monomials are read right to left and merged into a trie, so
common right factors (``V_h W_O^h``) share nodes. Each trie node ``n`` with parent ``p`` carries the
vector ``y_n = F y_p`` (root: the input ``x``); the last (left-most) factor maps a node into the
output. This gives ``Y = -u Q^{-1} v`` (+ a linear part ``D`` for degree-one monomials) with
``Q = -I + (strictly triangular Gaussian blocks)``. The Hermitian pencil is then

    L = [[0, D, 0, u], [D^T, 0, v^T, 0], [0, v, 0, Q], [u^T, 0, Q^T, 0]]

on blocks ``(out1 = rows of Y, out2 = columns of Y, a = equation copies, b = variable copies)``; its
Schur complement is the Hermitization ``[[0, Y], [Y^T, 0]]``, so the ``(out1, out1)`` block of
``(diag(w, w, 0, ..., 0) - L)^{-1}`` is ``w (w^2 - Y Y^T)^{-1}``.

Shared weights (grouped keys/values) are the *same* Gaussian block placed in several heads; tying
``W_V = W_K`` is one block in two roles (key and value). ``reduce=True`` replaces ``n`` identical,
mutually uncoupled heads by one representative whose contributions to the output blocks carry weight
``n``; :func:`build_pencil` only does that after checking (on the full pencil) that the Dyson equation
couples no two heads, which holds for every convention-A configuration (sharing across heads couples
only entries of ``G`` that stay zero).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from ..config import MHSAConfig

__all__ = ["GaussianBlock", "Factor", "Monomial", "Placement", "Pencil", "pencil_from_monomials",
           "build_pencil", "config_monomials", "closure", "heads_coupled"]


@dataclass(frozen=True)
class GaussianBlock:
    """An iid ``N(0, 1/d)`` block of size ``(rows d) x (cols d)``.

    Examples
    --------
    >>> GaussianBlock("W", rows=1.0, cols=0.5)            # a d x d/2 block
    GaussianBlock(name='W', rows=1.0, cols=0.5)
    """
    name: str
    rows: float
    cols: float


@dataclass(frozen=True)
class Factor:
    """One factor of a monomial: ``coef * block`` (or its transpose).

    Examples
    --------
    >>> Factor("W", transpose=True)                       # W^T
    Factor(block='W', transpose=True, coef=1.0)
    """
    block: str
    transpose: bool = False
    coef: float = 1.0


@dataclass(frozen=True)
class Monomial:
    """``coef * F_1 F_2 ... F_k`` belonging to head ``head`` (-1: none).

    Examples
    --------
    >>> Monomial(2.0, (Factor("A"), Factor("B")), head=0)   # 2 A B in head 0
    Monomial(coef=2.0, factors=(Factor(block='A', transpose=False, coef=1.0), Factor(block='B', transpose=False, coef=1.0)), head=0)
    """
    coef: float
    factors: tuple[Factor, ...]
    head: int = -1


@dataclass(frozen=True)
class Placement:
    """Gaussian block ``block`` (untransposed) at pencil position ``(row, col)`` with ``coef``;
    the Hermitian partner ``coef * block^T`` sits at ``(col, row)``.

    Examples
    --------
    >>> p = pencil_from_monomials([Monomial(1.0, (Factor("X"),))], {"X": GaussianBlock("X", 1.0, 0.5)})
    >>> p.placements
    (Placement(block='X', row=0, col=1, coef=1.0, head=-1),)
    """
    block: str
    row: int
    col: int
    coef: float
    head: int = -1


@dataclass(frozen=True)
class Pencil:
    """A Hermitian linear pencil ``L = A_0 + sum_p coef_p (X_p at (row, col) + X_p^T at (col, row))``.

    ``ratios[a]`` is the size of pencil block ``a`` over ``d``; ``out = (out1, out2)``; ``a0`` holds
    the scalar multiples of the identity; ``multiplicity[h]`` weights head ``h``'s contributions to
    the covariance map on the output blocks (identical-head reduction).

    Examples
    --------
    >>> p = pencil_from_monomials([Monomial(1.0, (Factor("X"),))], {"X": GaussianBlock("X", 1.0, 0.5)})
    >>> p.size, p.labels, round(p.norm_bound(), 4)        # ||X|| <= 1 + sqrt(1/2)
    (2, ('out1', 'out2'), 1.7071)
    """
    labels: tuple[str, ...]
    ratios: np.ndarray
    a0: np.ndarray
    blocks: dict
    placements: tuple[Placement, ...]
    heads: tuple[int, ...]          # head owning each pencil block (-1: output blocks)
    multiplicity: dict = field(default_factory=dict)
    monomials: tuple[Monomial, ...] = ()
    description: str = ""

    out: tuple[int, int] = (0, 1)

    @property
    def size(self) -> int:
        return len(self.labels)

    def covariance_terms(self) -> tuple[np.ndarray, ...]:
        """Terms ``eta(G)[a, b] += coef * g[c, d]`` of the covariance map.

        For two placements ``p, q`` of the same block ``X`` (``n x m``): ``X`` at ``(a, c)`` meets
        ``X^T`` at ``(c', a')`` giving ``eta[a, a'] += k_p k_q (m/d) g[c, c']``, and ``X^T`` at
        ``(c, a)`` meets ``X`` at ``(a', c')`` giving ``eta[c, c'] += k_p k_q (n/d) g[a, a']``
        (from ``E[X M X^T] = tr(M)/d I``; ``E[X M X]`` is negligible).
        """
        by_block: dict[str, list[Placement]] = {}
        for p in self.placements:
            by_block.setdefault(p.block, []).append(p)
        out = set(self.out)
        rows = []
        for name, ps in by_block.items():
            blk = self.blocks[name]
            for p in ps:
                for q in ps:
                    k = p.coef * q.coef
                    wa = wb = 1.0
                    if p.row in out and q.row in out and p.head == q.head:
                        wa = self.multiplicity.get(p.head, 1)
                    if p.col in out and q.col in out and p.head == q.head:
                        wb = self.multiplicity.get(p.head, 1)
                    rows.append((p.row, q.row, p.col, q.col, k * blk.cols * wa))
                    rows.append((p.col, q.col, p.row, q.row, k * blk.rows * wb))
        arr = np.array(rows, dtype=float).reshape(-1, 5)
        a, b, c, d = (arr[:, i].astype(int) for i in range(4))
        return a, b, c, d, arr[:, 4]

    def norm_bound(self) -> float:
        """Upper bound on ``||Y||`` in the limit: ``sum_j |c_j| prod_i |k_i| (sqrt(rows_i) + sqrt(cols_i))``
        (weighted by head multiplicity). The right edge is at most its square."""
        total = 0.0
        for mono in self.monomials:
            t = abs(mono.coef)
            for f in mono.factors:
                b = self.blocks[f.block]
                t *= abs(f.coef) * (math.sqrt(b.rows) + math.sqrt(b.cols))
            total += t * self.multiplicity.get(mono.head, 1)
        return total


def closure(pencil: Pencil) -> tuple[np.ndarray, tuple]:
    """Connected components (``comp[a]``) of ``G``'s support and the covariance terms that stay active.

    Start from the pattern of ``A_0`` and the diagonal; add every ``eta[a, b]`` whose read entry
    ``g[c, d]`` lies inside a component; repeat. Returns ``(comp, (a, b, c, d, coef))`` restricted to the
    terms whose read entry can be non-zero.

    Examples
    --------
    >>> from attnspec.config import MHSAConfig
    >>> comp, terms = closure(build_pencil(MHSAConfig.uniform(64, 64, heads=2)))
    >>> comp.shape, len(terms)
    ((8,), 5)
    """
    m = pencil.size
    a, b, c, d, coef = pencil.covariance_terms()
    ea, eb = np.nonzero(pencil.a0)
    edges_a, edges_b = list(ea), list(eb)
    while True:
        graph = coo_matrix((np.ones(len(edges_a)), (edges_a, edges_b)), shape=(m, m))
        _, comp = connected_components(graph, directed=False)
        active = comp[c] == comp[d]
        new = active & (comp[a] != comp[b])
        if not new.any():
            break
        edges_a += list(a[new])
        edges_b += list(b[new])
    return comp, (a[active], b[active], c[active], d[active], coef[active])


def heads_coupled(pencil: Pencil) -> bool:
    """Whether some component of ``G``'s support (:func:`closure`) holds pencil blocks of two heads.

    Examples
    --------
    >>> from attnspec.config import MHSAConfig
    >>> heads_coupled(build_pencil(MHSAConfig.uniform(64, 64, heads=2)))
    False
    """
    comp, _ = closure(pencil)
    heads = np.array(pencil.heads)
    return any(len(set(heads[(comp == k) & (heads >= 0)])) > 1 for k in np.unique(comp))


def pencil_from_monomials(monomials: list[Monomial], blocks: dict[str, GaussianBlock],
                          multiplicity: dict[int, int] | None = None, description: str = "") -> Pencil:
    """Linearize ``Y = sum_j c_j F_j1 ... F_jk`` into a Hermitian pencil (see module docstring).

    The trie merges right factors ``(block, transpose, coef, head)`` shared by several monomials;
    nodes of different heads are never merged, so that each pencil block belongs to one head.

    Examples
    --------
    >>> blocks = {"A": GaussianBlock("A", 1.0, 1.0), "B": GaussianBlock("B", 1.0, 1.0)}
    >>> pencil_from_monomials([Monomial(1.0, (Factor("A"), Factor("B")))], blocks).size   # A B: two trie levels
    4
    """
    def shape(f: Factor) -> tuple[float, float]:
        b = blocks[f.block]
        return (b.cols, b.rows) if f.transpose else (b.rows, b.cols)

    if not monomials:
        raise ValueError("need at least one monomial")
    out_rows = shape(monomials[0].factors[0])[0]
    out_cols = shape(monomials[0].factors[-1])[1]
    labels, ratios, heads = ["out1", "out2"], [out_rows, out_cols], [-1, -1]
    nodes: dict[tuple, int] = {}   # trie key -> node id; node id -> (a index, b index)
    node_ab: list[tuple[int, int]] = []
    placements: list[Placement] = []

    def place(f: Factor, row: int, col: int, coef: float, head: int) -> None:
        if f.transpose:   # F = X^T at (row, col)  <=>  X at (col, row)
            row, col = col, row
        placements.append(Placement(f.block, row, col, coef * f.coef, head))

    for mono in monomials:
        if not mono.factors:
            raise ValueError("a monomial needs at least one factor")
        prev_cols = None
        for f in mono.factors:
            r, c = shape(f)
            if prev_cols is not None and not math.isclose(prev_cols, r, rel_tol=1e-12):
                raise ValueError(f"factor {f.block} does not chain: {prev_cols} vs {r}")
            prev_cols = c
        if not (math.isclose(shape(mono.factors[0])[0], out_rows) and math.isclose(shape(mono.factors[-1])[1], out_cols)):
            raise ValueError("all monomials must have the shape of Y")
        parent_key: tuple = ()
        parent_col = 1   # column-space block of the root: out2
        for f in reversed(mono.factors[1:]):
            key = parent_key + ((f.block, f.transpose, f.coef, mono.head),)
            if key not in nodes:
                nodes[key] = len(node_ab)
                size = shape(f)[0]
                a, b = len(labels), len(labels) + 1
                labels += [f"a{len(node_ab)}:{f.block}{'T' if f.transpose else ''}",
                           f"b{len(node_ab)}:{f.block}{'T' if f.transpose else ''}"]
                ratios += [size, size]
                heads += [mono.head, mono.head]
                node_ab.append((a, b))
                place(f, a, parent_col, 1.0, mono.head)
            parent_key = key
            parent_col = node_ab[nodes[key]][1]
        place(mono.factors[0], 0, parent_col, mono.coef, mono.head)
    m = len(labels)
    a0 = np.zeros((m, m))
    for a, b in node_ab:
        a0[a, b] = a0[b, a] = -1.0
    return Pencil(labels=tuple(labels), ratios=np.array(ratios, dtype=float), a0=a0, blocks=dict(blocks),
                  placements=tuple(placements), heads=tuple(heads), multiplicity=dict(multiplicity or {}),
                  monomials=tuple(monomials), description=description)


def config_monomials(config: MHSAConfig, heads: list[int] | None = None) -> tuple[list[Monomial], dict[str, GaussianBlock]]:
    """The Gaussian-equivalent target of ``config`` as monomials in ``N(0, 1/d)`` blocks.

    Convention A (``X W`` is an iid Gaussian ``l x width`` block, ``Q_h = sqrt(d) Qt_h`` etc.)::

        Y_att = (beta/sqrt(psi gamma)) Qt Kt^T + (alpha/sqrt(gamma)) Zt
        Y     = sum_h (beta/sqrt(gamma omega psi_h Phi)) Qt_h Kt_h^T Vt_h Wt_h + (alpha/sqrt(gamma omega Phi)) Zt_h Vt_h Wt_h

    with ``Phi = sum_h phi_h`` (``W_O`` fan-in). Convention B replaces ``Qt_h`` by ``X Wt_Q^h`` (``X``
    iid ``N(0, 1/d)``, ``l x d``) and likewise for keys and values. Keys use block ``K{key_group}``,
    values ``V{value_group}``; tying uses ``K`` as the value block, key-dependent values
    ``V_h = (s/sqrt(psi_h)) Kt_h Mt_{value group}``. ``heads`` restricts to a subset of heads
    (the coefficients keep the full-layer normalization).

    Examples
    --------
    >>> from attnspec.config import MHSAConfig
    >>> monomials, blocks = config_monomials(MHSAConfig.uniform(64, 64, heads=2))
    >>> len(monomials), sorted(blocks)[:4]
    (4, ['K0', 'K1', 'Q0', 'Q1'])
    """
    g, om, beta = config.gamma, config.omega, config.beta
    alpha = math.sqrt(max(config.alpha2, 0.0))
    psi, phi = config.psi, config.phi
    Phi = sum(phi)
    B = config.inputs == "gaussian"
    blocks: dict[str, GaussianBlock] = {}

    def blk(name: str, r: float, c: float) -> str:
        blocks[name] = GaussianBlock(name, r, c)
        return name

    def gauss_lw(kind: str, idx: int, width: float) -> list[Factor]:
        """An l x width Gaussian N(0,1) matrix in units of sqrt(d): Qt (A) or X Wt (B)."""
        if B:
            return [Factor(blk("X", g, 1.0)), Factor(blk(f"W{kind}{idx}", 1.0, width))]
        return [Factor(blk(f"{kind}{idx}", g, width))]

    def transpose(fs: list[Factor]) -> list[Factor]:
        return [Factor(f.block, not f.transpose, f.coef) for f in reversed(fs)]

    if config.target == "attention":
        q = gauss_lw("Q", 0, psi[0])
        k = gauss_lw("K", 0, psi[0])
        monos = [Monomial(beta / math.sqrt(psi[0] * g), tuple(q + transpose(k)), 0)]
        if alpha > 0:
            monos.append(Monomial(alpha / math.sqrt(g), (Factor(blk("Z0", g, g)),), 0))
        return monos, blocks

    monos = []
    for h in (range(config.n_heads) if heads is None else heads):
        kg, vg = config.key_group(h), config.value_group(h)
        k = gauss_lw("K", kg, psi[h])
        if config.values == "independent":
            v = gauss_lw("V", vg, phi[h])
        elif config.values == "tied-to-keys":
            v = list(k)
        else:
            s = config.value_key_scale / math.sqrt(psi[h])
            v = list(k) + [Factor(blk(f"M{vg}", psi[h], phi[h]), coef=s)]
        w = [Factor(blk(f"WO{h}", phi[h], om))]
        q = gauss_lw("Q", h, psi[h])
        monos.append(Monomial(beta / math.sqrt(g * om * psi[h] * Phi), tuple(q + transpose(k) + v + w), h))
        if alpha > 0:
            monos.append(Monomial(alpha / math.sqrt(g * om * Phi), tuple([Factor(blk(f"Z{h}", g, g))] + v + w), h))
    return monos, blocks


def _head_class_key(config: MHSAConfig, h: int) -> tuple:
    return (config.d_qk[h], config.d_v[h])


def build_pencil(config: MHSAConfig, reduce: bool = True) -> Pencil:
    """The Hermitian linear pencil of ``config``'s Gaussian-equivalent target.

    With ``reduce=True`` heads with equal widths are merged into one representative with
    multiplicity, provided the full pencil's Dyson equation couples no two heads (checked; always
    true in convention A, never with several heads in convention B, where all heads share ``X``).
    Coupled identical heads stay in the pencil; the solver collapses them by their exchange symmetry
    (:mod:`attnspec.theory.symmetry`), so their cost does not grow with their number either.

    Examples
    --------
    >>> from attnspec.config import MHSAConfig
    >>> [build_pencil(MHSAConfig.uniform(100, 100, heads=4, inputs=i)).size for i in ("orthonormal", "gaussian")]
    [8, 50]
    """
    monos, blocks = config_monomials(config)
    desc = config.describe()
    full = pencil_from_monomials(monos, blocks, description=desc)
    if not reduce or config.target == "attention" or config.n_heads == 1:
        return full
    if heads_coupled(full):
        return full
    classes: dict[tuple, list[int]] = {}
    for h in range(config.n_heads):
        classes.setdefault(_head_class_key(config, h), []).append(h)
    if len(classes) == config.n_heads:
        return full
    reps = [hs[0] for hs in classes.values()]
    mult = {hs[0]: len(hs) for hs in classes.values()}
    # Representatives must not share blocks with each other (sharing is irrelevant once heads are
    # uncoupled): rename every block per head.
    r_monos, r_blocks = [], {}
    for mono in (m for m in monos if m.head in reps):
        fs = []
        for f in mono.factors:
            name = f"{f.block}@h{mono.head}"
            b = blocks[f.block]
            r_blocks[name] = GaussianBlock(name, b.rows, b.cols)
            fs.append(Factor(name, f.transpose, f.coef))
        r_monos.append(Monomial(mono.coef, tuple(fs), mono.head))
    return pencil_from_monomials(r_monos, r_blocks, multiplicity=mult,
                                 description=desc + f" [reduced: {len(reps)} head class(es)]")
