"""The dependence verdict (issue 14): leave-one-out background, the test against the interval, head aggregation."""
import numpy as np
import pytest

from attnspec.diagnostics.result import dependence_verdict as dv


def _brute_background(e, shared):
    keep = ~shared if (~shared).any() else np.ones_like(shared)
    out = np.full(e.size, np.nan)
    for p in range(e.size):
        others = e[keep & (np.arange(e.size) != p)]
        others = others[np.isfinite(others)]
        if others.size:
            out[p] = np.median(others)
    return out


def test_background_is_the_leave_one_out_median():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 40))
        e = np.round(rng.random(n), 1)                 # ties included
        shared = rng.random(n) < rng.random()
        if rng.random() < 0.3:
            e[rng.integers(n)] = np.nan
        np.testing.assert_allclose(dv.background(e, shared), _brute_background(e, shared), equal_nan=True)


def test_verdict_rule_and_the_token_minimum():
    e = np.array([0.9, 0.10, 0.12, 0.20, 0.11, 0.09, np.nan])
    lo, hi = e - 0.04, e + 0.04
    b, v = dv.pair_verdicts(e, lo, hi, np.zeros(7, bool), 0.1, True, True)
    assert v.tolist() == ["dependent", "independent", "independent", "undetermined", "independent", "independent",
                          "undetermined"]
    assert (lo[v == "dependent"] - b[v == "dependent"] >= 0.1).all()
    assert (hi[v == "independent"] - b[v == "independent"] < 0.1).all()
    assert set(dv.pair_verdicts(e, lo, hi, np.zeros(7, bool), 0.1, False, True)[1]) == {"undetermined"}
    # without intervals (no replicates, or too few texts) no pair is decided, whatever its point excess
    assert set(dv.pair_verdicts(e, lo, hi, np.zeros(7, bool), 0.1, True, False)[1]) == {"undetermined"}
    # with replicates, a pair whose interval is missing stays undetermined
    lo[0] = np.nan
    assert dv.pair_verdicts(e, lo, hi, np.zeros(7, bool), 0.1, True, True)[1][0] == "undetermined"
    with pytest.raises(ValueError, match="tau"):
        dv.pair_verdicts(e, lo, hi, np.zeros(7, bool), -0.1, True, True)


def test_heads_take_their_strongest_dependent_partner():
    a, b = np.triu_indices(4, 1)                      # (0,1) (0,2) (0,3) (1,2) (1,3) (2,3)
    v = np.array(["dependent", "dependent", "independent", "independent", "independent", "undetermined"])
    over = np.array([0.2, 0.5, -0.1, 0.0, 0.0, 0.05])
    dep, partner = dv.head_verdicts(4, a, b, v, over)
    assert dep.tolist() == ["dependent", "dependent", "dependent", "undetermined"]
    assert partner.tolist() == [2, 0, 0, -1]
    dep, partner = dv.head_verdicts(1, np.array([], int), np.array([], int), np.array([], str), np.array([]))
    assert dep.tolist() == ["undetermined"] and partner.tolist() == [-1]
