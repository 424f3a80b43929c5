"""TextNoise: a text's draws do not depend on where its real tokens sit in the padded batch (right padding,
left padding, holes) nor on the query tiling."""
import pytest
import torch

from attnspec.diagnostics.statistics.noise import Draw, TextNoise

torch.set_num_threads(1)


def _alone(n: int, text: int, lead, tail, dtype):
    """Text ``text`` drawn alone, unpadded: the reference."""
    noise = TextNoise(3, Draw.GE_NOISE, 2, [text], torch.ones(1, n, dtype=torch.bool))
    return noise.rows(slice(0, n), lead, tail, dtype)[0]


@pytest.mark.parametrize("tail", [None, (5,)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_draws_sit_at_the_real_tokens_whatever_the_padding(tail, dtype):
    valid = torch.tensor([[1, 1, 1, 1, 0, 0, 0],      # right padding
                          [0, 0, 1, 1, 1, 1, 1],      # left padding
                          [1, 0, 1, 1, 0, 1, 0],      # holes: placed by index lists
                          [0, 0, 0, 0, 0, 0, 0]], dtype=torch.bool)
    noise = TextNoise(3, Draw.GE_NOISE, 2, [7, 8, 9, 10], valid)
    z = torch.cat([noise.rows(slice(r, min(7, r + 3)), (2,), tail, dtype) for r in range(0, 7, 3)], dim=2)
    for b, t in enumerate([7, 8, 9]):
        idx = valid[b].nonzero().squeeze(1)
        ref = _alone(idx.numel(), t, (2,), tail, dtype)
        got = z[b][:, idx][:, :, idx] if tail is None else z[b][:, idx]
        assert torch.equal(got, ref)
        assert float(z[b].abs().sum()) == pytest.approx(float(got.abs().sum()))   # zeros elsewhere
    assert not z[3].any()


def test_full_draws_sit_at_the_real_tokens():
    valid = torch.tensor([[0, 1, 1, 1], [1, 0, 1, 1]], dtype=torch.bool)
    z = TextNoise(0, Draw.NULL_SCORES, 1, [4, 5], valid).full((3,), (2,))
    for b, t in enumerate([4, 5]):
        idx = valid[b].nonzero().squeeze(1)
        ref = TextNoise(0, Draw.NULL_SCORES, 1, [t], torch.ones(1, 3, dtype=torch.bool)).full((3,), (2,))[0]
        assert torch.equal(z[b][:, idx], ref)
        assert not z[b][:, ~valid[b]].any()


@pytest.mark.parametrize("keys", [1, 3, 5, 7])
def test_square_draws_cut_to_the_first_keys_are_the_whole_squares_columns(keys):
    valid = torch.tensor([[1, 1, 1, 1, 0, 0, 0],      # right padding
                          [0, 0, 1, 1, 1, 1, 1],      # left padding
                          [1, 0, 1, 1, 0, 1, 0],      # holes
                          [0, 0, 0, 0, 0, 0, 0]], dtype=torch.bool)
    whole = TextNoise(3, Draw.GE_NOISE, 2, [7, 8, 9, 10], valid)
    cut = TextNoise(3, Draw.GE_NOISE, 2, [7, 8, 9, 10], valid)
    for r in range(0, 7, 3):                          # the generators advance the same way, tile after tile
        rows = slice(r, min(7, r + 3))
        z = cut.rows(rows, (2,), keys=keys)
        assert z.shape == (4, 2, rows.stop - rows.start, keys)
        assert torch.equal(z, whole.rows(rows, (2,))[..., :keys])
