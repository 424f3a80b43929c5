"""The forward cache gives back every recorded tensor bit for bit, with its dtype, shape and strides (so that
the attention rows recomputed from it are those of the forward pass), and keeps nothing once closed."""
import os

import torch

from attnspec.diagnostics.pipeline.forward_cache import ForwardCache
from attnspec.models.attention_calls import AttentionCall

torch.set_num_threads(1)


def _call(g: torch.Generator) -> AttentionCall:
    qkv = torch.randn(2, 5, 3, 4, 8, generator=g)                 # fused projection (B, L, 3, H, d)
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))    # strided views of one storage
    allowed = torch.ones(2, 5, 5, dtype=torch.bool).tril()
    return AttentionCall(None, q, k[:, :2], v.to(torch.bfloat16), allowed, 0.35, softcap=30.0,
                         position_bias=torch.randn(1, 4, 5, 5, generator=g)[..., 1:, :].expand(2, 4, 4, 5))


def test_records_come_back_with_their_strides_and_bits(tmp_path):
    g = torch.Generator().manual_seed(0)
    recs = [_call(g), {"weights": torch.rand(2, 4, 5, 5, generator=g), "values": torch.zeros(2, 4, 0, 8)}]
    with ForwardCache(directory=str(tmp_path)) as cache:
        assert cache.put((3, 4), recs)
        back = cache.get((3, 4))
        assert cache.get((1, 2)) is None
        call = back[0]
        assert (call.scaling, call.softcap, call.module) == (0.35, 30.0, None)
        for name in ("query", "key", "value", "allowed", "position_bias"):
            a, b = getattr(recs[0], name), getattr(call, name)
            assert (a.dtype, a.shape, a.stride()) == (b.dtype, b.shape, b.stride()), name
            assert torch.equal(a, b), name
        assert torch.equal(call.weights(slice(1, 4)), recs[0].weights(slice(1, 4)))
        assert torch.equal(back[1]["weights"], recs[1]["weights"]) and back[1]["values"].shape == (2, 4, 0, 8)
    assert os.listdir(tmp_path) == []


def test_over_budget_batches_are_not_kept(tmp_path):
    g = torch.Generator().manual_seed(1)
    with ForwardCache(max_bytes=10_000, directory=str(tmp_path)) as cache:
        assert cache.put(0, [_call(g)])
        assert not cache.put(1, [_call(g)])                       # the second would exceed 10 kB
        assert cache.get(1) is None and cache.get(0) is not None


def test_a_mask_shared_by_every_layer_is_written_once(tmp_path):
    """Layers whose calls share one mask tensor: the file holds it once (smaller than one copy per layer),
    and every layer reads it back bit for bit."""
    g = torch.Generator().manual_seed(2)
    shared = torch.ones(2, 64, 64, dtype=torch.bool).tril()
    calls = [AttentionCall(None, *(torch.randn(2, 4, 64, 8, generator=g) for _ in range(3)), shared, 0.35)
             for _ in range(6)]
    with ForwardCache(directory=str(tmp_path)) as cache:
        assert cache.put((0,), calls)
        back = cache.get((0,))
        size = os.path.getsize(cache.paths[(0,)][0])
        qkv = 6 * 3 * 2 * 4 * 64 * 8 * 4
        assert qkv + shared.numel() <= size < qkv + 2 * shared.numel()
        for a, b in zip(calls, back):
            assert torch.equal(a.allowed, b.allowed) and torch.equal(a.key, b.key)
