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


def test_the_first_pass_writes_one_layer_at_a_time(tmp_path):
    """Written during the forward pass (``record``'s sink), a layer's recorded inputs are freed before the next
    layer runs, and the batch read back equals the records kept in memory, bit for bit."""
    import weakref

    from attnspec.diagnostics.pipeline.collect import record
    from attnspec.models.tiny import tiny_causal_lm
    ad, batch = tiny_causal_lm(n_layers=4)
    alive_at_add = []
    with ForwardCache(directory=str(tmp_path)) as cache:
        w = cache.writer((0, 1))
        refs = []

        def add(i, call):
            alive_at_add.append(sum(r() is not None for r in refs))
            refs.append(weakref.ref(call.query))
            w.add(i, call)
        assert record(ad, batch, sink=add) is None
        back = cache.finish((0, 1), w, len(ad.sites))
        assert cache.get((0, 1)) is not None
        kept = record(ad, batch)
        for a, b in zip(kept, back):
            for name in ("query", "key", "value"):
                assert torch.equal(getattr(a, name), getattr(b, name)), name
            assert torch.equal(a.weights(), b.weights())
    assert len(alive_at_add) == 4 and max(alive_at_add) <= 1, alive_at_add


def test_a_failed_write_keeps_the_rest_of_the_batch_in_memory(tmp_path, monkeypatch):
    """A write that fails (a full disk) leaves the batch readable: the records written before it from the file,
    the others from memory; the batch is not kept for the spectra step."""
    from attnspec.diagnostics.pipeline import forward_cache
    g = torch.Generator().manual_seed(3)
    calls = [_call(g) for _ in range(3)]
    real, count = forward_cache.BatchWriter._place, [0]

    def place(self, name, v):
        count[0] += 1
        if count[0] > 6:                       # the second record's tensors
            raise OSError(28, "No space left on device")
        return real(self, name, v)
    monkeypatch.setattr(forward_cache.BatchWriter, "_place", place)
    with ForwardCache(directory=str(tmp_path)) as cache:
        w = cache.writer(7)
        for i, c in enumerate(calls):
            w.add(i, c)
        back = cache.finish(7, w, 3)
        assert cache.get(7) is None and w.memory.keys() == {1, 2}
        for a, b in zip(calls, back):
            assert torch.equal(a.query, b.query) and torch.equal(a.allowed, b.allowed)
