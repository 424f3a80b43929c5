"""The ``dependence`` verdict: a test on each pair's ``cka_excess`` interval against the layer's background.

``cka_excess = cka - cka_null`` (:mod:`..statistics.dependence`) is positive for almost every pair of a real layer: the
null (each head's contexts Haar-rotated, independently per text) removes every alignment between heads,
including what any two heads share because they read the same inputs. How much that is depends on the
model, not on the pair: pairs of random heads of a tiny random BERT (2 layers x 4 heads of width 8) reach
an excess of 0.13, those of a random GPT-2 of that size (causal running means of the same inputs) 0.93,
and trained MiniLM's median pair 0.09 (layer 3: 0.27). So the verdict compares a pair with the other pairs of its layer:

* **background** ``b_p``: the median ``cka_excess`` of the layer's *other* pairs (leave-one-out), over the
  pairs that do not share a key/value head (all other pairs when every pair shares one); NaN when the
  layer has a single pair. It stands for what heads of this layer share through their inputs, and is
  held fixed, like the null (a median of many pairs is stable, and excluding the pair keeps a strong
  pair from raising its own background);
* **dependent**: ``cka_excess_lo - b_p >= tau``; **independent**: ``cka_excess_hi - b_p < tau``; else
  **undetermined** (also below the token minimum, without a background, or without an interval where
  the diagnosis has replicates). Without intervals (``n_boot = 0``, or fewer texts than
  :data:`..statistics.bootstrap.MIN_TEXTS_FOR_INTERVALS`) every pair is ``undetermined``.

The margin ``tau`` (:data:`MARGINS`) is 0.10 for bidirectional attention and 0.60 for causal attention,
where the running mean gives pairs of cool heads a large shared component that the median does not
remove (pairs of planted GPT-2 background heads reach ``cka_excess_lo - b = 0.53``, BERT's 0.03). The
lower end is a one-sided 2.5 % bound, so a pair whose excess sits exactly ``tau`` above its background is
called dependent with probability 2.5 % (nominal). A head is ``dependent`` when one of its pairs is (its
``dependence_partner`` is the partner whose pair clears the margin by most), ``independent`` when all its
pairs are, else ``undetermined``.

The margins were chosen on planted models (``benchmarks/bench_validity.py``; heads whose Q/K/V copy a
partner's with correlation ``rho``) and on randomly initialized BERT, RoBERTa, GPT-2 and Llama: every copy
at ``rho = 1`` passes (lowest ``cka_excess_lo - b``: BERT 0.92, GPT-2 0.77), no background or random pair
does (docs/columns.md gives the counts).
"""
from __future__ import annotations

import numpy as np

__all__ = ["MARGINS", "LABELS", "margin_of", "background", "pair_verdicts", "head_verdicts"]

#: Margin ``tau`` of the verdict over the layer background, by attention mask.
MARGINS = {"bidirectional": 0.10, "causal": 0.60}
#: The verdicts, in increasing order of evidence for dependence (``head_verdicts`` takes their maximum).
LABELS = ("independent", "undetermined", "dependent")


def margin_of(causal: bool) -> float:
    """The margin ``tau`` of a layer: :data:`MARGINS` ``['causal']`` for causal attention, else
    ``['bidirectional']`` (cross-attention reads the encoder without a mask).

    Examples
    --------
    >>> margin_of(False), margin_of(True)
    (0.1, 0.6)
    """
    return MARGINS["causal" if causal else "bidirectional"]


def background(excess: np.ndarray, shared: np.ndarray) -> np.ndarray:
    """Leave-one-out median of the other pairs' excess: ``b_p = median{e_q : q != p, q not shared}``.

    Parameters
    ----------
    excess : numpy.ndarray
        ``(P,)`` ``cka_excess`` of the layer's pairs (NaN entries are ignored).
    shared : numpy.ndarray of bool
        ``(P,)`` the pair shares a key/value head. Shared pairs are left out of every background, unless
        every pair is shared (then all other pairs count).

    Returns
    -------
    numpy.ndarray
        ``(P,)``; NaN where no other pair has a finite excess.

    Examples
    --------
    >>> e = np.array([0.9, 0.1, 0.2, 0.3])
    >>> background(e, np.zeros(4, bool))                  # the copy at 0.9 is not its own background
    array([0.2, 0.3, 0.3, 0.2])
    >>> background(e, np.array([False, False, False, True]))
    array([0.15, 0.55, 0.5 , 0.2 ])
    >>> background(np.array([0.5]), np.array([False]))    # one pair: no background
    array([nan])
    """
    e = np.asarray(excess, float)
    sh = np.asarray(shared, bool)
    keep = (~sh if (~sh).any() else np.ones_like(sh)) & np.isfinite(e)
    order = np.argsort(np.where(keep, e, np.inf), kind="stable")
    srt = e[order][:int(keep.sum())]                      # the kept values, sorted
    rank = np.full(e.size, -1)
    rank[order[:srt.size]] = np.arange(srt.size)          # each kept pair's position in srt; -1: not kept
    m = srt.size - (rank >= 0)                            # how many other kept pairs
    out = np.full(e.size, np.nan)
    ok = m > 0
    if ok.any():
        r, mm = rank[ok], m[ok]

        def kth(k):                                       # k-th smallest of srt without position r
            return srt[k + ((r >= 0) & (k >= r))]
        out[ok] = 0.5 * (kth((mm - 1) // 2) + kth(mm // 2))
    return out


def pair_verdicts(excess, lo, hi, shared, tau: float, enough_tokens: bool, intervals: bool
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Background and verdict of every pair of one layer (module docstring).

    Parameters
    ----------
    excess, lo, hi : numpy.ndarray
        ``(P,)`` ``cka_excess`` and the ends of its interval.
    shared : numpy.ndarray of bool
        ``(P,)`` the pair shares a key/value head.
    tau : float
        Margin over the background, ``>= 0`` (:func:`margin_of`).
    enough_tokens : bool
        The corpus reaches the token minimum (else every pair is undetermined).
    intervals : bool
        The diagnosis has bootstrap intervals (else every pair is undetermined).

    Returns
    -------
    background : numpy.ndarray
        ``(P,)`` :func:`background`.
    verdict : numpy.ndarray of str
        ``(P,)`` values of :data:`LABELS`.

    Raises
    ------
    ValueError
        If ``tau`` is negative or not finite.

    Examples
    --------
    >>> e = np.array([0.95, 0.10, 0.12, 0.22, 0.11, 0.09])
    >>> b, v = pair_verdicts(e, e - 0.05, e + 0.05, np.zeros(6, bool), 0.1, True, True)
    >>> b.round(2).tolist(), v.tolist()
    ([0.11, 0.12, 0.11, 0.11, 0.12, 0.12], ['dependent', 'independent', 'independent', 'undetermined', 'independent', 'independent'])
    >>> str(pair_verdicts(e, e, e, np.zeros(6, bool), 0.1, False, True)[1][0])    # too few tokens
    'undetermined'
    """
    if not (np.isfinite(tau) and tau >= 0):
        raise ValueError(f"tau must be a finite number >= 0, got {tau}")
    e = np.asarray(excess, float)
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    b = background(e, shared)
    verdict = np.full(e.size, "undetermined", dtype=object)
    if enough_tokens and intervals:
        ok = np.isfinite(b) & np.isfinite(e)
        with np.errstate(invalid="ignore"):
            verdict[ok & (lo - b >= tau)] = "dependent"
            verdict[ok & (hi - b < tau)] = "independent"
    return b, verdict.astype(str)


def head_verdicts(n_heads: int, head_a, head_b, verdict, lo_over) -> tuple[np.ndarray, np.ndarray]:
    """Each head's ``dependence`` and ``dependence_partner`` from its pairs' verdicts.

    Parameters
    ----------
    n_heads : int
        Heads of the layer, ``>= 1``.
    head_a, head_b : numpy.ndarray of int
        ``(P,)`` the pairs (``head_a < head_b``).
    verdict : numpy.ndarray of str
        ``(P,)`` :func:`pair_verdicts`.
    lo_over : numpy.ndarray
        ``(P,)`` ``cka_excess_lo - background``: picks the partner among several dependent pairs.

    Returns
    -------
    dependence : numpy.ndarray of str
        ``(n_heads,)``: ``dependent`` if one of the head's pairs is, ``independent`` if all are,
        else ``undetermined`` (also for a single-head layer).
    partner : numpy.ndarray of int
        ``(n_heads,)``: the partner of the dependent pair with the largest ``lo_over``; -1 when none.

    Examples
    --------
    >>> a, b = np.triu_indices(3, 1)                    # pairs (0, 1), (0, 2), (1, 2)
    >>> dep, partner = head_verdicts(3, a, b, np.array(["dependent", "independent", "undetermined"]),
    ...                              np.array([0.4, -0.1, 0.05]))
    >>> dep.tolist(), partner.tolist()
    (['dependent', 'dependent', 'undetermined'], [1, 0, -1])
    """
    code = np.full((n_heads, n_heads), -1)
    rank = {v: i for i, v in enumerate(LABELS)}
    c = np.array([rank[v] for v in np.asarray(verdict)], dtype=int)
    code[head_a, head_b] = code[head_b, head_a] = c
    strength = np.full((n_heads, n_heads), -np.inf)
    s = np.where(np.isfinite(lo_over), lo_over, np.finfo(float).min)      # a dependent pair always ranks
    strength[head_a, head_b] = strength[head_b, head_a] = s
    strength = np.where(code == rank["dependent"], strength, -np.inf)
    best = code.max(axis=1)
    has_pair = (code >= 0).any(axis=1)
    dependence = np.where(has_pair, np.array(LABELS, dtype=object)[np.clip(best, 0, None)], "undetermined")
    partner = np.where(best == rank["dependent"], np.argmax(strength, axis=1), -1)
    return dependence.astype(str), partner.astype(int)
