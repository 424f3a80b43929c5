"""Operator-valued Dyson equation of a Hermitian linear pencil, solved by Newton with continuation.

For a pencil ``L = A_0 + sum_p k_p (X_p + X_p^T)`` (see :mod:`attnspec.theory.pencil`) with blocks of
sizes ``r_a d``, the block-normalized expected resolvent ``g[a, b] = (1/n_a) tr E[(Lambda - L)^{-1}]_{ab}``
solves, in the limit ``d -> inf``,

    G = (Lambda(w) - A_0 - eta(G))^{-1},     eta(G)[a, b] = sum_terms coef * g[c, d],

with ``Lambda(w) = w`` on the two output blocks and ``0`` elsewhere. ``G`` is complex symmetric and
its support is confined to the connected components of the *closure* pattern (start from ``A_0`` and the
diagonal, add every ``eta[a, b]`` that reads an entry inside a component, repeat; :func:`.pencil.closure`),
so ``G`` is inverted component by component and only the entries that ``eta`` reads are unknowns. Identical
heads that the equation couples (convention B) are exchanged by symmetries of the equation
(:mod:`attnspec.theory.symmetry`): then one unknown per orbit, one stored value per orbit of ``G``'s entries,
and the components they span inverted by symmetry, so the cost does not grow with the number of such heads.

The unknowns ``u`` solve ``F(u) = u - G(u)[reads] = 0``; the Jacobian is ``I - J`` with
``J[j, k] = sum_{t: reads k} coef_t G[c_j, a_t] G[b_t, d_j]`` (from ``dG = G d(eta) G``). All spectral
points are processed at once. A path ``z(s)``, ``s: 0 -> 1``, starts far from the spectrum (initial guess
``(Lambda - A_0)^{-1}``) and is followed level by level; a level where some points fail is bisected
for those points only, then a damped fixed-point iteration is tried; what still fails raises
:class:`LawSolverError` with the points and residuals. The physical branch is enforced: for
``Im z > 0`` the scalar transform ``g(z) = G[out1, out1] / w`` (``w = sqrt z``) must have ``Im g <= 0``.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
from scipy.sparse import coo_matrix, csr_matrix
from scipy.sparse.csgraph import connected_components

from .pencil import Pencil, closure
from .symmetry import SymmetricInverse, entry_orbits, head_symmetries, plan_units, read_orbits

__all__ = ["LawSolverError", "DysonSolver"]


class LawSolverError(RuntimeError):
    """The Dyson equation did not converge. ``z`` and ``residuals`` hold the failing points.

    Examples
    --------
    >>> import numpy as np
    >>> err = LawSolverError("no convergence", np.array([1 + 1e-9j]), np.array([1e-3]))
    >>> str(err)
    'no convergence: 1 point(s) failed: z=1+1e-09j (residual 1.00e-03)'
    """

    def __init__(self, message: str, z: np.ndarray, residuals: np.ndarray):
        self.z = np.asarray(z)
        self.residuals = np.asarray(residuals)
        order = np.argsort(-self.residuals)[:6]
        pts = ", ".join(f"z={self.z[i].real:.6g}{self.z[i].imag:+.3g}j (residual {self.residuals[i]:.2e})" for i in order)
        more = f" and {self.z.size - order.size} more" if self.z.size > order.size else ""
        super().__init__(f"{message}: {self.z.size} point(s) failed: {pts}{more}")


class DysonSolver:
    """Vectorized Newton solver for one pencil's Dyson equation (see module docstring).

    Internally ``G`` is stored compactly: only the entries inside the components of its support (one per
    orbit of head exchanges), as an array ``(n_points, K + 1)`` whose last column is the constant 0 (entries
    outside). ``symmetric=False`` ignores the exchanges and solves the full equation (for checks).

    Examples
    --------
    >>> import numpy as np
    >>> from attnspec.config import MHSAConfig
    >>> from attnspec.theory import build_pencil, closed_forms
    >>> solver = DysonSolver(build_pencil(MHSAConfig.uniform(64, 64, target="attention")))
    >>> g, _ = solver.solve_near_axis(np.array([30.0]), 1.0, y0=1.0)     # g(30 + 1i)
    >>> bool(np.isclose(g[0], closed_forms.attention_stieltjes([30 + 1j], 1.0, 1.0, 1.0)[0]))
    True
    """

    def __init__(self, pencil: Pencil, tol: float = 1e-12, maxit: int = 40, max_depth: int = 12,
                 fixed_point_iters: int = 3000, damping: float = 0.5, jump: float = 0.5, level_ratio: float = 8.0,
                 symmetric: bool = True):
        self.pencil, self.tol, self.maxit, self.max_depth = pencil, tol, maxit, max_depth
        self.jump, self.level_ratio = jump, level_ratio
        self.level_tol = 1e-7       # Newton tolerance on intermediate continuation levels
        self.accept_tol = max(1e-9, 10 * tol)   # largest residual accepted at the end of a path
        self.fixed_point_iters, self.damping = fixed_point_iters, damping
        m = self.m = pencil.size
        comp, (a, b, c, d, coef) = closure(pencil)
        self.comp = comp
        exchanges = head_symmetries(pencil) if symmetric else []
        self.units, in_unit = plan_units(pencil, comp, exchanges) if exchanges else ([], np.zeros(comp.max() + 1, bool))
        by_size: dict[int, list[np.ndarray]] = {}
        for k in np.unique(comp):
            idx = np.flatnonzero(comp == k)
            by_size.setdefault((idx.size, bool(in_unit[k])), []).append(idx)
        # compact index of every in-component entry (i, j); K = their number; K is the zero slot
        where = np.full((m, m), -1, dtype=int)
        self.groups = []                       # (size, n_comp, compact indices (n_comp, s, s)) outside units
        K = 0
        for (size, sym), comps in by_size.items():
            comps = np.array(comps)
            nc = comps.shape[0]
            ci = K + np.arange(nc * size * size).reshape(nc, size, size)
            where[comps[:, :, None], comps[:, None, :]] = ci
            if not sym:
                self.groups.append((size, nc, ci.reshape(-1)))
            K += nc * size * size
        where[where < 0] = K
        keys = np.minimum(c, d) * m + np.maximum(c, d)
        ukeys, tk = np.unique(keys, return_inverse=True)
        # unknowns: one per orbit of read entries under the head exchanges that leave the equation
        # invariant (the solution is constant on orbits); without symmetries, one per read entry
        orbit, reps = read_orbits(ukeys, m, exchanges)
        tk = orbit[tk]
        self.nu = reps.size
        # eta on full positions, then one column per orbit of positions (G, M are constant on orbits)
        upos, tp = np.unique(where[a, b], return_inverse=True)
        E = np.zeros((self.nu, upos.size))
        np.add.at(E, (tk, tp), coef)
        cmap, first = entry_orbits(where, K, exchanges)
        keep = np.isin(upos, first)
        self.i_eta, self.E = cmap[upos[keep]], E[:, keep]
        where, K = cmap[where], first.size
        self.groups = [(size, nc, cmap[ci]) for size, nc, ci in self.groups]
        self.K, self.where = K, where
        self.sym_inverse = SymmetricInverse(self.units, where, K) if self.units else None
        self.uc, self.ud = ukeys[reps] // m, ukeys[reps] % m
        self.i_u = where[self.uc, self.ud]
        # Jacobian J[j, k] = sum_{t reads orbit k} coef_t G[c_j, a_t] G[b_t, d_j] (j a representative): keep
        # only the (j, t) pairs whose two factors can be non-zero, and scatter them with a sparse matrix
        i1 = where[self.uc[:, None], a[None, :]]     # G[c_j, a_t]
        i2 = where[b[None, :], self.ud[:, None]]     # G[b_t, d_j]
        jj, tt = np.nonzero((i1 < K) & (i2 < K))
        self.i_j1, self.i_j2 = i1[jj, tt], i2[jj, tt]
        self.S = csr_matrix((coef[tt], (np.arange(jj.size), jj * self.nu + tk[tt])), shape=(jj.size, self.nu * self.nu))
        self.S_T = self.S.T.tocsr()   # the Jacobian uses the transpose: build it once
        self._plan_block_solve(jj, tk[tt], pencil)
        self.base = np.zeros(K + 1, dtype=complex)
        inside = where < K
        self.base[where[inside]] = -pencil.a0[inside]
        self.i_w = where[list(pencil.out), list(pencil.out)]
        self.i_out = where[pencil.out[0], pencil.out[0]]
        self.i_diag = where[np.arange(m), np.arange(m)]     # every diagonal entry lies in its own component

    def _plan_block_solve(self, jj: np.ndarray, kk: np.ndarray, pencil: Pencil) -> None:
        """Plan a Schur-complement solve of the Newton system: the unknowns that touch an output block
        ("hubs") couple everything; without them the Jacobian splits into small blocks (one per head
        when heads are uncoupled), solved in batches. Falls back to a dense solve when it would not pay."""
        nu = self.nu
        pat = np.zeros((nu, nu), dtype=bool)
        pat[jj, kk] = True
        pat |= pat.T
        out = np.array(pencil.out)
        hub = np.isin(self.uc, out) | np.isin(self.ud, out)
        self.block_plan = None
        rest = np.flatnonzero(~hub)
        if nu < 30 or rest.size == 0 or hub.sum() > nu // 3:   # small systems: dense LU is cheaper
            return
        sub = pat[np.ix_(rest, rest)]
        _, lab = connected_components(coo_matrix(sub), directed=False)
        sizes = np.bincount(lab)
        if sizes.max() > nu // 2:
            return
        groups: dict[int, list[np.ndarray]] = {}
        for k in range(sizes.size):
            groups.setdefault(int(sizes[k]), []).append(rest[lab == k])
        self.block_plan = (np.flatnonzero(hub), [np.array(v) for v in groups.values()])

    def _solve(self, J: np.ndarray, F: np.ndarray) -> np.ndarray:
        """Solve ``J x = F`` for every point (dense, or by the Schur complement on the hub unknowns)."""
        if self.block_plan is None:
            return np.linalg.solve(J, F[..., None])[..., 0]
        h, groups = self.block_plan
        Jhh = J[:, h[:, None], h[None, :]]
        rhs_h = F[:, h]
        parts = []
        for idx in groups:                                    # idx: (n_groups, size)
            Jrr = J[:, idx[:, :, None], idx[:, None, :]]      # (n, g, s, s)
            Jrh = J[:, idx[:, :, None], h[None, None, :]]     # (n, g, s, nh)
            Jhr = J[:, h[None, :, None], idx[:, None, :]]     # (n, g, nh, s)
            sol = np.linalg.solve(Jrr, np.concatenate([Jrh, F[:, idx][..., None]], axis=-1))
            X, y = sol[..., :-1], sol[..., -1]
            Jhh = Jhh - np.einsum("ngas,ngsb->nab", Jhr, X)
            rhs_h = rhs_h - np.einsum("ngas,ngs->na", Jhr, y)
            parts.append((idx, X, y))
        xh = np.linalg.solve(Jhh, rhs_h[..., None])[..., 0]
        x = np.empty_like(F)
        x[:, h] = xh
        for idx, X, y in parts:
            x[:, idx] = y - np.einsum("ngsb,nb->ngs", X, xh)
        return x

    # ------------------------------------------------------------------ one evaluation
    def resolvent(self, w: np.ndarray, u: np.ndarray) -> np.ndarray:
        """Compact ``G = (Lambda(w) - A_0 - eta(u))^{-1}``, shape ``(n, K + 1)``, inverted per component
        (closed forms for 1x1 and 2x2 components)."""
        n = w.size
        M = np.broadcast_to(self.base, (n, self.K + 1)).copy()
        M[:, self.i_w] += w[:, None]
        M[:, self.i_eta] -= u @ self.E
        G = np.zeros_like(M)
        with np.errstate(all="ignore"):
            for size, nc, ci in self.groups:
                sub = M[:, ci]
                if size == 1:
                    G[:, ci] = 1.0 / sub
                elif size == 2:
                    q = sub.reshape(n, nc, 4)
                    det = q[..., 0] * q[..., 3] - q[..., 1] * q[..., 2]
                    inv = np.stack([q[..., 3], -q[..., 1], -q[..., 2], q[..., 0]], axis=-1) / det[..., None]
                    G[:, ci] = inv.reshape(n, -1)
                else:
                    G[:, ci] = np.linalg.inv(sub.reshape(n, nc, size, size)).reshape(n, -1)
            if self.sym_inverse is not None:
                G[:, self.sym_inverse.out] = self.sym_inverse(M)
        return G

    @staticmethod
    def _residual(F: np.ndarray, u: np.ndarray) -> np.ndarray:
        """Entrywise relative residual ``max_k |F_k| / (|u_k| + 1e-3 max |u|)``: near an atom some unknowns
        blow up like ``1/z`` and must not hide the error of the others."""
        au = np.abs(u)
        with np.errstate(all="ignore"):
            return np.max(np.abs(F) / (au + 1e-3 * au.max(axis=1, keepdims=True) + 1e-300), axis=1)

    def g_out(self, w: np.ndarray, G: np.ndarray) -> np.ndarray:
        """``g(z) = G[out1, out1] / w`` with ``z = w^2``."""
        return G[:, self.i_out] / w

    def _newton(self, w: np.ndarray, u: np.ndarray, maxit: int | None = None,
                polish: int = 0, tol: float | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Newton from ``u``; returns ``(u, G, residual)`` (residual relative, per point).

        ``polish > 0``: exactly that many steps on every point, converged or not."""
        maxit = polish if polish else (self.maxit if maxit is None else maxit)
        tol = self.tol if tol is None else tol
        u = u.copy()
        eye = np.eye(self.nu)
        G = self.resolvent(w, u)
        for _ in range(maxit):
            F = u - G[:, self.i_u]
            res = self._residual(F, u)
            active = np.isfinite(res) & ((res > tol) | bool(polish))
            if not active.any():
                break
            allact = active.all()
            Ga = G if allact else G[active]
            Fa = F if allact else F[active]
            J = eye - np.asarray(self.S_T @ (Ga[:, self.i_j1] * Ga[:, self.i_j2]).T).T.reshape(-1, self.nu, self.nu)
            with np.errstate(all="ignore"):
                try:
                    du = self._solve(J, Fa)
                except np.linalg.LinAlgError:
                    du = np.stack([np.linalg.lstsq(j, f, rcond=None)[0] for j, f in zip(J, Fa)])
            if allact:
                u -= du
                G = self.resolvent(w, u)
            else:
                u[active] -= du
                G[active] = self.resolvent(w[active], u[active])
        res = self._residual(u - G[:, self.i_u], u)
        res[~np.isfinite(res)] = np.inf
        return u, G, res

    def _fixed_point(self, w: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Damped fixed point ``u <- (1-t) u + t G(u)[reads]`` followed by a Newton polish."""
        u = u.copy()
        t = self.damping
        with np.errstate(all="ignore"):
            for _ in range(self.fixed_point_iters):
                u = (1 - t) * u + t * self.resolvent(w, u)[:, self.i_u]
        return self._newton(w, u)

    def _ok(self, z: np.ndarray, w: np.ndarray, G: np.ndarray, res: np.ndarray, tol: float | None = None) -> np.ndarray:
        # Newton aims at ``tol``; near an edge (singular Jacobian) it may stall a little above: accept
        # up to ``accept_tol`` (final level) or 10 x the level tolerance
        ok = res <= (self.accept_tol if tol is None or tol <= self.tol else 10 * tol)
        g = self.g_out(w, G)
        with np.errstate(all="ignore"):
            branch = ~((z.imag > 0) & (g.imag > 1e-8 * np.abs(g) + 1e-300))
            # Im G <= 0 as a matrix for Im z > 0 (G = (Lambda - A_0 - eta(G))^{-1}, Im Lambda >= 0, eta
            # completely positive), so every diagonal entry has Im <= 0. Near 0 in a gap, where Im G is
            # O(Im z), a nearby unphysical solution differs from the physical one mostly by these signs
            # (g alone can look fine); the tolerance covers what the residual leaves unsure.
            Gd = G[:, self.i_diag]
            flip = Gd.imag > (10 * np.where(np.isfinite(res), res, np.inf) + 1e-13)[:, None] * np.abs(Gd) + 1e-300
            branch &= ~((z.imag > 0) & flip.any(axis=1))
        return ok & branch & np.isfinite(g)

    # ------------------------------------------------------------------ continuation
    def follow(self, path: Callable[[float | np.ndarray, np.ndarray], np.ndarray], n: int,
               levels: int = 12) -> tuple[np.ndarray, np.ndarray]:
        """Follow ``z = path(s, idx)`` from ``s = 0`` (far away) to ``s = 1`` for ``n`` points.

        Returns ``(z, G)`` at ``s = 1``. ``path(s, idx)`` gives ``z`` for the points ``idx`` at parameter
        ``s`` (scalar or one value per point); it must keep ``Im z > 0`` (or ``z`` off the spectrum).
        """
        idx = np.arange(n)
        z0 = path(0.0, idx)
        w0 = np.sqrt(z0)
        G0 = self.resolvent(w0, np.zeros((n, self.nu), dtype=complex))
        u, G, res = self._newton(w0, G0[:, self.i_u])
        bad = ~self._ok(z0, w0, G, res)
        if bad.any():
            raise LawSolverError("Dyson solver failed at the start of the continuation path (far from the spectrum)",
                                 z0[bad], res[bad])
        s_levels = np.linspace(0.0, 1.0, levels + 1)
        for s0, s1 in zip(s_levels[:-1], s_levels[1:]):
            u, G = self._step(path, idx, s0, s1, u, G, 0)
        z = path(1.0, idx)
        u, G, _ = self._newton(np.sqrt(z), u, polish=1)   # one more quadratic step: full precision
        return z, G

    def _step(self, path, idx, s0, s1, u, G, depth):
        z = path(s1, idx)
        w = np.sqrt(z)
        tol = self.tol if s1 >= 1.0 else self.level_tol
        u1, G1, res = self._newton(w, u, tol=tol)
        ok = self._ok(z, w, G1, res, tol)
        # continuity: a jump of the scalar transform means Newton left the branch it was following
        z0 = path(s0, idx)
        g0, g1 = self.g_out(np.sqrt(z0), G), self.g_out(w, G1)
        with np.errstate(all="ignore"):
            lr = np.log(g1 / g0)
            ok &= (np.abs(lr.real) <= np.log(self.level_ratio) + 0.5) & (np.abs(lr.imag) <= self.jump)
            # and entrywise: no unknown may flip sign or turn by more than ~70 degrees in one level
            au0, au1 = np.abs(u), np.abs(u1)
            floor = 1e-6 * np.maximum(au0.max(axis=1, keepdims=True), au1.max(axis=1, keepdims=True))
            ok &= np.max(np.abs(u1 - u) / np.maximum(np.maximum(au0, au1), floor), axis=1) <= 1.2
        if ok.all():
            return u1, G1
        bad = np.flatnonzero(~ok)
        if depth < self.max_depth:
            sm = 0.5 * (s0 + s1)
            ub, Gb = self._step(path, idx[bad], s0, sm, u[bad], G[bad], depth + 1)
            ub, Gb = self._step(path, idx[bad], sm, s1, ub, Gb, depth + 1)
        else:
            ub, Gb, rb = self._fixed_point(w[bad], u[bad])
            okb = self._ok(z[bad], w[bad], Gb, rb)
            if not okb.all():
                raise LawSolverError("Dyson solver did not converge (Newton with continuation and damped fixed point)",
                                     z[bad][~okb], np.where(np.isfinite(rb[~okb]), rb[~okb], np.inf))
        u1[bad], G1[bad] = ub, Gb
        return u1, G1

    # ------------------------------------------------------------------ scalar transforms
    def g_near_axis(self, x: np.ndarray, y: np.ndarray, y0: float, levels: int | None = None) -> np.ndarray:
        """``g(x + i y)``; see :meth:`solve_near_axis`."""
        return self.solve_near_axis(x, y, y0, levels)[0]

    def warm_near_axis(self, x: np.ndarray, y: np.ndarray, u0: np.ndarray, g_ref: np.ndarray,
                       g_tol: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Newton at ``x + i y`` straight from the guess ``u0`` (e.g. interpolated between solved
        neighbours). Returns ``(g, u, ok)``; ``ok`` requires convergence, the physical sign and
        ``|g - g_ref| <= g_tol`` (continuity with the neighbours), else the point must be solved by
        continuation."""
        z = np.asarray(x, dtype=float) + 1j * np.asarray(y, dtype=float)
        w = np.sqrt(z)
        good = np.all(np.isfinite(u0), axis=1)
        u, G, res = self._newton(w, np.where(good[:, None], u0, 0.0))
        g = self.g_out(w, G)
        with np.errstate(all="ignore"):
            ok = good & self._ok(z, w, G, res) & (np.abs(g - g_ref) <= g_tol)
        return g, u, ok

    def solve_near_axis(self, x: np.ndarray, y: np.ndarray, y0: float,
                        levels: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``g(x + i y)`` (``g(z) = (1/l) tr (z - Y Y^T)^{-1}``) by continuation in ``Im z`` from ``y0``
        (geometric levels, ``Im z`` shrinking by at most ``level_ratio`` per level)."""
        x = np.asarray(x, dtype=float)
        y = np.broadcast_to(np.asarray(y, dtype=float), x.shape)
        ly0, ly = np.log(y0), np.log(y)

        def path(s, idx):
            return x[idx] + 1j * np.exp(ly0 + (ly[idx] - ly0) * s)

        if x.size == 0:
            return np.zeros(0, dtype=complex), np.zeros((0, self.nu), dtype=complex)
        if levels is None:
            levels = int(np.ceil(np.max(ly0 - ly) / np.log(self.level_ratio)))
        z, G = self.follow(path, x.size, levels)
        return self.g_out(np.sqrt(z), G), G[:, self.i_u]

    def g_on_circle(self, center: float, radius: float, n: int, t0: float = 64.0, levels: int = 8) -> tuple[np.ndarray, np.ndarray]:
        """``(z, g(z))`` at the ``n`` upper-half points ``center + radius e^{i theta_j}``,
        ``theta_j = pi (j + 1/2) / n``, reached along rays from radius ``t0 * radius``."""
        theta = np.pi * (np.arange(n) + 0.5) / n
        e = np.exp(1j * theta)
        lt0 = np.log(t0)

        def path(s, idx):
            return center + radius * e[idx] * np.exp(lt0 * (1.0 - s))

        z, G = self.follow(path, n, levels)
        return z, self.g_out(np.sqrt(z), G)
