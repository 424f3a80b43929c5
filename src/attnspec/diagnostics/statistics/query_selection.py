"""Per-query selection: are the keys a head attends to predictable from position or content?

The selection score of :mod:`attnspec.diagnostics.statistics.selection` sees heads whose queries share targets
(sinks, ``[CLS]``, punctuation). It cannot see a head whose every query picks a *different* key by a
fixed rule (the previous token, the token itself, the token after an earlier occurrence of the query's
token): such heads run hot, and at a high score scale a random head is nearly one-hot as well, so
neither concentration nor the output spectrum tells them apart. What tells them apart is *which* key
wins. This module measures it against the same null as the rest of the diagnosis (docs/theory.md,
section *Per-query selection*).

**The null.** The Gaussian-equivalent null head attends with scores ``beta G_ij`` over the allowed keys
``A_i`` of query ``i`` (``n_i = |A_i|``), the ``G_ij`` i.i.d. standard normal (or ``q_i . k_j / sqrt(d)``
with i.i.d. Gaussian ``q, k``: the same conclusion). Given the mask, the scores of one row are
exchangeable over ``A_i``, hence so are its weights ``a_ij = softmax_j(beta G_ij)``, and since they sum
to 1, ``E[a_ij] = 1 / n_i`` for every allowed key, **at every beta**. For any key set ``S_i`` fixed by
the positions and tokens (not by the scores):

    E_null[ sum_{j in S_i} a_ij ] = |S_i & A_i| / n_i.

Beta (and the lengths) only set the variance. With ``k = |S_i & A_i|`` and ``pi_i = E[sum_j a_ij^2]``
(the expected inverse participation ratio of the row: ``1 / n_i`` at beta 0, towards 1 for a one-hot
row; ``~ e^{beta^2} / n_i`` while that is small), exchangeability and ``sum_j a_ij = 1`` give

    Var_null[ sum_{j in S_i} a_ij ] = k (n_i - k) (pi_i - 1 / n_i) / (n_i (n_i - 1)),

a Bernoulli ``k/n_i (1 - k/n_i)`` for a one-hot row (docs/theory.md). The bootstrap over texts captures
it, and the correlation of the rows of one text, without a model of either.

**Sinks.** Trained heads park much of their attention on a few sink keys (``[CLS]``, ``<bos>``, the
first token of a causal text) when they have nothing to do; that is the shared-target statistic's
business, and the mass it takes varies from query to query. The statistic is therefore taken *among the
real keys*: the excluded keys ``X`` are the special tokens and (default ``first_is_sink=True``) the
first real token of each text, ``R_i = A_i - X`` the remaining allowed keys (``n_i = |R_i|``) and
``m_i = sum_{j in R_i} a_ij`` the head's weight on them. ``m_i`` is a symmetric function of the scores of
``R_i``, so given ``m_i`` the null's weights on ``R_i`` are still exchangeable and, for ``S_i`` within
``R_i``,

    E_null[ sum_{j in S_i} a_ij | m_i ] = m_i |S_i| / n_i,

exact at every beta, whatever the sinks take.

**Rules.** For each query ``i`` (real, not special, ``n_i >= 2``) and rule ``r`` a key set
``S_i^r`` within ``R_i``:

* ``offset d`` (positional, ``d`` in :data:`OFFSETS`, -8..8): ``S_i = {i + d}`` (``d = 0``: the token
  itself, identity heads);
* ``same token`` (content): ``{j != i : tok_j = tok_i}``;
* ``induction`` (content): ``{j : tok_{j-1} = tok_i, j - 1 != i, j - 1 real}`` (Olsson et al. 2022;
  in an encoder ``j - 1`` may also lie after ``i``).

Per head and rule, summed over queries and texts:

    O = sum_i sum_{j in S_i} a_ij,   E = sum_i m_i |S_i| / n_i,   N = sum_i m_i 1[S_i nonempty],

and the **excess fraction** ``x = (O - E) / (N - E)`` in ``(-E / (N - E), 1]``: the share of the attention
the rule could explain beyond chance that the head actually puts there (1: every applicable query puts
all its weight on real keys on the rule's keys; 0: the null head's level, whatever its beta). A
previous-token head has ``x = 1`` at ``offset -1``; a random head at any temperature ``x ~ 0`` at every
rule. Queries weigh by ``m_i``: a query that leaves its real keys almost nothing counts almost nothing.
Without sinks (``m_i = 1``) ``E = sum_i |S_i| / n_i`` and ``N`` counts the queries the rule applies to.

**Score and verdict.** ``query_selection_score`` is ``x`` of the head's best rule, chosen on the full
sample among the rules that apply to at least ``min_queries`` queries (default :data:`MIN_QUERIES`; when
none does, among those that apply at all, and the verdict is then ``undetermined``).
Its bootstrap replicates are those of the *same* rule (Poisson weights per text, the sums' replicates
are weighted sums over texts, so they merge by addition), and the interval ``[lo, hi]`` is their 95 %
percentile interval (the convention of :mod:`attnspec.diagnostics.statistics.bootstrap`: NaN with fewer than 10
finite replicates; without replicates, or with ``intervals=False``, NaN, and the verdict ``undetermined``).
Column ``query_selection``:

* ``selective``: ``lo >= margin`` (default :data:`MARGIN` = 0.1: at least a tenth of the attention the
  rule could hold beyond chance, and the lower bound says so);
* ``not selective``: ``hi < margin``;
* ``undetermined``: the interval contains the margin, or fewer than ``min_tokens`` (default
  :data:`MIN_TOKENS_FOR_LABEL` = 400) queries were counted, or no rule applies to ``min_queries``.

Choosing the best of 19 rules on the sample biases the score of a random head upwards by about two of
its standard deviations; the margin is what keeps that from calling it selective: at 400 queries the
standard deviation of ``x`` for a one-hot random head is below 0.02, so the maximum's lower bound stays
below 0.1 (docs/validity.md gives the measured false-positive rates).

``query_selection_kind`` is ``positional`` or ``content`` for the best rule, ``none`` where no rule applies;
``query_selection_rule`` names it (``'offset -1'``, ``'same token'``, ``'induction'``, ``'none'``).

**The sink rule.** The excluded keys ``X_i = A_i & X`` are a rule of their own (``'sink'``): the head's weight on
them beyond chance. Over *all* allowed keys the null's weights are exchangeable, so at every beta

    E_null[ sum_{j in X_i} a_ij ] = |X_i| / |A_i|,

and ``O = sum_i sum_{j in X_i} a_ij``, ``E = sum_i |X_i| / |A_i|``, ``N = sum_i 1[X_i nonempty]`` (each counted query
weighs 1: the sink takes what ``m_i`` leaves) give its excess fraction as above: 1 for a head that puts every
query's whole weight on ``[CLS]`` or ``<bos>``, about 0 for a random head. It is never a head's best rule (that
stays a per-query rule) but is a role of its own (:meth:`QuerySelectionSums.roles`).

**Roles** (:meth:`QuerySelectionSums.roles`, ``roles.csv``): every rule of every head with its excess, a
*simultaneous* 95 % interval over the head's rules and a verdict. The interval is the bootstrap max-t band:
with ``se_r`` the replicates' standard deviation of rule ``r`` and ``c`` the 95 % quantile over replicates of
``max_r |x*_r - x_r| / se_r`` (the rules that apply to at least ``min_queries`` queries), ``[x_r - c se_r,
x_r + c se_r]`` holds every rule's excess at once with probability about 95 %, so the chance that *any* rule of a
head whose excess is below the margin everywhere is called ``selective`` is at most about 2.5 % (family-wise, one
side). Verdicts as above: ``selective`` when ``lo >= margin``, ``not selective`` when ``hi < margin``, else (or the
rule applies to fewer than ``min_queries`` queries, or fewer than ``min_tokens`` queries were counted)
``undetermined``.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from .bootstrap import simultaneous_interval
from .devices import host

__all__ = ["QuerySelectionSums", "OFFSETS", "CONTENT_RULES", "SINK_RULE", "MARGIN", "MIN_QUERIES",
           "MIN_TOKENS_FOR_LABEL", "VERDICTS", "COLUMNS", "ROLE_COLUMNS", "NAMED_RULES", "verdict"]

#: Relative offsets of the positional rules (query ``i`` attends to key ``i + d``).
OFFSETS = tuple(range(-8, 9))
#: The content rules, in column order after the offsets.
CONTENT_RULES = ("same token", "induction")
#: The rule of the excluded keys (special tokens, each text's first token): the last column, never a best rule.
SINK_RULE = "sink"
#: Default margin on the excess fraction: ``selective`` when the interval's lower bound reaches it.
MARGIN = 0.1
#: Fewest queries a rule must apply to (all texts) to be chosen as a head's best rule.
MIN_QUERIES = 100
#: Fewest counted queries (all texts) for a verdict; fewer give ``'undetermined'``.
MIN_TOKENS_FOR_LABEL = 400
#: Values of column ``query_selection``.
VERDICTS = ("selective", "not selective", "undetermined")
#: The columns of :meth:`QuerySelectionSums.result`.
COLUMNS = ("query_selection_score", "query_selection_score_lo", "query_selection_score_hi", "query_selection_kind",
           "query_selection_rule", "query_selection", "previous_token_excess", "induction_excess")
#: The columns of :meth:`QuerySelectionSums.roles` (one row per head and rule), after ``layer`` and ``head``.
ROLE_COLUMNS = ("rule", "excess", "excess_lo", "excess_hi", "verdict", "real_weight")
#: The rules most asked after, reported whatever a head's best rule (column -> rule).
NAMED_RULES = {"previous_token_excess": "offset -1", "induction_excess": "induction"}
_LEVEL = 0.95


def verdict(score: float, lo: float, hi: float, margin: float = MARGIN, n_queries: float = math.inf,
            min_tokens: int = MIN_TOKENS_FOR_LABEL) -> str:
    """The verdict of one head from its score and interval (module docstring).

    Examples
    --------
    >>> verdict(0.9, 0.85, 0.95), verdict(0.01, -0.02, 0.04), verdict(0.12, 0.05, 0.2)
    ('selective', 'not selective', 'undetermined')
    >>> verdict(0.9, 0.85, 0.95, n_queries=100)
    'undetermined'
    """
    if n_queries < min_tokens or not (math.isfinite(score) and math.isfinite(lo) and math.isfinite(hi)):
        return "undetermined"
    if lo >= margin:
        return "selective"
    if hi < margin:
        return "not selective"
    return "undetermined"


def _interval(reps: np.ndarray, level: float = _LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval over the replicates with a finite value (NaN where fewer than 10 are)."""
    shape = reps.shape[1:]
    lo, hi = np.full(shape, np.nan), np.full(shape, np.nan)
    if reps.shape[0] == 0:
        return lo, hi
    a = (1 - level) / 2
    ok = np.isfinite(reps).sum(0) >= 10
    if ok.any():
        lo[ok], hi[ok] = np.nanquantile(reps[:, ok], [a, 1 - a], axis=0)
    return lo, hi


def _excess(O: np.ndarray, E: np.ndarray, N: np.ndarray) -> np.ndarray:
    """``(O - E) / (N - E)`` elementwise; NaN where ``N - E <= 0``."""
    den = N - E
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 1e-12, (O - E) / np.where(den > 1e-12, den, 1.0), np.nan)


class QuerySelectionSums:
    """Mergeable sums of the per-query selection statistic of one layer (module docstring).

    Parameters
    ----------
    n_heads : int
        Heads of the layer.
    n_boot : int
        Bootstrap replicates (0: none); :meth:`update` then takes ``(n_boot, B)`` weights.
    offsets : sequence of int
        Offsets of the positional rules (default :data:`OFFSETS`).
    first_is_sink : bool
        Exclude the first real token of each text from the keys, like the special tokens (module
        docstring, *Sinks*).

    Attributes
    ----------
    observed, expected, capacity : numpy.ndarray, shape (H, R)
        ``O``, ``E`` and ``N`` per head and rule (rules: :attr:`rules`, the offsets, :data:`CONTENT_RULES`, then
        :data:`SINK_RULE`).
    count : numpy.ndarray, shape (R,)
        Queries each rule applies to (the same for every head).
    n_queries : float
        Counted queries (real, non-special, at least two allowed keys).
    boot_observed, boot_expected, boot_capacity : numpy.ndarray, shape (n_boot, H, R)
        The same sums on each replicate.

    Examples
    --------
    A previous-token head and a uniform head on 8 causal texts of 64 random tokens:

    >>> import torch
    >>> B, L = 8, 64
    >>> allowed = torch.ones(L, L, dtype=torch.bool).tril().expand(B, L, L)
    >>> prev = torch.diag(torch.ones(L - 1), -1); prev[0, 0] = 1
    >>> uniform = allowed[0] / allowed[0].sum(-1, keepdim=True)
    >>> A = torch.stack([prev, uniform]).expand(B, 2, L, L).double()
    >>> valid = torch.ones(B, L, dtype=torch.bool)
    >>> tokens = torch.randint(0, 50, (B, L), generator=torch.Generator().manual_seed(0))
    >>> w = torch.poisson(torch.ones(100, B), generator=torch.Generator().manual_seed(1)).numpy()
    >>> qs = QuerySelectionSums(n_heads=2, n_boot=100)
    >>> for r0 in range(0, L, 16):                         # four query tiles
    ...     rows = slice(r0, r0 + 16)
    ...     _ = qs.update(A[:, :, rows], rows, allowed[:, rows], valid, tokens, w)
    >>> res = qs.result()
    >>> res["query_selection"].tolist()
    ['selective', 'not selective']
    >>> res["query_selection_kind"][0], res["query_selection_rule"][0]
    ('positional', 'offset -1')
    >>> float(res["query_selection_score"][0]), float(res["query_selection_score_lo"][0])
    (1.0, 1.0)
    >>> round(float(res["query_selection_score"][1]), 6)      # uniform: the null's mass (float32 rows)
    0.0
    """

    def __init__(self, n_heads: int, n_boot: int = 0, offsets=OFFSETS, first_is_sink: bool = True):
        self.n_heads, self.n_boot = int(n_heads), int(n_boot)
        self.first_is_sink = bool(first_is_sink)
        self.offsets = tuple(int(d) for d in offsets)
        R = len(self.offsets) + len(CONTENT_RULES) + 1
        self.observed, self.expected, self.capacity = (np.zeros((self.n_heads, R)) for _ in range(3))
        self.count = np.zeros(R)
        self.n_queries = 0.0
        self.boot_observed, self.boot_expected, self.boot_capacity = (np.zeros((self.n_boot, self.n_heads, R))
                                                                      for _ in range(3))

    @property
    def rules(self) -> list[str]:
        """Names of the rules, in column order: ``'offset d'``, :data:`CONTENT_RULES`, then :data:`SINK_RULE`."""
        return [f"offset {d}" for d in self.offsets] + list(CONTENT_RULES) + [SINK_RULE]

    def update(self, A: torch.Tensor, rows: slice, allowed: torch.Tensor, valid: torch.Tensor,
               tokens: torch.Tensor | None = None, weights: np.ndarray | None = None,
               special: torch.Tensor | None = None) -> "QuerySelectionSums":
        """Add one query tile of one batch of texts.

        Parameters
        ----------
        A : torch.Tensor, shape (B, H, r, L_k)
            Attention weights of the query rows ``rows`` (any float dtype; sums are kept in float64) on the leading
            keys ``0..L_k`` (``L_k <= L``: every allowed key of these rows, :func:`..pipeline.collect.tiles_of`).
        rows : slice
            The tile's query rows ``start:stop`` (step 1), ``r = stop - start``.
        allowed : torch.Tensor of bool, shape (B, r, L_k)
            The allowed keys of those rows (the model's own mask, padding removed).
        valid : torch.Tensor of bool, shape (B, L)
            Real (non-padding) tokens of the whole texts.
        tokens : torch.Tensor of int, shape (B, L), optional
            Token ids; None (inputs without tokens): only the positional rules apply.
        weights : numpy.ndarray, shape (n_boot, B), optional
            Poisson bootstrap weights of the batch's texts (required when ``n_boot > 0``).
        special : torch.Tensor of bool, shape (B, L), optional
            Special tokens ([CLS], <bos>, ...): left out as queries and as keys (module docstring, *Sinks*).

        Returns
        -------
        QuerySelectionSums
            ``self``.
        """
        B, H, r, L = A.shape                      # L: the tile's keys (valid's length or fewer)
        if H != self.n_heads:
            raise ValueError(f"A has {H} heads, the accumulator {self.n_heads}")
        start = 0 if rows.start is None else int(rows.start)
        if r == 0:
            return self
        dev = A.device
        valid = valid.to(dev).bool()
        key_ok = valid if special is None else valid & ~special.to(dev).bool()
        if self.first_is_sink:                                                # the first real token of each text
            key_ok = key_ok.clone()
            key_ok[torch.arange(B, device=dev), valid.int().argmax(1)] = False
        al = allowed.to(dev).bool()
        i = torch.arange(start, start + r, device=dev)
        real_keys = al & key_ok[:, None, :L]                                  # allowed real, non-special keys
        n = real_keys.sum(-1)                                                 # n_i (B, r)
        q = key_ok[:, start:start + r] & (n >= 2)
        target = real_keys & q[:, :, None]                                    # (B, r, L)
        mass = torch.einsum("bhrl,brl->bhr", A, target.to(A.dtype)).double()  # m_i: weight on those keys
        per_key = mass * torch.where(q, 1.0 / n.clamp_min(1).double(), 0.0)[:, None]     # m_i / n_i (B, H, r)
        # positional rules: one gathered key per (query, offset)
        d = torch.tensor(self.offsets, device=dev)
        j = i[:, None] + d[None, :]                                           # (r, D)
        jc = j.clamp(0, L - 1)
        m = (target.gather(-1, jc.expand(B, r, -1)) & ((j >= 0) & (j < L))).double()   # (B, r, D)
        Ag = A.gather(-1, jc.expand(B, H, r, -1))                             # (B, H, r, D)
        O = [(Ag.double() * m[:, None]).sum(2)]                               # (B, H, D)
        E = [torch.einsum("bhr,brd->bhd", per_key, m)]
        N = [torch.einsum("bhr,brd->bhd", mass, m)]
        C = [m.sum(1)]                                                        # queries a rule applies to (B, D)
        if tokens is not None:                                                # content rules
            tok = tokens.to(dev)
            keys = torch.arange(L, device=dev)
            same = (tok[:, start:start + r, None] == tok[:, None, :L]) & (keys[None, :] != i[:, None])
            prev_tok = torch.cat([tok[:, :1], tok[:, :-1]], 1)
            prev_ok = torch.cat([torch.zeros_like(valid[:, :1]), valid[:, :-1]], 1)
            ind = (tok[:, start:start + r, None] == prev_tok[:, None, :L]) & prev_ok[:, None, :L] \
                & ((keys[None, :] - 1) != i[:, None])
            S = torch.stack([same, ind], -1) & target[..., None]              # (B, r, L, 2)
            size, applies = S.sum(2).double(), S.any(2).double()              # (B, r, 2)
            O.append(torch.bmm(A.reshape(B, H, r * L), S.reshape(B, r * L, 2).to(A.dtype)).double())
            E.append(torch.einsum("bhr,brk->bhk", per_key, size))
            N.append(torch.einsum("bhr,brk->bhk", mass, applies))
            C.append(applies.sum(1))
        else:
            k = len(CONTENT_RULES)
            O += [torch.zeros(B, H, k, dtype=torch.float64, device=dev)]
            E += [torch.zeros(B, H, k, dtype=torch.float64, device=dev)]
            N += [torch.zeros(B, H, k, dtype=torch.float64, device=dev)]
            C += [torch.zeros(B, k, dtype=torch.float64, device=dev)]
        # the sink rule: the excluded keys among all allowed real keys, E = |X_i| / |A_i|, each counted query weighs 1
        allowed_real = al & valid[:, None, :L]
        sink = allowed_real & ~key_ok[:, None, :L] & q[:, :, None]                   # (B, r, L)
        k_sink = sink.sum(-1).double()
        applies = (k_sink > 0).double()                                               # (B, r)
        O.append(torch.einsum("bhrl,brl->bh", A, sink.to(A.dtype)).double()[..., None])
        E.append((k_sink / allowed_real.sum(-1).clamp_min(1).double()).sum(1)[:, None, None].expand(B, H, 1))
        N.append(applies.sum(1)[:, None, None].expand(B, H, 1))
        C.append(applies.sum(1)[:, None])
        O, E, N, C = (host(torch.cat(x, -1)) for x in (O, E, N, C))  # per text: (B, H, R) x 3, (B, R)
        self.observed += O.sum(0)
        self.expected += E.sum(0)
        self.capacity += N.sum(0)
        self.count += C.sum(0)
        self.n_queries += float(q.sum())
        if self.n_boot:
            if weights is None:
                raise ValueError("weights (n_boot, B) are required when n_boot > 0")
            w = np.asarray(weights, dtype=np.float64)
            if w.shape != (self.n_boot, B):
                raise ValueError(f"weights must have shape {(self.n_boot, B)}, got {w.shape}")
            for name, x in (("boot_observed", O), ("boot_expected", E), ("boot_capacity", N)):
                getattr(self, name).__iadd__(np.einsum("kb,bhr->khr", w, x))
        return self

    def merge(self, other: "QuerySelectionSums") -> "QuerySelectionSums":
        """A new accumulator holding the sums of both (texts seen by either).

        Raises
        ------
        ValueError
            When heads, replicates or offsets differ.
        """
        if (self.n_heads, self.n_boot, self.offsets, self.first_is_sink) != \
                (other.n_heads, other.n_boot, other.offsets, other.first_is_sink):
            raise ValueError("cannot merge query-selection sums of different heads, replicates, offsets or sinks")
        out = QuerySelectionSums(self.n_heads, self.n_boot, self.offsets, self.first_is_sink)
        for k in ("observed", "expected", "capacity", "count", "n_queries", "boot_observed", "boot_expected",
                  "boot_capacity"):
            setattr(out, k, getattr(self, k) + getattr(other, k))
        return out

    def excess(self) -> np.ndarray:
        """The excess fraction ``(O - E) / (N - E)`` per head and rule, ``(H, R)`` (NaN where no query applies)."""
        return _excess(self.observed, self.expected, self.capacity)

    def excess_replicates(self) -> np.ndarray:
        """The excess fraction on each replicate, ``(n_boot, H, R)``."""
        return _excess(self.boot_observed, self.boot_expected, self.boot_capacity)

    def best_rule(self, min_queries: float = MIN_QUERIES) -> np.ndarray:
        """Index of each head's best per-query rule (largest excess among rules applying to ``>= min_queries``
        queries; never the sink), ``(H,)``; -1 where none applies."""
        per_query = np.arange(len(self.count)) < len(self.count) - 1
        x = np.where(((self.count >= max(min_queries, 1)) & per_query)[None, :], self.excess(), np.nan)
        has = np.isfinite(x).any(1)
        return np.where(has, np.argmax(np.where(np.isfinite(x), x, -np.inf), 1), -1)

    def replicates(self, min_queries: float = MIN_QUERIES) -> np.ndarray:
        """Bootstrap replicates of ``query_selection_score`` (the best rule of the full sample), ``(n_boot, H)``."""
        return self._replicates_of(self.best_rule(min_queries))

    def _replicates_of(self, best: np.ndarray) -> np.ndarray:
        reps = self.excess_replicates()
        out = np.full((self.n_boot, self.n_heads), np.nan)
        for h, b in enumerate(best):
            if b >= 0:
                out[:, h] = reps[:, h, b]
        return out

    def result(self, margin: float = MARGIN, min_queries: float = MIN_QUERIES,
               min_tokens: int = MIN_TOKENS_FOR_LABEL, level: float = _LEVEL, intervals: bool = True
               ) -> dict[str, np.ndarray]:
        """The columns :data:`COLUMNS` per head (module docstring), each an array of shape ``(H,)``.

        ``query_selection_score`` (float), ``_lo`` / ``_hi`` (percentile interval at ``level``; NaN without
        replicates or with ``intervals=False``: too few texts), ``query_selection_kind`` (``'positional'``, ``'content'``, ``'none'``),
        ``query_selection_rule`` (``'offset -1'``, ``'same token'``, ``'induction'``; ``'none'`` when no rule
        applies), ``query_selection`` (verdict), and the excess of the rules of :data:`NAMED_RULES` whatever the
        best rule (``previous_token_excess``, ``induction_excess``; 0 where the rule applies to no query).
        """
        strict = self.best_rule(min_queries)
        best = np.where(strict >= 0, strict, self.best_rule(1))   # too few queries: the best rule that applies
        x = self.excess()
        H = self.n_heads
        score = np.array([x[h, b] if b >= 0 else np.nan for h, b in enumerate(best)])
        if self.n_boot and intervals:
            lo, hi = _interval(self._replicates_of(best), level)
        else:                                 # no interval: every verdict undetermined
            lo, hi = np.full(H, np.nan), np.full(H, np.nan)
        names = self.rules
        D = len(self.offsets)
        rule = np.array([names[b] if b >= 0 else "none" for b in best], dtype=object)
        kind = np.array(["none" if b < 0 else ("positional" if b < D else "content") for b in best], dtype=object)
        lab = np.array([verdict(float(score[h]), float(lo[h]), float(hi[h]), margin, self.n_queries, min_tokens)
                        if strict[h] >= 0 else "undetermined" for h in range(H)], dtype=object)
        named = {col: np.nan_to_num(x[:, names.index(r)], nan=0.0) if r in names else np.zeros(H)
                 for col, r in NAMED_RULES.items()}
        return {"query_selection_score": score, "query_selection_score_lo": lo, "query_selection_score_hi": hi,
                "query_selection_kind": kind, "query_selection_rule": rule, "query_selection": lab, **named}

    def roles(self, margin: float = MARGIN, min_queries: float = MIN_QUERIES, min_tokens: int = MIN_TOKENS_FOR_LABEL,
              level: float = _LEVEL, intervals: bool = True) -> dict[str, np.ndarray]:
        """Every rule of every head (module docstring, *Roles*): ``rule`` (names, :attr:`rules`), ``excess``,
        ``excess_lo`` / ``excess_hi`` (the simultaneous band over a head's rules, :func:`.bootstrap.simultaneous_interval`, the
        rules applying to at least ``min_queries`` queries its family; NaN without replicates or with
        ``intervals=False``), ``verdict`` and ``real_weight`` (``N / count``: the head's mean weight ``m_i`` on the
        real keys over the queries the rule applies to, what the excess is a share of; NaN for the sink), each of
        shape ``(H, R)``.

        Examples
        --------
        A head that puts half of each query's weight on the previous token and half on the first token (a sink),
        and a uniform head, on 8 causal texts of 64 random tokens: the first has both roles, the second none:

        >>> import torch
        >>> B, L = 8, 64
        >>> allowed = torch.ones(L, L, dtype=torch.bool).tril().expand(B, L, L)
        >>> two = 0.5 * torch.diag(torch.ones(L - 1), -1); two[:, 0] += 0.5; two[0, 0] = 1.0; two[1, 0] = 1.0
        >>> uniform = allowed[0] / allowed[0].sum(-1, keepdim=True)
        >>> A = torch.stack([two, uniform]).expand(B, 2, L, L).double()
        >>> valid = torch.ones(B, L, dtype=torch.bool)
        >>> tokens = torch.randint(0, 50, (B, L), generator=torch.Generator().manual_seed(0))
        >>> w = torch.poisson(torch.ones(100, B), generator=torch.Generator().manual_seed(1)).numpy()
        >>> qs = QuerySelectionSums(n_heads=2, n_boot=100).update(A, slice(0, L), allowed, valid, tokens, w)
        >>> r = qs.roles()
        >>> [rule for rule, v in zip(r["rule"][0], r["verdict"][0]) if v == "selective"]
        ['offset -1', 'sink']
        >>> [rule for rule, v in zip(r["rule"][1], r["verdict"][1]) if v == "selective"]
        []
        >>> round(float(r["excess"][0, qs.rules.index("sink")]), 3)      # half the weight, beyond 1 / (i + 1)
        0.472
        >>> round(float(r["real_weight"][0, qs.rules.index("offset -1")]), 3)  # the other half: on the real keys
        0.5
        """
        x = self.excess()
        H, R = x.shape
        family = np.broadcast_to(self.count >= max(min_queries, 1), (H, R))
        if self.n_boot and intervals:
            lo, hi = simultaneous_interval(x, self.excess_replicates(), level, family)
            # an excess (a weight fraction beyond its null expectation) lies in [-1, 1]: the symmetric band of a rule
            # whose few queries' weight swings (heads parking their weight on a sink) must not leave it
            lo, hi = np.maximum(lo, -1.0), np.minimum(hi, 1.0)
        else:
            lo, hi = np.full((H, R), np.nan), np.full((H, R), np.nan)
        lab = np.array([[verdict(float(x[h, r]), float(lo[h, r]), float(hi[h, r]), margin, self.n_queries, min_tokens)
                         if family[h, r] else "undetermined" for r in range(R)] for h in range(H)], dtype=object)
        rule = np.broadcast_to(np.array(self.rules, dtype=object), (H, R))
        with np.errstate(invalid="ignore", divide="ignore"):
            real = np.where(self.count > 0, self.capacity / self.count, np.nan)   # mean m_i over the rule's queries
        real[:, self.rules.index(SINK_RULE)] = np.nan                            # the sink weighs every query fully
        return {"rule": rule, "excess": x, "excess_lo": lo, "excess_hi": hi, "verdict": lab, "real_weight": real}
