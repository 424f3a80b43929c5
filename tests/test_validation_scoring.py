"""ROC AUC, FPR at a TPR, detector scoring and the random-head beta_hat expectation."""
import numpy as np
import pandas as pd
import pytest

from attnspec.validation.scoring import Detector, fpr_at_tpr, null_beta_hat, roc_auc, score_detectors


def test_roc_auc_known_values():
    y = [False, False, True, True]
    assert roc_auc([1, 2, 3, 4], y) == 1.0
    assert roc_auc([4, 3, 2, 1], y) == 0.0
    assert roc_auc([1, 1, 1, 1], y) == 0.5
    assert roc_auc([1, 3, 2, 4], y) == 0.75
    assert np.isnan(roc_auc([1, 2], [True, True]))
    assert roc_auc([np.nan, 1, 2, 3, 4], [True, *y]) == 1.0       # non-finite scores dropped


def test_roc_auc_matches_pair_counting():
    rng = np.random.default_rng(0)
    s, y = rng.integers(0, 5, 60).astype(float), rng.random(60) < 0.3
    pos, neg = s[y], s[~y]
    expected = ((pos[:, None] > neg[None]).sum() + 0.5 * (pos[:, None] == neg[None]).sum()) / (len(pos) * len(neg))
    assert roc_auc(s, y) == pytest.approx(expected)


def test_fpr_at_tpr():
    s = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0])
    y = np.array([0, 0, 0, 0, 1, 0, 1, 1, 1, 1], bool)
    assert fpr_at_tpr(s, y, 1.0) == pytest.approx(1 / 5)    # threshold 0.5 flags 0.6
    assert fpr_at_tpr(s, y, 0.8) == 0.0                      # threshold 0.7
    assert np.isnan(fpr_at_tpr(s, np.ones(10, bool)))


def test_score_detectors_groups_and_labels():
    heads = pd.DataFrame({"g": [0] * 4 + [1] * 4, "selective": [True, False, False, False] * 2,
                          "pattern": ["class", "", "", ""] * 2, "x": [3, 1, 2, 0, 0, 1, 2, 3],
                          "selection": ["selective", "diffuse", "selective", "diffuse"] * 2})
    det = (Detector("selective", "heads", "x", 1.0, "GE", ("selection", "selective")),)
    res = score_detectors(heads, pd.DataFrame(), ["g"], det)
    r = res.set_index(["g", "subset"])
    assert r.loc[(0, "all"), "auc"] == 1.0 and r.loc[(1, "all"), "auc"] == 0.0
    assert r.loc[(0, "class"), "n_pos"] == 1 and r.loc[(0, "all"), "n_neg"] == 3
    assert r.loc[(0, "all"), "label_tpr"] == 1.0 and r.loc[(0, "all"), "label_fpr"] == pytest.approx(1 / 3)


def test_null_beta_hat_is_unbiased_when_cool_and_saturates_when_hot():
    lengths = [24] * 16
    assert null_beta_hat(0.3, lengths) == pytest.approx(0.3, rel=0.03)
    hot = null_beta_hat(3.0, lengths)
    assert 1.0 < hot < 2.5
    assert null_beta_hat(3.0, lengths) == hot                     # seeded


def test_bad_inputs_name_the_parameter():
    with pytest.raises(ValueError, match="tpr must be in"):
        fpr_at_tpr([1, 2], [True, False], 0.0)
    with pytest.raises(ValueError, match="beta must be > 0"):
        null_beta_hat(0.0, [8])
    with pytest.raises(ValueError, match="lengths must include"):
        null_beta_hat(1.0, [])
