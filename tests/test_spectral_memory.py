"""The spectra of a layer without each head are built in bounded (text, head) blocks (issue 11): the same
eigenvalues as the batched expansion over all heads at once, with the removed-head Grams' memory bounded by
a byte budget instead of growing with ``B H min(L, d_out)^2``."""
import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from attnspec.diagnostics.statistics import spectral

torch.set_num_threads(1)


def _batched_reference(M, Wh, lengths, scale):
    """The former implementation: every head's removed Gram at once, ``(B, H, n, n)``."""
    W = Wh.to(M.dtype)
    B, H, L, dh = M.shape
    d_out = W.shape[-1]
    Y = torch.einsum("bhld,hde->ble", M, W)
    if L <= d_out:
        MK = M @ (W @ W.transpose(-1, -2))[None]
        P = torch.einsum("ble,hde->bhld", Y, W) @ M.transpose(-1, -2)
        G = (Y @ Y.transpose(-1, -2))[:, None] - P - P.transpose(-1, -2) + MK @ M.transpose(-1, -2)
    else:
        YY = Y.transpose(-1, -2) @ Y
        G = torch.empty(B, H, d_out, d_out, dtype=Y.dtype)
        for h in range(H):
            U = M[:, h] @ W[h]
            P = U.transpose(-1, -2) @ Y
            G[:, h] = YY - P - P.transpose(-1, -2) + U.transpose(-1, -2) @ U
    ev = np.maximum(np.linalg.eigvalsh(G.numpy()), 0.0) * (lengths[:, None, None] / (d_out * scale))
    r = np.minimum(lengths - 1, d_out)
    return np.stack([spectral._top(ev[:, h], r) for h in range(H)])


def _case(B, H, L, dh, d_out, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    valid = torch.ones(B, L, dtype=torch.bool)
    valid[0, L - 3:] = False                                   # one padded text: lengths differ
    M = spectral.center(torch.randn(B, H, L, dh, generator=g, dtype=dtype), valid)
    return M, torch.randn(H, dh, d_out, generator=g, dtype=dtype), valid.sum(1).numpy()


@pytest.mark.parametrize("shape", [(3, 5, 12, 4, 20), (2, 4, 30, 4, 16), (1, 6, 16, 3, 16)],
                         ids=["l<d_out", "l>d_out", "l=d_out"])
def test_blocks_give_the_batched_eigenvalues(shape):
    M, W, lengths = _case(*shape)
    ref = _batched_reference(M, W, lengths, 1.7)
    n = min(shape[2], shape[4])
    for max_bytes in (1, 64 * n * n * 3, 64 * n * n * shape[1] * 2, 10 ** 9):   # one pair .. everything
        out = spectral.layer_eigs_without_each(M, W, lengths, 1.7, max_bytes)
        assert out.shape == ref.shape
        np.testing.assert_allclose(out, ref, rtol=0, atol=1e-12 * np.abs(ref).max())


@pytest.mark.parametrize("shape", [(2, 4, 10, 3, 12), (2, 4, 40, 3, 9)], ids=["l<d_out", "l>d_out"])
def test_each_row_is_the_layer_without_that_head(shape):
    """Independent of the expansion: ``Y_{-h}`` formed explicitly (for ``l > d_out`` through the heads'
    ``d_head``-sized factors)."""
    M, W, lengths = _case(*shape, seed=1)
    out = spectral.layer_eigs_without_each(M, W, lengths, 0.9, max_bytes=1)
    for h in range(4):
        keep = [g for g in range(4) if g != h]
        Y = torch.einsum("bhld,hde->ble", M[:, keep], W[keep])
        np.testing.assert_allclose(out[h], spectral.layer_eigs(Y, lengths, 0.9), rtol=1e-10, atol=1e-12)


def test_blocks_cover_every_pair_once_within_the_budget():
    for B, H, n, max_bytes in [(5, 7, 10, 1), (5, 7, 10, 64 * 100 * 3), (5, 7, 10, 64 * 100 * 7),
                               (5, 7, 10, 64 * 100 * 15), (1, 1, 1, 10 ** 9), (16, 14, 128, 32 * 2 ** 20)]:
        seen = np.zeros((B, H), int)
        for bs, hs in spectral.removed_blocks(B, H, n, max_bytes):
            seen[bs, hs] += 1
            pairs = (bs.stop - bs.start) * (hs.stop - hs.start)
            assert pairs * 64 * n * n <= max(max_bytes, 64 * n * n)
        assert (seen == 1).all()


@pytest.mark.parametrize("bad", [dict(B=0), dict(H=0), dict(n=0), dict(max_bytes=0)])
def test_bad_block_arguments_are_named(bad):
    args = dict(B=2, H=3, n=4, max_bytes=100) | bad
    with pytest.raises(ValueError, match=f"{next(iter(bad))} must be >= 1"):
        spectral.removed_blocks(**args)


CHILD = r"""
import json, sys, numpy as np, torch
torch.set_num_threads(1)
sys.path.insert(0, sys.argv[2])
from test_spectral_memory import _batched_reference, _case
from attnspec.diagnostics.statistics import spectral


def status(key):                                           # kB -> MB, from /proc/self/status
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key)) / 1024


fn = _batched_reference if sys.argv[1] == "batched" else spectral.layer_eigs_without_each
fn(*_case(1, 2, 6, 2, 4), 1.0)                             # warm-up: libraries loaded, first allocations
M, W, lengths = _case(1, 48, 600, 16, 512)                 # 48 heads, Grams 512 x 512
with open("/proc/self/clear_refs", "w") as f:              # reset the high-water mark: import-time (e.g. first
    f.write("5")                                           # .pyc compilation) peaks do not hide the call's
before = status("VmRSS:")
fn(M, W, lengths, 1.0)
print(json.dumps({"growth_mb": status("VmHWM:") - before}))
"""


def _peak_growth(which: str) -> float:
    from pathlib import Path
    p = subprocess.run([sys.executable, "-c", CHILD, which, str(Path(__file__).parent)], capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])["growth_mb"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and ru_maxrss in KiB")
def test_removed_grams_stay_within_the_budget():
    """48 heads' 512 x 512 float64 Grams are 100 MB at once (the batched form, measured as a check that the
    measurement sees them); in blocks of the default 32 MiB budget the peak grows by well under that."""
    batched, blocked = _peak_growth("batched"), _peak_growth("blocked")
    assert batched > 100, f"the batched Grams should show (+{batched:.0f} MB)"
    assert blocked < 50, f"blocked removed-head Grams grew the peak by {blocked:.0f} MB (budget 32 MiB)"


def test_free_rotation_from_r_factors_equals_q_times_r():
    """Long texts (``n_b - 1 > d_head``) are rotated as ``G (R_G^{-1} R_M)`` from the two R factors: the
    same numbers, to rounding, as the Q factor of the centered draw times ``M``'s R factor, head by head."""
    from attnspec.diagnostics.statistics.noise import Draw, TextNoise
    from attnspec.diagnostics.statistics.rotation import _sign_fixed_qr, free_rotation
    g = torch.Generator().manual_seed(2)
    valid = torch.ones(2, 30, dtype=torch.bool)
    valid[1, 20:] = False
    M = spectral.center(torch.randn(2, 3, 30, 4, generator=g, dtype=torch.float64), valid)
    noise = lambda: TextNoise(5, Draw.FREE_ROTATION, 0, [0, 1], valid)   # noqa: E731
    out = free_rotation(M, valid, noise())
    ref, nz = torch.zeros_like(M), noise()
    for b in range(2):
        idx = nz.idx[b]
        Mb = M[b][:, idx]
        G = torch.from_numpy(nz.draw(b, tuple(Mb.shape)))
        ref[b][:, idx] = _sign_fixed_qr(G - G.mean(-2, keepdim=True))[0] @ _sign_fixed_qr(Mb)[1]
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    assert torch.allclose(out.transpose(-1, -2) @ out, M.transpose(-1, -2) @ M)   # each head's M^T M kept
    assert not out[1, :, 20:].any()                                                # padding stays 0


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_free_rotation_does_not_depend_on_its_budget(dtype):
    """Long texts are rotated over chunks of heads under ``max_bytes`` (the draw taken head after head): the
    same numbers for one head at a time, a few, or all at once, and a float32 input gives the float64 rotation
    rounded once."""
    from attnspec.diagnostics.statistics.noise import Draw, TextNoise
    from attnspec.diagnostics.statistics.rotation import free_rotation
    g = torch.Generator().manual_seed(3)
    valid = torch.ones(2, 40, dtype=torch.bool)
    valid[0, :7] = False                                                           # left padding
    M = spectral.center(torch.randn(2, 5, 40, 4, generator=g, dtype=torch.float64), valid)
    noise = lambda: TextNoise(1, Draw.FREE_ROTATION, 3, [4, 9], valid)   # noqa: E731
    ref = free_rotation(M, valid, noise())
    per_head = 3 * 40 * 4 * 8
    low = free_rotation(M.to(dtype), valid, noise())
    assert low.dtype == dtype
    torch.testing.assert_close(low, ref.to(dtype), rtol=1e-5, atol=1e-5)            # float32: from the rounded input
    for max_bytes in (1, 2 * per_head, 10 ** 9):
        assert torch.equal(free_rotation(M.to(dtype), valid, noise(), max_bytes=max_bytes), low)
    with pytest.raises(ValueError, match="max_bytes must be >= 1"):
        free_rotation(M, valid, noise(), max_bytes=0)


ROTATION_CHILD = r"""
import json, sys, torch
torch.set_num_threads(1)
from attnspec.diagnostics.statistics import spectral
from attnspec.diagnostics.statistics.noise import Draw, TextNoise


def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key)) / 1024


valid = torch.ones(1, 8000, dtype=torch.bool)
spectral.free_rotation(torch.randn(1, 2, 100, 8), valid[:, :100], TextNoise(0, Draw.FREE_ROTATION, 0, [0], valid[:, :100]))
M = torch.randn(1, 16, 8000, 64)                          # float32, 32.8 MB
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before = status("VmRSS:")
out = spectral.free_rotation(M, valid, TextNoise(0, Draw.FREE_ROTATION, 0, [0], valid))
print(json.dumps({"growth_mb": status("VmHWM:") - before, "dtype": str(out.dtype)}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_free_rotation_of_a_long_text_stays_within_its_output_and_budget():
    """One text of 8,000 tokens, 16 heads of 64 (contexts 33 MB in float32): the rotation holds its float32
    output and the float64 temporaries of chunks of heads under its budget: the peak grew by 61-62 MB over two
    runs with the 8 MiB budget (89-116 MB over four with 32 MiB), 318 MB when the whole text was rotated in
    float64 at once (a float64 copy of the input, the output, the draw and their product)."""
    p = subprocess.run([sys.executable, "-c", ROTATION_CHILD], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["dtype"] == "torch.float32"
    assert r["growth_mb"] < 100, f"the free rotation grew the peak by {r['growth_mb']:.0f} MB"


LAYER_CHILD = r"""
import json, sys, numpy as np, torch
torch.set_num_threads(1)
from attnspec.diagnostics.statistics import spectral


def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key)) / 1024


which = sys.argv[1]
g = torch.Generator().manual_seed(0)
small, small_w = torch.randn(1, 2, 40, 4, generator=g), torch.randn(2, 4, 6, generator=g)
spectral.layer_eigs_ritz(small, small_w, np.array([40]), 1.0)      # warm-up: libraries loaded, first allocations
M = torch.randn(1, 16, 8000, 64, generator=g)                     # float32, 32.8 MB
Wh = torch.randn(16, 64, 1024, generator=g) / 32                  # d_out 1,024 < L: the d_out x d_out Gram
Y = spectral.layer_output(M, Wh) if which == "ritz" else None
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before = status("VmRSS:")
if which == "side_by_side":                                       # the one product of the copied contexts
    out = M.transpose(1, 2).flatten(2) @ Wh.reshape(1024, 1024)
elif which == "layer_output":
    out = spectral.layer_output(M, Wh)
else:
    out = spectral.layer_eigs_ritz(M, Wh, np.array([8000]), 1.0, Y=Y)
print(json.dumps({"growth_mb": status("VmHWM:") - before}))
"""


def _layer_growth(which: str) -> float:
    p = subprocess.run([sys.executable, "-c", LAYER_CHILD, which], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])["growth_mb"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_layer_output_of_a_long_text_holds_one_chunk_beside_it():
    """One text of 8,000 tokens, 16 heads of 64 (contexts 33 MB), ``d_out`` 1,024 (output 33 MB): the product of
    the contexts side by side copies them first (+64 MB, measured as a check that the measurement sees the
    copy); :func:`spectral.layer_output` writes the output chunk by chunk (+37 MB)."""
    copied, chunked = _layer_growth("side_by_side"), _layer_growth("layer_output")
    assert copied > 60, f"the side-by-side copy should show (+{copied:.0f} MB)"
    assert chunked < 45, f"the layer output grew the peak by {chunked:.0f} MB (output 33 MB, chunks of 4 MiB)"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_rayleigh_ritz_of_a_long_text_copies_no_context():
    """The same text, the layer without each head from the layer's ``d_out x d_out`` Gram: ``Y^T M_h`` head by
    head, no copy of the 33 MB contexts: +20 to +22 MB since the Gram and its eigenvectors are float32 (+29 MB in
    float64, 16 MB of them), against +86 MB with the contexts copied side by side."""
    grown = _layer_growth("ritz")
    assert grown < 50, f"the Rayleigh-Ritz values grew the peak by {grown:.0f} MB"
