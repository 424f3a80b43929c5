"""Step 3's shortcuts give the numbers of the direct computations: the CKA influences without the texts'
Grams, step 2's Gram sum instead of a second one, and the tables built with layers in parallel."""
import numpy as np
import pytest
import torch

from attnspec.diagnostics.statistics import dependence as dep
from attnspec.diagnostics.statistics.bootstrap import weights
from attnspec.diagnostics.statistics.spectral import center
from attnspec.diagnostics.pipeline.fit import LayerFitSums, NullFitSums
from attnspec.diagnostics.pipeline.spectra import LayerSpectra, cka_influence, layer_batch_spectra
from attnspec.diagnostics.options import DiagnoseOptions
from attnspec.diagnostics.result.tables import TableOptions, build_tables
from attnspec.diagnostics.pipeline.head_removal import RemovalSums
from attnspec.diagnostics.pipeline.collect import tiny_layer
from attnspec.models.tiny import tiny_causal_lm


def _per_text_influence(M: torch.Tensor, C: np.ndarray) -> np.ndarray:
    """The definition: ``IF[b, g, h] = <C_gh, M_bg^T M_bh>_F`` from each text's full Gram."""
    B, H, L, dh = M.shape
    blocks = np.empty((H, dh, H, dh))                        # the full Gram from its upper blocks
    for p, (g, h) in enumerate(zip(*dep.pair_blocks(H))):
        blocks[g, :, h, :], blocks[h, :, g, :] = C[p], C[p].T
    out = np.empty((B, H, H))
    for b in range(B):
        X = M[b].double().transpose(0, 1).reshape(L, H * dh).numpy()
        out[b] = np.einsum("gahc,gahc->gh", blocks, (X.T @ X).reshape(H, dh, H, dh))
    return out


@pytest.mark.parametrize("shape", [(5, 3, 9, 4), (3, 2, 6, 16), (4, 1, 7, 3)])
@pytest.mark.parametrize("max_bytes", [1, 8 * 9 * 3 * 4 * 2 * 2, 2 ** 25])
def test_cka_influence_is_the_per_text_definition(shape, max_bytes):
    g = torch.Generator().manual_seed(sum(shape))
    B, H, L, dh = shape
    valid = torch.ones(B, L, dtype=torch.bool)
    valid[0, -2:] = False                                    # a padded text
    M = center(torch.randn(*shape, generator=g), valid)
    C = dep.gram_blocks(M) + 0.5 * dep.gram_blocks(center(torch.randn(*shape, generator=g), valid))
    IF = cka_influence(M, C, max_bytes=max_bytes)
    ref = _per_text_influence(M, C)
    assert IF.shape == (B, H, H)
    np.testing.assert_allclose(IF, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())
    np.testing.assert_array_equal(IF, np.swapaxes(IF, 1, 2))


def test_cka_influence_rejects_a_bad_budget():
    M = torch.zeros(1, 1, 2, 2)
    with pytest.raises(ValueError, match="max_bytes must be >= 1"):
        cka_influence(M, np.zeros((2, 2)), max_bytes=0)


def _layer_inputs():
    ad, batch, lb = tiny_layer()
    W = ad.sites[0].w_out()
    sums = LayerFitSums().update(lb, W, 0, 20)
    f = sums.fit()
    f0 = NullFitSums().update(lb.allowed, lb.valid, lb.order, 0, 2, 16, f["score_scale"], 0, 6).fit()
    return lb, W, sums, f, f0


def test_step_two_gram_is_the_gram_step_three_would_sum():
    """Given step 2's Gram sum, step 3 skips its own: the two are the same numbers, bit for bit."""
    lb, W, sums, f, f0 = _layer_inputs()
    own = layer_batch_spectra(lb, W, f, f0, sums.head_power(), reference_seed=0)
    reused = layer_batch_spectra(lb, W, f, f0, sums.head_power(), 0, sums.gram, weights(0, lb.order, 20))
    assert np.ndim(own["gram"]) == 3 and reused["gram"] == 0.0
    np.testing.assert_array_equal(own["gram"], sums.gram)
    np.testing.assert_array_equal(own["layer"]["free"], reused["layer"]["free"])
    for k in own["heads"]:
        for a, b in zip(own["heads"][k], reused["heads"][k]):
            np.testing.assert_array_equal(a, b)


def _tables(threads: int, reuse: bool):
    ad, batch = tiny_causal_lm()
    from attnspec.diagnostics.pipeline.collect import collect
    lbs, W = collect(ad, batch), [s.w_out() for s in ad.sites]
    sums = [LayerFitSums().update(lb, w, 0, 20) for lb, w in zip(lbs, W)]
    fits = [s.fit() for s in sums]
    nulls = [NullFitSums().update(lb.allowed, lb.valid, lb.order, lb.index, 2, 16, f["score_scale"], 0, 6, n_boot=20)
             for lb, f in zip(lbs, fits)]
    spectra = [LayerSpectra(2, head_dim=16, d_out=32).update(layer_batch_spectra(
        lb, w, f, n.fit(), s.head_power(), 0, s.gram if reuse else None, weights(0, lb.order, 20) if reuse else None))
        for lb, w, f, n, s in zip(lbs, W, fits, nulls, sums)]
    if not reuse:                           # the same CKA influences, computed with the layer's own Gram sum
        for sp, lb, w, f, n, s in zip(spectra, lbs, W, fits, nulls, sums):
            sp.boot_cka = layer_batch_spectra(lb, w, f, n.fit(), s.head_power(), 0, sp.gram,
                                              weights(0, lb.order, 20))["boot_cka"]
    opt = TableOptions(DiagnoseOptions(gradient=False, n_boot=20, min_tokens=0), removal="none")
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return build_tables(ad.sites, sums, fits, spectra, RemovalSums(), W, 6, opt, nulls)
    finally:
        torch.set_num_threads(old)


def test_tables_do_not_depend_on_threads_or_on_the_gram_source():
    import pandas as pd
    ref = _tables(1, reuse=False)
    assert np.isfinite(ref[2]["cka_excess_lo"]).all()          # the CKA intervals are there
    for threads, reuse in ((1, True), (2, True), (2, False)):
        for a, b in zip(ref, _tables(threads, reuse)):
            pd.testing.assert_frame_equal(a, b, check_exact=True)
