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
  read the same random ``head_dim``-dimensional subspace of the word embeddings.
"""
from __future__ import annotations

import math

import torch

__all__ = ["PATTERNS", "CLASS_TOKENS", "position_code", "structured_weights", "target_mask", "allowed_pairs",
           "centered_logits", "score_scale", "target_gain"]

#: Structured attention patterns of selective heads.
PATTERNS = ("offset", "class", "identity")
#: Tokens of the 'class' pattern (attention sinks of trained BERTs).
CLASS_TOKENS = ("[CLS]", "[SEP]", ".", ",")


def _omega(head_dim: int) -> torch.Tensor:
    K = head_dim // 2
    return 2 * math.pi * torch.arange(1, K + 1, dtype=torch.float64) / (2 * K + 1)


def position_code(n_positions: int, head_dim: int, amplitude: float, basis: torch.Tensor) -> torch.Tensor:
    """``(n_positions, hidden)`` position embeddings: sinusoids in ``basis[:, :head_dim]``."""
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
                       identity_basis: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Unit-gain query and key weights ``(head_dim, hidden)`` of one structured pattern."""
    U = basis[:, :head_dim]
    if pattern == "offset":
        return _rotation(head_dim, offset) @ U.T, U.T.clone()
    if pattern == "class":
        e1 = torch.zeros(head_dim, 1, dtype=torch.float64)
        e1[0] = math.sqrt(head_dim)
        return e1 @ basis[:, head_dim][None], e1 @ basis[:, head_dim + 1][None]
    if pattern == "identity":
        return identity_basis.T.clone(), identity_basis.T.clone()
    raise ValueError(f"unknown pattern {pattern!r}; expected one of {PATTERNS}")


def target_mask(pattern: str, offset: int, input_ids: torch.Tensor, class_ids: torch.Tensor) -> torch.Tensor:
    """``(B, L, L)`` bool: the keys ``j`` a head of this pattern should attend to from query ``i``."""
    B, L = input_ids.shape
    if pattern == "offset":
        i = torch.arange(L)
        return ((i[None, :] - i[:, None]) == offset).expand(B, L, L)
    if pattern == "class":
        return torch.isin(input_ids, class_ids)[:, None, :].expand(B, L, L)
    if pattern == "identity":
        return input_ids[:, :, None] == input_ids[:, None, :]
    raise ValueError(f"unknown pattern {pattern!r}; expected one of {PATTERNS}")


def allowed_pairs(valid: torch.Tensor, causal: bool) -> torch.Tensor:
    """``(B, L, L)`` bool: query ``i`` may attend to key ``j`` (both real; ``j <= i`` when causal), for rows
    with at least two allowed keys (attnspec's fit skips rows with one)."""
    al = valid[:, :, None] & valid[:, None, :]
    if causal:
        al = al & torch.ones(valid.shape[1], valid.shape[1], dtype=torch.bool).tril()
    return al & (al.sum(-1, keepdim=True) >= 2)


def centered_logits(X: torch.Tensor, allowed: torch.Tensor, Wq: torch.Tensor, Wk: torch.Tensor) -> torch.Tensor:
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
    ``score_scale`` on these inputs)."""
    S = centered_logits(X, allowed, Wq, Wk)
    return (S.pow(2).sum(dim=(0, 2, 3)) / allowed.sum()).sqrt()


def target_gain(X: torch.Tensor, allowed: torch.Tensor, Wq: torch.Tensor, Wk: torch.Tensor,
                targets: list[torch.Tensor]) -> torch.Tensor:
    """Per head ``(H,)``: mean logit at its target keys minus mean logit at its other allowed keys
    (``targets``: one ``(B, L, L)`` mask per head). 0 for a head whose targets never occur."""
    S = centered_logits(X, allowed, Wq, Wk)
    out = torch.zeros(len(targets), dtype=S.dtype)
    for h, tgt in enumerate(targets):
        on, off = allowed & tgt, allowed & ~tgt
        if on.any() and off.any():
            out[h] = S[:, h][on].mean() - S[:, h][off].mean()
    return out
