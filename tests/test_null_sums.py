"""pipeline.fit.null_sums (layers in parallel) gives the serial null pass' sums bit for bit, whatever the threads."""
import numpy as np
import torch

from attnspec.diagnostics.pipeline.collect import collect
from attnspec.diagnostics.pipeline.fit import MaskStore, null_sums
from attnspec.models import adapt, make_batches

torch.set_num_threads(1)


def test_parallel_null_sums_equal_the_serial_pass():
    import transformers
    cfg = transformers.GPT2Config(n_embd=32, n_layer=3, n_head=4, n_positions=64, vocab_size=200)
    torch.manual_seed(0)
    ad = adapt(transformers.GPT2LMHeadModel(cfg).eval())
    gen = torch.Generator().manual_seed(1)
    inputs = {"input_ids": torch.randint(0, 200, (7, 20), generator=gen),
              "attention_mask": (torch.arange(20)[None] < torch.tensor([20, 17, 9, 20, 3, 12, 15])[:, None]).long()}
    store = MaskStore()
    for a, b in ((0, 3), (3, 5), (5, 7)):                          # three batches, texts keep their positions
        part = {k: v[a:b] for k, v in inputs.items()}
        for batch in make_batches(part, max_length=20, first_id=a):
            store.add(collect(ad, batch))
    fits = [{"score_scale": np.array([0.5, 1.0, 1.5, 2.0]) * (i + 1)} for i in range(3)]
    serial = null_sums(ad.sites, store, fits, seed=3, tile_bytes=4 * 3 * 4 * 20 * 7, n_boot=9, threads=1)
    parallel = null_sums(ad.sites, store, fits, seed=3, tile_bytes=4 * 3 * 4 * 20 * 7, n_boot=9, threads=2)
    assert len(store.batches) == 3
    for a, b in zip(serial, parallel):
        for k in a.scores:
            assert np.array_equal(a.scores[k], b.scores[k]) and np.array_equal(a.boot_scores[k], b.boot_scores[k]), k
