"""Models held by interpretability toolkits (attnspec.models.toolkits): a TransformerLens 4.x TransformerBridge and
an nnsight LanguageModel or TransformersModel wrapping the packaged SmolLM2-135M give the Hugging Face model's
tables (eager attention), removal effects included; a bridge in compatibility mode gives a complete table and
records its processing."""
import numpy as np
import pandas as pd
import pytest
import torch

import nnsight
import transformer_lens.model_bridge as tl

import attnspec
from attnspec.models import AdapterError, adapt, load_model
from attnspec.models.toolkits import processing_of, unwrap

#: Small but complete: every step, intervals, first-order removal and gradient importance (the backward pass).
OPTIONS = dict(n_texts=8, max_length=12, n_boot=20, removal="first-order", progress=False)
#: Exact removal of every head (a forward pass per head and text): one short text.
EXACT = dict(n_texts=1, max_length=8, n_boot=0, removal="exact", progress=False)


@pytest.fixture(scope="module", autouse=True)
def _offline_one_thread():
    mp = pytest.MonkeyPatch()
    mp.setenv("HF_HUB_OFFLINE", "1")
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
    mp.undo()


@pytest.fixture(scope="module")
def reference():
    """The Hugging Face model (eager attention) and its diagnosis."""
    model, tok = load_model("smollm2-135m", attn_implementation="eager")
    return tok, attnspec.diagnose(model, tok, None, **OPTIONS)


def _bridge():
    model, tok = load_model("smollm2-135m", attn_implementation="eager")
    return tl.TransformerBridge.boot_transformers("smollm2-135m", hf_model=model, tokenizer=tok), tok


def assert_tables_equal(a, b, rtol=1e-6):
    """Every table of two diagnoses: the same columns, equal text columns, numbers within ``rtol`` of the larger
    magnitude of the column (NaN where the other is NaN)."""
    for name in ("heads", "layers", "pairs"):
        x, y = getattr(a, name), getattr(b, name)
        assert list(x.columns) == list(y.columns), name
        for c in x.columns:
            if pd.api.types.is_numeric_dtype(x[c]) and not pd.api.types.is_bool_dtype(x[c]):
                u, v = x[c].to_numpy(float), y[c].to_numpy(float)
                assert np.array_equal(np.isnan(u), np.isnan(v)), (name, c)
                scale = max(np.nanmax(np.abs(u), initial=0.0), 1e-30)
                assert np.nanmax(np.abs(u - v), initial=0.0) <= rtol * scale, (name, c)
            else:
                assert x[c].equals(y[c]), (name, c)


@pytest.mark.slow
def test_bridge_tables_equal_the_hugging_face_model(reference):
    tok, ref = reference
    bridge, _ = _bridge()
    d = attnspec.diagnose(bridge, tok, None, **OPTIONS)
    assert_tables_equal(ref, d)
    kit = d.summary["toolkit"]
    assert kit["name"] == "transformer_lens" and kit["wrapper"] == "TransformerBridge"
    assert kit["compatibility_mode"] is False and not any(kit["processing"].values())
    # without a tokenizer, the bridge's own: it prepends BOS (TransformerLens's convention), which the summary says
    own = attnspec.diagnose(bridge, None, None, **{**EXACT, "removal": "none"})
    assert "own tokenizer" in own.summary["notes"][-1]
    with_hf = attnspec.diagnose(bridge, tok, None, **{**EXACT, "removal": "none"})
    assert not np.allclose(own.heads["score_scale"], with_hf.heads["score_scale"])    # other tokens, other numbers
    # exact removal runs through the bridge's own output projections: the same effects
    hf, _ = load_model("smollm2-135m", attn_implementation="eager")
    exact_ref, exact = (attnspec.diagnose(m, tok, None, **EXACT) for m in (hf, bridge))
    assert exact_ref.heads["removal_effect"].abs().max() > 0
    assert_tables_equal(exact_ref, exact)


@pytest.mark.slow
def test_bridge_in_compatibility_mode_records_its_processing(reference):
    tok, ref = reference
    bridge, _ = _bridge()
    bridge.enable_compatibility_mode(disable_warnings=True)
    d = attnspec.diagnose(bridge, tok, None, **OPTIONS)
    kit = d.summary["toolkit"]
    assert kit["compatibility_mode"] is True and kit["weights_processed"] is True
    # SmolLM2 has RMS norms: HookedTransformer's processing folds them and centres the unembedding only
    assert kit["processing"] == {"fold_ln": True, "center_writing_weights": False, "center_unembed": True,
                                 "fold_value_biases": False}          # SmolLM2's projections have no bias
    assert any("compatibility mode" in n for n in d.summary["notes"])
    assert d.heads.shape == ref.heads.shape and d.heads["selection"].notna().all()
    # folding and a constant shift of the logits keep the function: the removal effects (log-softmax losses) stay
    assert np.allclose(d.heads["removal_first_order"], ref.heads["removal_first_order"], rtol=1e-3, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("envoy", ["LanguageModel", "TransformersModel"])   # the latter replaces the former in 0.8
def test_nnsight_model_tables_equal_the_hugging_face_model(reference, envoy):
    tok, ref = reference
    model, _ = load_model("smollm2-135m", attn_implementation="eager")
    lm = getattr(nnsight, envoy)(model, tokenizer=tok)
    d = attnspec.diagnose(lm, None, None, **OPTIONS)                # the envoy's own tokenizer
    assert_tables_equal(ref, d, rtol=0.0)
    assert d.summary["toolkit"]["name"] == "nnsight" and d.summary["toolkit"]["wrapper"] == envoy


def test_unwrap_plain_and_refusals():
    lin = torch.nn.Linear(2, 2)
    assert unwrap(lin).module is lin and unwrap(lin).toolkit is None
    legacy = type("HookedTransformer", (torch.nn.Module,), {"__module__": "transformer_lens.HookedTransformer"})()
    with pytest.raises(AdapterError, match="TransformerBridge"):
        adapt(legacy)


def test_processing_read_from_the_weights():
    """Folded norms (all ones) and a centred unembedding are read as such; the model's own weights are not."""
    from attnspec.models.tiny import tiny_causal_lm
    gpt2 = tiny_causal_lm()[0].model
    holder = type("Bridge", (), {"original_model": gpt2})()
    with torch.no_grad():
        for m in gpt2.modules():                  # as a trained model's: norms that are not 1
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
    assert processing_of(holder) == {"fold_ln": False, "center_writing_weights": False, "center_unembed": False,
                                     "fold_value_biases": False}
    with torch.no_grad():
        for m in gpt2.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.fill_(1.0)
        w = gpt2.lm_head.weight
        w -= w.mean(0, keepdim=True)
        for block in gpt2.transformer.h:          # GPT-2's Conv1D is not an nn.Linear: writing weights not read
            assert not isinstance(block.attn.c_proj, torch.nn.Linear)
    got = processing_of(holder)
    assert got["fold_ln"] and got["center_unembed"] and not got["center_writing_weights"]


def _tiny_llama(seed: int):
    import transformers
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=30522, attn_implementation="eager")
    return transformers.LlamaForCausalLM(cfg).eval()


def test_track_and_the_callback_take_a_bridge(tmp_path):
    """track (through its load=) and the callback (in the zoo's loop) diagnose a bridge as its Hugging Face model."""
    from attnspec.callbacks import AttnspecCallback
    tok = load_model("minilm")[1]
    texts = [f"text number {i} about attention heads and their roles" for i in range(8)]

    def boot(model):
        return tl.TransformerBridge.boot_transformers("tiny-llama", hf_model=model, tokenizer=tok)
    for step in (1, 2):
        _tiny_llama(step).save_pretrained(tmp_path / "run" / f"checkpoint-{step}")
    import transformers

    def hf(path):
        return transformers.LlamaForCausalLM.from_pretrained(path, attn_implementation="eager"), tok
    t = attnspec.track(tmp_path / "run", texts=texts, load=lambda p: (boot(hf(p)[0]), tok), report=False, n_boot=20,
                       removal="none", progress=False)
    plain = attnspec.track(tmp_path / "run", texts=texts, load=hf, report=False, n_boot=20, removal="none",
                           progress=False)
    assert t.summary["steps"] == [1, 2] and t.table.shape == plain.table.shape
    num = t.table.select_dtypes("number").columns
    np.testing.assert_allclose(t.table[num].to_numpy(float), plain.table[num].to_numpy(float), rtol=1e-6, atol=1e-9)
    cb = AttnspecCallback(tok, texts, n_boot=20)
    scalars = cb(boot(_tiny_llama(1)), 1, {})
    assert scalars and cb.table["step"].unique().tolist() == [1]
    np.testing.assert_allclose(cb.table[num].to_numpy(float), plain.table[plain.table["step"] == 1][num].to_numpy(float),
                               rtol=1e-6, atol=1e-9)


def test_nnsight_does_not_shadow_the_zoo_functions():
    """nnsight gives every object a ``save`` method, ModuleType included: attnspec.zoo binds its functions itself."""
    import attnspec.zoo
    from attnspec.zoo import checkpoint
    assert hasattr(type(attnspec.zoo), "save")                        # nnsight's patch, imported above
    assert attnspec.zoo.save is checkpoint.save and attnspec.zoo.load is checkpoint.load
