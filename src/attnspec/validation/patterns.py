"""Geometry of the planted models: input subspaces, structured query/key weights, logit statistics.

The embeddings of a planted model reserve a few directions of the hidden space (the *special
subspace*, orthonormal columns ``basis``):

* ``basis[:, :2K]`` (``K = head_dim / 2``): sinusoidal position code, frequencies
  ``omega_k = 2 pi k / (2K + 1)``;
* ``basis[:, 2K]``: a constant direction, carried by the (single) token-type embedding;
* ``basis[:, 2K + 1]``: the *class* direction, added to the word embeddings of the class tokens.

Structured patterns of a selective head (query ``i``, key ``j``):

* ``'offset'``: attends to ``j = i + offset`` (and its aliases ``+- (2K + 1)``): the query reads the
  position code rotated by ``omega_k * offset``, the key reads it unrotated, so the logit is
  ``sum_k cos(omega_k (j - i - offset))`` times a gain;
* ``'class'``: every query attends to the class tokens (``[CLS]``, ``[SEP]``, ``.``, ``,``): the
  query reads the constant direction, the key the class direction;
* ``'identity'``: attends to tokens equal to itself (the token itself and its repeats): query and key
  read the same random ``head_dim``-dimensional subspace of the word embeddings;
* ``'induction'`` (layers after the first): attends to the token *after* an earlier occurrence of its
  own token (Olsson et al. 2022; in an encoder the occurrence may also come later): the query reads the
  word subspace of ``'identity'``, the key reads the *previous-token subspace* ``prev``, into which a
  previous-token head of the first layer writes the word subspace of the token before (a two-layer
  circuit, as in trained models).
"""
from __future__ import annotations

import math

import torch

__all__ = ["PATTERNS", "DEFAULT_PATTERNS", "CLASS_TOKENS", "SINK_TOKENS", "position_code", "structured_weights",
           "pattern_parts", "target_mask", "allowed_pairs", "score_scale", "target_gain", "role_excess"]

#: Structured attention patterns of selective heads (``'offset+sink'``: two roles in one head, a fixed relative
#: position and the special tokens ``[CLS]``/``[SEP]``, on disjoint rows of the head's query and key weights).
PATTERNS = ("offset", "class", "identity", "induction", "offset+sink")
#: The patterns planted by default (``'induction'`` is opt-in: it needs two layers and a writer head).
DEFAULT_PATTERNS = ("offset", "class", "identity")
#: Tokens of the 'class' pattern (attention sinks of trained BERTs).
CLASS_TOKENS = ("[CLS]", "[SEP]", ".", ",")
#: Tokens of the sink part of ``'offset+sink'``: the special tokens, which attnspec's sink rule counts.
SINK_TOKENS = ("[CLS]", "[SEP]")


def _omega(head_dim: int) -> torch.Tensor:
    K = head_dim // 2
    return 2 * math.pi * torch.arange(1, K + 1, dtype=torch.float64) / (2 * K + 1)


def position_code(n_positions: int, head_dim: int, amplitude: float, basis: torch.Tensor) -> torch.Tensor:
    """``(n_positions, hidden)`` position embeddings: sinusoids in ``basis[:, :head_dim]``.

    Position ``i`` gets ``amplitude * sum_k (cos(omega_k i) basis[:, 2k-2] + sin(omega_k i) basis[:, 2k-1])``,
    ``omega_k = 2 pi k / (2K + 1)``, ``k = 1..K``, ``K = head_dim / 2``: periodic with period ``2K + 1``,
    norm ``amplitude sqrt(K)`` for orthonormal ``basis``.

    Parameters
    ----------
    n_positions : int
    head_dim : int
        Even; the code uses the first ``head_dim`` columns of ``basis``.
    amplitude : float
    basis : Tensor
        ``(hidden, >= head_dim)`` float64, orthonormal columns.

    Examples
    --------
    >>> import torch
    >>> basis = torch.eye(10, dtype=torch.float64)[:, :6]
    >>> P = position_code(7, 4, 1.0, basis)          # K = 2: period 5
    >>> tuple(P.shape), bool(torch.allclose(P[5], P[0])), float(P[:, 4:].abs().max())
    ((7, 10), True, 0.0)
    """
    ang = torch.arange(n_positions, dtype=torch.float64)[:, None] * _omega(head_dim)
    code = torch.stack([ang.cos(), ang.sin()], -1).reshape(n_positions, head_dim)
    return amplitude * code @ basis[:, :head_dim].T


def _rotation(head_dim: int, offset: int) -> torch.Tensor:
    """Block rotation ``(2K, 2K)`` by ``omega_k * offset`` in each (cos, sin) pair."""
    th = _omega(head_dim) * offset
    c, s = th.cos(), th.sin()
    R = torch.zeros(head_dim, head_dim, dtype=torch.float64)
    R[0::2, 0::2], R[0::2, 1::2] = torch.diag(c), torch.diag(-s)
    R[1::2, 0::2], R[1::2, 1::2] = torch.diag(s), torch.diag(c)
    return R


def structured_weights(pattern: str, offset: int, head_dim: int, basis: torch.Tensor,
                       identity_basis: torch.Tensor, prev_basis: torch.Tensor | None = None,
                       sink_basis: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Unit-gain query and key weights ``(head_dim, hidden)`` of one structured pattern.

    ``'offset'``: query ``R(omega offset) U^T``, key ``U^T`` with ``U = basis[:, :head_dim]`` and ``R`` the
    block rotation by ``omega_k * offset``, so that on the position code ``q_i . k_j = a^2 sum_k
    cos(omega_k (j - i - offset))`` (``a`` its amplitude); ``'class'``: query reads the constant direction
    ``basis[:, head_dim]``, key the class direction ``basis[:, head_dim + 1]`` (first row only, times
    ``sqrt(head_dim)``); ``'identity'``: query and key both ``identity_basis^T``; ``'induction'``: query
    ``identity_basis^T``, key ``prev_basis^T``; ``'offset+sink'``: the offset pattern on the first ``head_dim - 2``
    rows (the position code's first ``head_dim / 2 - 1`` frequencies) and, on the last row, a query reading the constant
    direction and a key reading ``sink_basis`` (a direction only the special tokens carry), so that ``q_i . k_j`` is
    the sum of the two patterns' scores with no cross term (the planted-model builder scales each part on its own,
    :func:`pattern_parts`).

    Parameters
    ----------
    pattern : {'offset', 'class', 'identity', 'induction', 'offset+sink'}
    offset : int
        Relative position of the target key (``'offset'`` and ``'offset+sink'``).
    head_dim : int
    basis : Tensor
        ``(hidden, head_dim + 2)`` float64: position code, constant, class directions.
    identity_basis : Tensor
        ``(hidden, head_dim)`` float64: the subspace of the word embeddings read by ``'identity'``.
    prev_basis : Tensor, optional
        ``(hidden, head_dim)`` float64: the previous-token subspace read by ``'induction'`` keys.
    sink_basis : Tensor, optional
        ``(hidden,)`` float64: the direction of the special tokens read by ``'offset+sink'`` keys.

    Examples
    --------
    Query 2 of an offset-1 head scores key 3 highest (``K = 2``: ``2`` there, ``-1/2`` at every other key):

    >>> import torch
    >>> eye = torch.eye(10, dtype=torch.float64)
    >>> basis, ident = eye[:, :6], eye[:, 6:]
    >>> Wq, Wk = structured_weights("offset", 1, 4, basis, ident)
    >>> P = position_code(7, 4, 1.0, basis)
    >>> ((P @ Wq.T) @ (P @ Wk.T).T)[2].tolist()
    [-0.5, -0.5, -0.5, 2.0, -0.5, -0.5, -0.5]
    >>> structured_weights("diagonal", 0, 4, basis, ident)
    Traceback (most recent call last):
    ValueError: unknown pattern 'diagonal'; expected one of ('offset', 'class', 'identity', 'induction', 'offset+sink')
    """
    U = basis[:, :head_dim]
    if pattern == "offset":
        return _rotation(head_dim, offset) @ U.T, U.T.clone()
    if pattern == "offset+sink":
        if head_dim < 4 or sink_basis is None:
            raise ValueError(f"pattern 'offset+sink' needs head_dim >= 4 and sink_basis, got {head_dim}")
        m = head_dim - 2
        Wq, Wk = torch.zeros(head_dim, basis.shape[0], dtype=torch.float64), torch.zeros_like(U.T)
        Wq[:m], Wk[:m] = _rotation(head_dim, offset)[:m, :m] @ U[:, :m].T, U[:, :m].T
        Wq[-1], Wk[-1] = math.sqrt(head_dim) * basis[:, head_dim], 0.6 * math.sqrt(head_dim) * sink_basis
        return Wq, Wk
    if pattern == "class":
        e1 = torch.zeros(head_dim, 1, dtype=torch.float64)
        e1[0] = math.sqrt(head_dim)
        return e1 @ basis[:, head_dim][None], e1 @ basis[:, head_dim + 1][None]
    if pattern == "identity":
        return identity_basis.T.clone(), identity_basis.T.clone()
    if pattern == "induction":
        if prev_basis is None:
            raise ValueError("pattern 'induction' needs prev_basis")
        return identity_basis.T.clone(), prev_basis.T.clone()
    raise ValueError(f"unknown pattern {pattern!r}; expected one of {PATTERNS}")


def pattern_parts(pattern: str, head_dim: int) -> list[tuple[str, slice]]:
    """The parts of a pattern, each with the rows of the head's query and key weights it lives on.

    A pattern with two roles plants each on its own rows (:func:`structured_weights`), so that each part can be
    calibrated on its own: ``'offset+sink'`` is an ``'offset'`` part on rows ``0..head_dim - 3`` and a ``'sink'`` part
    (the special tokens, :data:`SINK_TOKENS`) on the last row; every other pattern is one part on all rows.

    Examples
    --------
    >>> pattern_parts("offset+sink", 16)
    [('offset', slice(0, 14, None)), ('sink', slice(15, 16, None))]
    >>> pattern_parts("identity", 16)
    [('identity', slice(0, 16, None))]
    """
    if pattern == "offset+sink":
        return [("offset", slice(0, head_dim - 2)), ("sink", slice(head_dim - 1, head_dim))]
    return [(pattern, slice(0, head_dim))]


def target_mask(pattern: str, offset: int, input_ids: torch.Tensor, class_ids: torch.Tensor,
                sink_ids: torch.Tensor | None = None) -> torch.Tensor:
    """``(B, L, L)`` bool: the keys ``j`` a head of this pattern should attend to from query ``i``.

    ``'offset'``: ``j = i + offset``; ``'class'``: ``input_ids[j]`` in ``class_ids``; ``'identity'``:
    ``input_ids[j] == input_ids[i]`` (``j = i`` included); ``'induction'``: ``input_ids[j - 1] ==
    input_ids[i]`` with ``j - 1 != i``; ``'offset+sink'``: ``'offset'``'s key or a special token (``sink_ids``);
    ``'sink'`` (a part of ``'offset+sink'``, :func:`pattern_parts`): a special token.

    Parameters
    ----------
    pattern : {'offset', 'class', 'identity', 'induction', 'offset+sink', 'sink'}
    offset : int
    input_ids : Tensor
        ``(B, L)`` token ids.
    class_ids : Tensor
        Ids of the class tokens (:data:`CLASS_TOKENS`).
    sink_ids : Tensor, optional
        Ids of the special tokens (:data:`SINK_TOKENS`; ``'offset+sink'``).

    Examples
    --------
    >>> import torch
    >>> ids, cls = torch.tensor([[101, 7, 9, 7, 102]]), torch.tensor([101, 102])
    >>> target_mask("offset", 1, ids, cls)[0, 1].int().tolist()
    [0, 0, 1, 0, 0]
    >>> target_mask("class", 0, ids, cls)[0, 1].int().tolist()
    [1, 0, 0, 0, 1]
    >>> target_mask("identity", 0, ids, cls)[0, 1].int().tolist()
    [0, 1, 0, 1, 0]
    >>> target_mask("induction", 0, ids, cls)[0, 3].int().tolist()    # 7 at 1 and 3: the key after 1
    [0, 0, 1, 0, 0]
    """
    B, L = input_ids.shape
    if pattern == "offset+sink":
        return target_mask("offset", offset, input_ids, class_ids) | target_mask("sink", 0, input_ids, class_ids, sink_ids)
    if pattern == "sink":
        return torch.isin(input_ids, sink_ids)[:, None, :].expand(B, L, L)
    if pattern == "offset":
        i = torch.arange(L)
        return ((i[None, :] - i[:, None]) == offset).expand(B, L, L)
    if pattern == "class":
        return torch.isin(input_ids, class_ids)[:, None, :].expand(B, L, L)
    if pattern == "identity":
        return input_ids[:, :, None] == input_ids[:, None, :]
    if pattern == "induction":
        i = torch.arange(L)
        prev = torch.cat([input_ids[:, :1], input_ids[:, :-1]], 1)
        return (input_ids[:, :, None] == prev[:, None, :]) & ((i[None, :] - 1) != i[:, None]) & (i[None, :] >= 1)
    raise ValueError(f"unknown pattern {pattern!r}; expected one of {PATTERNS}")


def allowed_pairs(valid: torch.Tensor, causal: bool) -> torch.Tensor:
    """``(B, L, L)`` bool: query ``i`` may attend to key ``j`` (both real; ``j <= i`` when causal), for rows
    with at least two allowed keys (attnspec's fit skips rows with one).

    Parameters
    ----------
    valid : Tensor
        ``(B, L)`` bool: real (not padding) tokens.
    causal : bool

    Examples
    --------
    >>> import torch
    >>> allowed_pairs(torch.tensor([[True, True, True, False]]), causal=True)[0].int().tolist()
    [[0, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [0, 0, 0, 0]]
    """
    al = valid[:, :, None] & valid[:, None, :]
    if causal:
        al = al & torch.ones(valid.shape[1], valid.shape[1], dtype=torch.bool).tril()
    return al & (al.sum(-1, keepdim=True) >= 2)


def _centered_logits(X: torch.Tensor, allowed: torch.Tensor, Wq: torch.Tensor, Wk: torch.Tensor) -> torch.Tensor:
    """Row-centered logits ``q_i . k_j / sqrt(d)`` per head ``(B, H, L, L)``, 0 off allowed pairs.

    ``X``: ``(B, L, D)``; ``allowed``: ``(B, L, L)`` bool (:func:`allowed_pairs`); ``Wq``, ``Wk``:
    ``(H, d, D)`` (one block of projection rows per head).
    """
    q = torch.einsum("bld,hkd->bhlk", X, Wq)
    k = torch.einsum("bld,hkd->bhlk", X, Wk)
    S = q @ k.transpose(-1, -2) / math.sqrt(Wq.shape[1])
    al = allowed[:, None].to(S.dtype)
    n = al.sum(-1, keepdim=True).clamp_min(1)
    return (S - (S * al).sum(-1, keepdim=True) / n) * al


def score_scale(X: torch.Tensor, allowed: torch.Tensor, Wq: torch.Tensor, Wk: torch.Tensor) -> torch.Tensor:
    """``sqrt(mean S^2)`` of the row-centered logits over allowed pairs, per head ``(H,)`` (attnspec's
    ``score_scale`` on these inputs).

    ``S_ij = q_i . k_j / sqrt(d) - mean_{j' allowed} q_i . k_j' / sqrt(d)``, the mean of ``S^2`` taken over
    every allowed (text, query, key); homogeneous of degree one in ``Wq`` and in ``Wk``.

    Parameters
    ----------
    X : Tensor
        ``(B, L, D)`` float64, what the projections read.
    allowed : Tensor
        ``(B, L, L)`` bool (:func:`allowed_pairs`).
    Wq, Wk : Tensor
        ``(H, d, D)`` float64, one block of projection rows per head.

    Examples
    --------
    >>> import torch
    >>> gen = torch.Generator().manual_seed(0)
    >>> X = torch.randn(2, 5, 8, generator=gen, dtype=torch.float64)
    >>> Wq, Wk = torch.randn(2, 3, 4, 8, generator=gen, dtype=torch.float64)
    >>> allowed = allowed_pairs(torch.ones(2, 5, dtype=torch.bool), causal=False)
    >>> s = score_scale(X, allowed, Wq, Wk)
    >>> tuple(s.shape), bool(torch.allclose(score_scale(X, allowed, 2 * Wq, Wk), 2 * s))
    ((3,), True)
    """
    S = _centered_logits(X, allowed, Wq, Wk)
    return (S.pow(2).sum(dim=(0, 2, 3)) / allowed.sum()).sqrt()


def target_gain(X: torch.Tensor, allowed: torch.Tensor, Wq: torch.Tensor, Wk: torch.Tensor,
                targets: list[torch.Tensor], exclude: list[torch.Tensor] | None = None) -> torch.Tensor:
    """Per head ``(H,)``: mean logit at its target keys minus mean logit at its other allowed keys
    (``targets``: one ``(B, L, L)`` mask per head; ``exclude``, optional: one mask per head of keys that count as
    neither, e.g. the targets of a two-role head's other part). 0 for a head whose targets never occur.

    Logits as in :func:`score_scale` (row-centered, ``1 / sqrt(d)``), pooled over all allowed pairs of
    all texts. A gain ``g`` puts ``e^g`` times more attention on a target key than on a key at the other keys' mean
    logit (the geometric mean of their weights); the arithmetic mean of the weights is larger by ``E[e^Z] / e^{E Z}``
    of the other keys' logits ``Z``, ``e^{beta^2 / 2}`` for Gaussian logits of scale ``beta`` (``e^{4.5} = 90`` at
    beta 3): a gain is a weight only at a low temperature (:func:`role_excess` measures weight).

    Examples
    --------
    An offset-1 head reading the position code (``K = 2``): logit ``1`` at the target, ``-1/4`` at other
    keys, a gap of ``1.25`` within a row; pooled it is smaller, since the last row has no target and the
    aliases ``j = i + 1 +- 5`` score like a target without being one:

    >>> import torch
    >>> eye = torch.eye(10, dtype=torch.float64)
    >>> Wq, Wk = structured_weights("offset", 1, 4, eye[:, :6], eye[:, 6:])
    >>> X = position_code(7, 4, 1.0, eye[:, :6])[None]
    >>> allowed = allowed_pairs(torch.ones(1, 7, dtype=torch.bool), causal=False)
    >>> tgt = target_mask("offset", 1, torch.arange(7)[None], torch.tensor([0]))
    >>> round(float(target_gain(X, allowed, Wq[None], Wk[None], [tgt])[0]), 4)
    1.1192
    """
    S = _centered_logits(X, allowed, Wq, Wk)
    if not targets:
        return torch.zeros(0, dtype=S.dtype)
    tgt = torch.stack(targets, 1)                                   # (B, H, L, L)
    on, off = allowed[:, None] & tgt, allowed[:, None] & ~tgt
    if exclude is not None:
        off = off & ~torch.stack(exclude, 1)
    n_on, n_off = on.sum(dim=(0, 2, 3)), off.sum(dim=(0, 2, 3))
    gap = (S * on).sum(dim=(0, 2, 3)) / n_on.clamp_min(1) - (S * off).sum(dim=(0, 2, 3)) / n_off.clamp_min(1)
    return torch.where((n_on > 0) & (n_off > 0), gap, torch.zeros_like(gap))


def role_excess(X: torch.Tensor, allowed: torch.Tensor, Wq: torch.Tensor, Wk: torch.Tensor, sinks: torch.Tensor,
                targets: torch.Tensor | None = None) -> torch.Tensor:
    """Per head ``(H,)``: the excess fraction of one of attnspec's role rules for the heads' softmax attention.

    ``a_ij = softmax_j(q_i . k_j / sqrt(d))`` over the allowed keys ``A_i``; the sink keys ``X_i = A_i & sinks`` are
    excluded from the real keys ``R_i = A_i - X_i`` (``n_i = |R_i|``, weight ``m_i = sum_{j in R_i} a_ij``); counted
    queries are not sinks themselves and have ``n_i >= 2``. Over the counted queries where the rule's key set is
    nonempty, the excess fraction ``x = (O - E) / (N - E)``, ``E`` the exact expectation of ``O`` under exchangeable
    weights (any beta), ``N`` the most ``O`` can be (docs/theory.md, *Per-query selection*):

    * the sink rule (``targets`` None): ``O = sum_i sum_{j in X_i} a_ij``, ``E = sum_i |X_i| / |A_i|``,
      ``N = sum_i 1``;
    * a per-query rule with key sets ``S_i = targets_i & R_i`` (an offset: :func:`target_mask`):
      ``O = sum_i sum_{j in S_i} a_ij``, ``E = sum_i m_i |S_i| / n_i``, ``N = sum_i m_i``.

    A role needs ``x >= 0.1`` (its interval's lower bound). With ``sinks`` the special tokens these are the
    diagnosis' statistics (its excluded keys, special tokens and each text's first token, are the same keys when every
    text starts with ``[CLS]``). NaN for a head with no counted query.

    Parameters
    ----------
    X : Tensor
        ``(B, L, D)`` float64, what the projections read.
    allowed : Tensor
        ``(B, L, L)`` bool (:func:`allowed_pairs`).
    Wq, Wk : Tensor
        ``(H, d, D)`` float64, one block of projection rows per head.
    sinks : Tensor
        ``(B, L)`` bool: the sink keys (the special tokens, :data:`SINK_TOKENS`).
    targets : Tensor, optional
        ``(B, L, L)`` bool: the key sets of a per-query rule (default: the sink rule).

    Examples
    --------
    Zero weights attend uniformly, the null exactly (``x = 0``); a logit of 10 on the first of 6 keys of a causal
    text makes it a sink (``x`` near 1), and among the other keys the previous token wins nowhere (``x`` near 0):

    >>> import torch
    >>> X = torch.eye(6, dtype=torch.float64)[None]
    >>> allowed = allowed_pairs(torch.ones(1, 6, dtype=torch.bool), causal=True)
    >>> sinks = torch.tensor([[True, False, False, False, False, False]])
    >>> Wq = torch.zeros(2, 1, 6, dtype=torch.float64); Wk = torch.zeros_like(Wq)
    >>> Wq[1, 0] = 10.0; Wk[1, 0, 0] = 1.0          # every query reads 10, only the sink's key reads 1
    >>> [round(float(x), 4) for x in role_excess(X, allowed, Wq, Wk, sinks)]
    [0.0, 0.9998]
    >>> prev = target_mask("offset", -1, torch.zeros(1, 6, dtype=torch.long), torch.tensor([1]))
    >>> [round(float(x), 4) for x in role_excess(X, allowed, Wq, Wk, sinks, prev)]
    [0.0, 0.0]
    """
    q = torch.einsum("bld,hkd->bhlk", X, Wq)
    k = torch.einsum("bld,hkd->bhlk", X, Wk)
    S = (q @ k.transpose(-1, -2) / math.sqrt(Wq.shape[1])).masked_fill(~allowed[:, None], float("-inf"))
    A = torch.softmax(S, -1).nan_to_num(0.0)                                        # rows without a key: 0
    real = allowed & ~sinks[:, None, :]
    n = real.sum(-1)
    counted = ~sinks & (n >= 2)                                                     # (B, L)
    if targets is None:
        keys = allowed & sinks[:, None, :] & counted[:, :, None]
        applies = keys.any(-1)
        E = (keys.sum(-1) / allowed.sum(-1).clamp_min(1)).sum().to(A.dtype)
        N = applies.sum().to(A.dtype)
    else:
        keys = targets & real & counted[:, :, None]
        applies = keys.any(-1)
        m = torch.einsum("bhlk,blk->bhl", A, (real & applies[:, :, None]).to(A.dtype))
        E = torch.einsum("bhl,bl->h", m, (keys.sum(-1) / n.clamp_min(1)).to(A.dtype))
        N = m.sum(dim=(0, 2))
    O = torch.einsum("bhlk,blk->h", A, keys.to(A.dtype))
    return torch.where(applies.any(), (O - E) / (N - E), torch.full_like(O, float("nan")))
