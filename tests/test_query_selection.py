"""Per-query selection statistic: the null, merging across shards, planted patterns."""
import numpy as np
import pytest
import torch

from attnspec.diagnostics.statistics.query_selection import COLUMNS, QuerySelectionSums, verdict


def _texts(n_texts, L, causal, seed, H=4, beta=2.0, vocab=300):
    """Gaussian-score heads (the null) on ``n_texts`` texts of random lengths with Zipf tokens."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(max(4, L // 2), L + 1, (n_texts,), generator=g)
    Lm = int(lengths.max())
    valid = torch.arange(Lm)[None] < lengths[:, None]
    special = torch.zeros_like(valid)
    special[:, 0] = True
    p = 1.0 / torch.arange(1, vocab + 1).double()
    tokens = torch.multinomial(p / p.sum(), n_texts * Lm, replacement=True, generator=g).reshape(n_texts, Lm)
    al = valid[:, :, None] & valid[:, None, :]
    if causal:
        al = al & torch.ones(Lm, Lm, dtype=torch.bool).tril()
    G = torch.randn(n_texts, H, Lm, Lm, generator=g, dtype=torch.float64)
    A = torch.softmax((beta * G).masked_fill(~al[:, None], -float("inf")), -1).nan_to_num(0.0)
    return A, al, valid, tokens, special


def _accumulate(qs, A, al, valid, tokens, special, w, tile=16):
    for r0 in range(0, A.shape[2], tile):
        rows = slice(r0, min(A.shape[2], r0 + tile))
        qs.update(A[:, :, rows], rows, al[:, rows], valid, tokens, w, special)
    return qs


@pytest.mark.parametrize("beta", [0.5, 2.0, 8.0])
@pytest.mark.parametrize("causal", [True, False])
def test_random_gaussian_head_is_not_selective(beta, causal):
    A, al, valid, tokens, special = _texts(24, 48, causal, seed=int(beta * 10) + causal, H=6, beta=beta)
    w = np.random.default_rng(0).poisson(1.0, (200, A.shape[0])).astype(float)
    res = _accumulate(QuerySelectionSums(6, 200), A, al, valid, tokens, special, w).result()
    assert set(res) == set(COLUMNS)
    assert not (res["query_selection"] == "selective").any()
    assert np.nanmax(np.abs(res["query_selection_score"])) < 0.1


def test_null_mean_is_exact_at_every_beta():
    """Averaged over many draws the excess of a Gaussian head is 0 (the null's expectation is exact)."""
    for beta in (0.5, 8.0):
        A, al, valid, tokens, special = _texts(64, 24, True, seed=3, H=16, beta=beta)
        qs = _accumulate(QuerySelectionSums(16, 0), A, al, valid, tokens, special, None)
        x = qs.excess()                                                   # (H, R)
        ok = qs.count > 0
        pooled = (qs.observed - qs.expected).sum(0)[ok] / (qs.capacity - qs.expected).sum(0)[ok]
        assert np.all(np.abs(pooled) < 0.02), (beta, pooled)
        assert np.isfinite(x).any()


def test_merge_equals_one_accumulator():
    A, al, valid, tokens, special = _texts(10, 30, True, seed=1)
    w = np.random.default_rng(1).poisson(1.0, (50, 10)).astype(float)
    whole = _accumulate(QuerySelectionSums(4, 50), A, al, valid, tokens, special, w)
    parts = [_accumulate(QuerySelectionSums(4, 50), A[s], al[s], valid[s], tokens[s], special[s], w[:, s], tile=7)
             for s in (slice(0, 4), slice(4, 10))]
    merged = parts[0].merge(parts[1])
    for k in ("observed", "expected", "capacity", "count", "boot_observed", "boot_expected", "boot_capacity"):
        np.testing.assert_allclose(getattr(merged, k), getattr(whole, k), rtol=1e-12, atol=1e-12)
    assert merged.n_queries == whole.n_queries
    a, b = merged.result(), whole.result()
    np.testing.assert_allclose(a["query_selection_score_lo"], b["query_selection_score_lo"], rtol=1e-12)
    assert (a["query_selection"] == b["query_selection"]).all()
    with pytest.raises(ValueError):
        parts[0].merge(QuerySelectionSums(3, 50))


def _planted(kind, n_texts=16, L=40, seed=0, gain=6.0):
    """One head with a planted rule on top of Gaussian scores, beside a Gaussian head."""
    A, al, valid, tokens, special = _texts(n_texts, L, True, seed=seed, H=1, beta=2.0)
    Lm = A.shape[-1]
    i, j = torch.arange(Lm)[:, None], torch.arange(Lm)[None, :]
    if kind == "offset":
        target = (j == i - 1).expand(n_texts, Lm, Lm)
    elif kind == "identity":
        target = (j == i).expand(n_texts, Lm, Lm)
    else:                                                                   # induction on a repeated sequence
        half = Lm // 2
        tokens[:, half:2 * half] = tokens[:, :half]
        prev = torch.cat([tokens[:, :1], tokens[:, :-1]], 1)
        target = (prev[:, None, :] == tokens[:, :, None]) & (j - 1 != i) & (j >= 1)
    g = torch.Generator().manual_seed(seed + 100)
    S = 2.0 * torch.randn(n_texts, 1, Lm, Lm, generator=g, dtype=torch.float64) + gain * target[:, None]
    B = torch.softmax(S.masked_fill(~al[:, None], -float("inf")), -1).nan_to_num(0.0)
    return torch.cat([B, A], 1), al, valid, tokens, special


@pytest.mark.parametrize("kind,rule", [("offset", "offset -1"), ("identity", "offset 0"), ("induction", "induction")])
def test_planted_rule_is_found(kind, rule):
    A, al, valid, tokens, special = _planted(kind)
    w = np.random.default_rng(2).poisson(1.0, (100, A.shape[0])).astype(float)
    res = _accumulate(QuerySelectionSums(2, 100), A, al, valid, tokens, special, w).result()
    assert res["query_selection"].tolist() == ["selective", "not selective"]
    assert res["query_selection_rule"][0] == rule
    assert res["query_selection_kind"][0] == ("content" if kind == "induction" else "positional")
    assert res["query_selection_score"][0] > 0.5


def test_sink_mass_does_not_count_against_the_rule():
    """A previous-token head that parks 90 % of every row on the first token is still fully selective."""
    B, L = 16, 32                                                # 16 x 30 = 480 counted queries
    al = torch.ones(L, L, dtype=torch.bool).tril().expand(B, L, L)
    A = torch.zeros(B, 1, L, L, dtype=torch.float64)
    A[:, 0, :, 0] = 0.9
    A[:, 0, torch.arange(1, L), torch.arange(0, L - 1)] += 0.1
    A[:, 0, 0, 0], A[:, 0, 1, 0] = 1.0, 1.0
    valid = torch.ones(B, L, dtype=torch.bool)
    w = np.random.default_rng(0).poisson(1.0, (50, B)).astype(float)      # bootstrap weights of the texts
    qs = QuerySelectionSums(1, 50).update(A, slice(0, L), al, valid, None, w, None)
    res = qs.result()
    assert res["query_selection_rule"][0] == "offset -1" and res["query_selection_score"][0] > 0.99
    assert res["query_selection"][0] == "selective"
    assert qs.result(intervals=False)["query_selection"][0] == "undetermined"   # no interval, no verdict
    assert np.isnan(qs.excess()[0, -3:-1]).all()                # no tokens: no content rule
    sink = qs.rules.index("sink")                                # its own role: 90 % on the first token
    assert qs.excess()[0, sink] > 0.85 and qs.roles()["verdict"][0, sink] == "selective"


def test_verdict_rules():
    assert verdict(0.5, 0.3, 0.7) == "selective"
    assert verdict(0.05, 0.0, 0.09) == "not selective"
    assert verdict(0.2, 0.05, 0.3) == "undetermined"
    assert verdict(float("nan"), float("nan"), float("nan")) == "undetermined"
    assert verdict(0.5, 0.3, 0.7, n_queries=10) == "undetermined"
