"""The layer's spectrum without each head from the layer's own eigenvectors (``removal_spectra='ritz'``, the default)
against its exact eigenvalues (``'exact'``): Rayleigh-Ritz values on blocks of the layer's eigenvectors agree to
first order in the head's output (with blocks of one the error falls like its square), have the exact mean, are
exact when a block covers the layer, in both Gram forms; on MiniLM they change only the ``removal_spec_shift``
columns, which rank the heads as the exact ones do."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from attnspec.diagnostics.statistics.spectral import center, layer_eigs_ritz, layer_eigs_without_each


def _heads(B: int, H: int, L: int, dh: int, d_out: int, small: float, seed: int = 0):
    """Centered contexts and output projections whose head 0 is ``small`` times the size of the others."""
    g = torch.Generator().manual_seed(seed)
    M = center(torch.randn(B, H, L, dh, generator=g, dtype=torch.float64), torch.ones(B, L, dtype=torch.bool))
    W = torch.randn(H, dh, d_out, generator=g, dtype=torch.float64)
    W[0] *= small
    return M, W


@pytest.mark.parametrize("L, d_out", [(12, 40), (40, 12)], ids=["tokens <= d_out", "tokens > d_out"])
def test_first_order_error_falls_like_the_square_of_the_head(L, d_out):
    lengths = np.full(2, L)
    errors = []
    for small in (0.1, 0.05, 0.025):
        M, W = _heads(2, 4, L, 3, d_out, small)
        layer, fo = layer_eigs_ritz(M, W, lengths, 1.0, block=1)
        exact = layer_eigs_without_each(M, W, lengths, 1.0)
        np.testing.assert_allclose(fo.sum(1), exact.sum(1), rtol=1e-10)          # the mean is exact
        np.testing.assert_allclose(layer_eigs_ritz(M, W, lengths, 1.0, block=12)[1], exact, rtol=1e-9, atol=1e-9)
        shift = np.abs(exact[0] - layer).max()                                     # first order in `small`
        errors.append((np.abs(fo[0] - exact[0]).max(), shift))
    (e1, s1), (e2, s2), (e3, s3) = errors
    assert 1.6 < s1 / s2 < 2.4 and 1.6 < s2 / s3 < 2.4                            # the shift halves
    assert e1 / e2 > 3.0 and e2 / e3 > 3.0                                        # the error quarters
    assert e3 < 0.05 * s3


def test_larger_blocks_come_closer_to_the_exact_spectra():
    M, W = _heads(2, 3, 48, 24, 64, 1.0, seed=2)                                  # heads of equal size: far from small
    lengths = np.full(2, 48)
    exact = layer_eigs_without_each(M, W, lengths, 1.0)
    err = [np.abs(layer_eigs_ritz(M, W, lengths, 1.0, block=k)[1] - exact).mean() for k in (1, 8, 24, 48)]
    assert err[0] > err[1] > err[2] > 1e3 * err[3], err


def test_text_blocks_and_padding_change_nothing():
    M, W = _heads(3, 5, 40, 4, 60, 1.0, seed=1)
    valid = torch.ones(3, 40, dtype=torch.bool)
    valid[1, 35:] = False                                                          # a shorter text, padded
    M = center(M, valid)
    lengths = valid.sum(1).numpy()
    whole = layer_eigs_ritz(M, W, lengths, 2.0)
    text_by_text = layer_eigs_ritz(M, W, lengths, 2.0, max_bytes=1)
    np.testing.assert_array_equal(whole[0], text_by_text[0])
    top = np.abs(whole[1]).max()                  # the zero eigenvalues (rank H d_head < L) are round-off of the products
    np.testing.assert_allclose(whole[1], text_by_text[1], rtol=1e-12, atol=1e-14 * top)
    alone = layer_eigs_ritz(M[1:2, :, :35], W, lengths[1:2], 2.0)                 # the short text without padding
    n = lengths[0] - 1
    np.testing.assert_allclose(whole[0][n:n + 34], alone[0], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(whole[1][:, n:n + 34].sum(1), alone[1].sum(1), rtol=1e-9)


def test_minilm_ritz_changes_only_the_spectral_shift():
    from attnspec import diagnose
    from attnspec.data import packed_texts
    from attnspec.models import load_model
    torch.set_num_threads(1)
    model, tok = load_model("minilm")
    texts = packed_texts(tok, 10, 64)                                              # 64 tokens: two Ritz blocks
    d = {how: diagnose(model, tok, texts, max_length=64, removal=False, gradient=False, min_tokens=0, n_boot=20,
                       removal_spectra=how) for how in ("exact", "ritz")}
    ex, rz = d["exact"].heads, d["ritz"].heads
    shifts = [c for c in ex.columns if c.startswith("removal_spec_shift")]
    assert len(shifts) == 4
    for c in ex.columns.difference(shifts):
        assert ex[c].equals(rz[c]), c
    for c in ("removal_spec_shift", "removal_spec_shift_ge"):
        assert not np.allclose(ex[c], rz[c], rtol=1e-6), c                         # not the exact spectra
        assert spearmanr(ex[c], rz[c])[0] > 0.99, c
        assert np.median(np.abs(rz[c] / ex[c] - 1)) < 0.01, c
    assert d["ritz"].summary["options"]["removal_spectra"] == "ritz"
    np.testing.assert_allclose(d["exact"].layers["spec_m1"], d["ritz"].layers["spec_m1"], rtol=1e-5)


def test_an_unknown_method_is_refused_by_name():
    from attnspec.diagnostics import DiagnoseOptions
    with pytest.raises(ValueError, match="removal_spectra.*ritz.*exact"):
        DiagnoseOptions(removal_spectra="first-order")


def test_a_head_without_output_leaves_the_layer_as_it_is():
    M, W = _heads(2, 3, 50, 4, 80, 1.0, seed=3)                                   # 50 tokens: two Ritz blocks
    W[1] = 0                                                                       # a pruned W_O slice
    lengths = np.full(2, 50)
    layer, removed = layer_eigs_ritz(M, W, lengths, 1.0)
    np.testing.assert_allclose(removed[1], layer, rtol=1e-9, atol=1e-9)
    assert not np.allclose(removed[0], layer, rtol=1e-3)
