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
