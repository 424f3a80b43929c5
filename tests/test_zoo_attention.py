"""The zoo's attention primitive through the library: structure masks, head removal, protocol, entropy gap, SPD."""
import math

import numpy as np
import pytest
import torch

from attnspec.models import HeadEdit, ablate, adapt, capture
from attnspec.models.custom import custom_adapter, custom_inputs
from attnspec.zoo.anisotropic import AnisotropicAttentionNet
from attnspec.zoo.attention import MHA
from attnspec.zoo.diffuse import DiffuseCorrectionNet
from attnspec.zoo.entropy_gap import entropy_gap, entropy_gap_table, null_normalized_entropy


def _x(B=3, C=22, T=128, seed=0):
    return 1e-5 * torch.randn(B, C, T, generator=torch.Generator().manual_seed(seed))


def test_structure_masks_restrict_attention_to_own_electrode_and_own_patch():
    torch.manual_seed(0)
    m = AnisotropicAttentionNet(22, 128, 2, patch=32).eval()
    P = m.n_patches
    adapter = custom_adapter(m)
    batch = custom_inputs(adapter, _x())
    with torch.no_grad(), capture(adapter.sites) as cap:
        adapter.run(batch)
    tok = torch.arange(22 * P)
    for i, (name, same) in enumerate((("blocks.0.temporal", tok[:, None] // P == tok[None] // P),
                                      ("blocks.0.spatial", tok[:, None] % P == tok[None] % P))):
        site, A, V = adapter.sites[i], cap.weights[i], cap.values[i]
        assert site.name == name and site.path in name
        assert torch.all(A[..., ~same] == 0)                               # nothing outside the block
        assert torch.all(A[..., same] > 0)
        torch.testing.assert_close(A.sum(-1), torch.ones_like(A.sum(-1)))
        ctx = (A @ V).transpose(1, 2).reshape(3, 22 * P, -1)
        torch.testing.assert_close(cap.contexts[i], ctx)
        assert torch.equal(site.allowed(batch["attention_mask"])[0], same)
        assert A.shape == (3, 4, 22 * P, 22 * P) and V.shape == (3, 4, 22 * P, 8)
    # the adaptive gate: per-token weights of the two paths sum to one
    g_t, g_s = m.blocks[0].temporal.extra["gate"], m.blocks[0].spatial.extra["gate"]
    assert g_t.shape == (3, 22 * P)
    torch.testing.assert_close(g_t + g_s, torch.ones_like(g_t))


def test_library_head_removal_equals_zeroing_the_head_context():
    torch.manual_seed(0)
    blk = MHA(16, 4).eval()
    x = torch.randn(2, 5, 16)
    site = adapt(blk).sites[0]
    with torch.no_grad(), capture([site]) as cap:
        full = blk(x)
    with torch.no_grad(), ablate(site, HeadEdit([1])):
        cut = blk(x)
    ctx = cap.contexts[0].view(2, 5, 4, 4).clone()
    ctx[:, :, 1] = 0
    expect = blk.out_proj(ctx.reshape(2, 5, 16))
    torch.testing.assert_close(cut, expect)
    assert not torch.allclose(cut, full)
    torch.testing.assert_close(blk(x), full)              # the hook is gone afterwards


def test_key_padding_mask_and_protocol():
    from attnspec.models.protocol import AttentionBlock as BlockProtocol

    blk = MHA(8, 2).eval()
    assert isinstance(blk, BlockProtocol) and blk.head_dim == 4
    kpm = torch.tensor([[False, False, True]])
    site = adapt(blk).sites[0]
    with torch.no_grad(), capture([site]) as cap:
        blk(torch.randn(1, 3, 8), key_padding_mask=kpm)
    assert torch.all(cap.weights[0][..., 2] == 0)


def test_null_entropy_and_entropy_gap():
    assert null_normalized_entropy(50, 0.0) == pytest.approx(1.0)
    vals = [null_normalized_entropy(200, b) for b in (0.25, 0.5, 1.0, 2.0)]
    assert all(a > b for a, b in zip(vals, vals[1:]))
    assert vals[1] == pytest.approx(1 - 0.25 / (2 * math.log(200)), abs=0.01)     # 1 - beta^2 / (2 log n)
    # uniform attention has a negative gap (flatter than the null), one-hot a positive one
    allowed = torch.ones(1, 1, 4, 10, dtype=torch.bool)
    uni = torch.full((1, 1, 4, 10), 0.1)
    hot = torch.zeros(1, 1, 4, 10)
    hot[..., 0] = 1
    assert torch.all(entropy_gap(uni, allowed, 1.0) < 0)
    assert torch.all(entropy_gap(hot, allowed, 1.0) > 0.5)


def test_diffuse_correction_on_off_changes_flatness():
    torch.manual_seed(0)
    m = DiffuseCorrectionNet(22, 256, 2, correction=False).eval()
    m.prepare(_x(8, T=256).numpy())
    x = _x(6, T=256, seed=1)

    def frac(model):
        with torch.no_grad():
            out = model(x)
        return out, entropy_gap_table(model, x)

    out_off, t_off = frac(m)
    out_on, t_on = frac(m.set_correction(True))
    assert t_off.flat.mean() == 1.0             # an untrained head with small scores is flat
    assert t_on.flat.mean() < t_off.flat.mean()
    assert (t_on.entropy_gap > t_off.entropy_gap).all()
    assert not torch.allclose(out_on, out_off)
    assert set(m.layers[0].attn.extra) == {"pass1_probs", "diffuse_weight", "gain"}
    # off really is a plain MHA: same output as the base class forward
    m.set_correction(False)
    blk = m.layers[0].attn
    z = torch.randn(2, 7, 32)
    torch.testing.assert_close(blk(z), MHA.forward(blk, z))


def test_spd_tangent_vectors_match_pyriemann():
    pytest.importorskip("pyriemann")
    from pyriemann.geometry.tangentspace import tangent_space
    from attnspec.zoo.spd import SPDAttentionNet

    m = SPDAttentionNet(8, 128, 2, n_segments=2, numtaps=33)
    rng = np.random.default_rng(0)
    X = (1e-5 * rng.standard_normal((12, 8, 128))).astype(np.float32)
    m.prepare(X)
    covs = m.segment_covariances(torch.as_tensor(X[:3])).numpy()            # [3, nb, S, C, C]
    ours = m.tangent_vectors(torch.as_tensor(X[:3])).numpy().reshape(3, 3, 2, -1)
    for b in range(3):
        ref = np.linalg.inv(m.ref_isqrt[b].double().numpy()) @ np.linalg.inv(m.ref_isqrt[b].double().numpy())
        theirs = tangent_space(covs[:, b].reshape(-1, 8, 8), ref, metric="riemann").reshape(3, 2, -1)
        np.testing.assert_allclose(ours[:, b], theirs, rtol=1e-4, atol=1e-4)
