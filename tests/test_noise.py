"""TextNoise: a text's draws do not depend on where its real tokens sit in the padded batch (right padding,
left padding, holes) nor on the query tiling, nor, on its allowed entries, on the keys a tile reads."""
import pytest
import torch

from attnspec.diagnostics.statistics.noise import Draw, TextNoise

torch.set_num_threads(1)


def _alone(n: int, text: int, lead, tail, dtype):
    """Text ``text`` drawn alone, unpadded: the reference."""
    noise = TextNoise(3, Draw.GE_NOISE, 2, [text], torch.ones(1, n, dtype=torch.bool))
    return noise.rows(slice(0, n), lead, tail, dtype)[0]


VALID = torch.tensor([[1, 1, 1, 1, 0, 0, 0],      # right padding
                      [0, 0, 1, 1, 1, 1, 1],      # left padding
                      [1, 0, 1, 1, 0, 1, 0],      # holes: placed by index lists
                      [0, 0, 0, 0, 0, 0, 0]], dtype=torch.bool)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_draws_sit_at_the_real_tokens_whatever_the_padding(dtype):
    noise = TextNoise(3, Draw.GE_NOISE, 2, [7, 8, 9, 10], VALID)
    z = torch.cat([noise.rows(slice(r, min(7, r + 3)), (2,), (5,), dtype) for r in range(0, 7, 3)], dim=2)
    for b, t in enumerate([7, 8, 9]):
        idx = VALID[b].nonzero().squeeze(1)
        got = z[b][:, idx]
        assert torch.equal(got, _alone(idx.numel(), t, (2,), (5,), dtype))
        assert float(z[b].abs().sum()) == pytest.approx(float(got.abs().sum()))   # zeros elsewhere
    assert not z[3].any()


def _causal(valid: torch.Tensor) -> torch.Tensor:
    """A causal allowed set over the real tokens of each text (``(B, L, L)``, padding removed)."""
    L = valid.shape[1]
    return torch.ones(L, L, dtype=torch.bool).tril() & valid[:, None, :] & valid[:, :, None]


@pytest.mark.parametrize("tile", [1, 2, 3, 7])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_allowed_draws_depend_neither_on_padding_nor_on_tiling(tile, dtype):
    """A text's draws on its allowed entries are those it has alone and unpadded, in any tiling and with each
    tile cut to the keys that hold its allowed ones; one number per allowed entry and head, zeros elsewhere."""
    allowed = _causal(VALID)
    noise = TextNoise(3, Draw.GE_NOISE, 2, [7, 8, 9, 10], VALID)
    parts = []
    for r in range(0, 7, tile):
        rows = slice(r, min(7, r + tile))
        k = int(allowed[:, rows].any(1).any(0).nonzero().max()) + 1 if allowed[:, rows].any() else 1
        z = noise.on_allowed(rows, (2,), allowed[:, rows, :k], dtype)
        parts.append(torch.nn.functional.pad(z, (0, 7 - k)))
    z = torch.cat(parts, dim=2)
    for b, t in enumerate([7, 8, 9]):
        idx = VALID[b].nonzero().squeeze(1)
        n = idx.numel()
        alone = TextNoise(3, Draw.GE_NOISE, 2, [t], torch.ones(1, n, dtype=torch.bool))
        ref = alone.on_allowed(slice(0, n), (2,), torch.ones(1, n, n, dtype=torch.bool).tril(), dtype)[0]
        assert torch.equal(z[b][:, idx][:, :, idx], ref)
        assert int((ref != 0).sum()) == 2 * n * (n + 1) // 2                       # one per allowed entry and head
        assert not z[b][:, ~allowed[b]].any()                                       # zeros off the allowed set
    assert not z[3].any()


def test_full_draws_sit_at_the_real_tokens():
    valid = torch.tensor([[0, 1, 1, 1], [1, 0, 1, 1]], dtype=torch.bool)
    z = TextNoise(0, Draw.NULL_SCORES, 1, [4, 5], valid).full((3,), (2,))
    for b, t in enumerate([4, 5]):
        idx = valid[b].nonzero().squeeze(1)
        ref = TextNoise(0, Draw.NULL_SCORES, 1, [t], torch.ones(1, 3, dtype=torch.bool)).full((3,), (2,))[0]
        assert torch.equal(z[b][:, idx], ref)
        assert not z[b][:, ~valid[b]].any()


def test_without_a_full_block_the_block_draws_are_the_entry_draws():
    """Texts shorter than a block (or ``size = 0``) draw exactly :meth:`TextNoise.on_allowed`'s numbers."""
    allowed = _causal(VALID)
    for size in (0, 6):                                           # the longest text has 5 real tokens
        a = TextNoise(3, Draw.GE_NOISE, 2, [7, 8, 9, 10], VALID)
        b = TextNoise(3, Draw.GE_NOISE, 2, [7, 8, 9, 10], VALID)
        for r in range(0, 7, 3):
            rows = slice(r, min(7, r + 3))
            Z, G = b.on_allowed_blocks(rows, (2,), allowed[:, rows], size, 4)
            assert G is None and torch.equal(Z, a.on_allowed(rows, (2,), allowed[:, rows]))


@pytest.mark.parametrize("tile", [1, 3, 12])
def test_block_draws_depend_neither_on_padding_nor_on_tiling(tile):
    """Blocks of 3 keys (2 numbers a block) on causal texts of 10 and 12 tokens, right- and left-padded: a text's
    entry draws and block draws are those it has alone and unpadded, in any tiling; a row takes a block whole
    exactly when every key of the block is allowed, and its entries are the allowed keys outside those blocks."""
    valid = torch.zeros(2, 12, dtype=torch.bool)
    valid[0, :10] = True
    valid[1, :] = True
    valid = torch.cat([valid, torch.cat([torch.zeros(1, 2, dtype=torch.bool), valid[:1, :10]], 1)])   # left-padded
    allowed = _causal(valid)
    noise = TextNoise(1, Draw.NULL_GE_NOISE, 0, [4, 5, 6], valid)
    Zs, Gs = [], []
    for r in range(0, 12, tile):
        rows = slice(r, min(12, r + tile))
        Z, G = noise.on_allowed_blocks(rows, (2,), allowed[:, rows], 3, 2)
        Zs.append(Z)
        Gs.append(G)
    Z, G = torch.cat(Zs, 2), torch.cat(Gs, 1)                    # (3, 2, 12, 12), (3, 12, 4, 2, 2)
    for b, t in enumerate([4, 5, 6]):
        idx = valid[b].nonzero().squeeze(1)
        n = idx.numel()
        alone = TextNoise(1, Draw.NULL_GE_NOISE, 0, [t], torch.ones(1, n, dtype=torch.bool))
        Za, Ga = alone.on_allowed_blocks(slice(0, n), (2,), torch.ones(1, n, n, dtype=torch.bool).tril(), 3, 2)
        assert torch.equal(Z[b][:, idx][:, :, idx], Za[0])
        assert torch.equal(G[b][idx][:, :Ga.shape[2]], Ga[0])
        for i in range(n):                                        # row i takes blocks 0 .. (i + 1) // 3 - 1 whole
            whole = (i + 1) // 3
            assert [bool(G[b, idx[i], m].any()) for m in range(n // 3)] == [m < whole for m in range(n // 3)]
            assert (Za[0, 0, i] != 0).nonzero().squeeze(1).tolist() == list(range(3 * whole, i + 1))


def test_block_noise_has_the_law_of_the_entry_noise():
    """Given the values, ``sum_m R_m^T g_m`` over a row's whole blocks plus ``sum_j Z_j V_j`` over its other
    allowed keys is a Gaussian of covariance ``sum_{j allowed} V_j V_j^T``, as one number per entry gives: over
    4,000 seeds, every covariance entry within 5 standard errors."""
    from attnspec.diagnostics.statistics.noise import block_factors
    g = torch.Generator().manual_seed(0)
    L, dv, size, row = 11, 2, 3, 9                                # row 9 takes blocks 0-2 whole, keys 9 alone
    V = torch.randn(1, 1, L, dv, generator=g, dtype=torch.float64)
    valid = torch.ones(1, L, dtype=torch.bool)
    allowed = _causal(valid)[:, row:row + 1]
    R = block_factors(V, valid, size)
    draws = []
    for seed in range(4000):
        Z, G = TextNoise(seed, Draw.GE_NOISE, 0, [0], valid).on_allowed_blocks(slice(row, row + 1), (1,), allowed,
                                                                             size, dv, torch.float64)
        draws.append(Z[0, 0, 0] @ V[0, 0] + torch.einsum("md,mde->e", G[0, 0, :, :, 0], R[0, 0]))
    X = torch.stack(draws)
    target = V[0, 0, :row + 1].T @ V[0, 0, :row + 1]
    emp = X.T @ X / len(draws)
    se = torch.sqrt((target.diagonal()[:, None] * target.diagonal()[None] + target ** 2) / len(draws))
    assert bool(((emp - target).abs() < 5 * se).all()), (emp, target)
