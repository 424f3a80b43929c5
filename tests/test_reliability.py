"""Reliability: verified loading, atomic outputs, no debris after a signal, bounded resources, one-line errors
and checks before the model loads. Every case is cheap (tiny random models saved next to MiniLM's tokenizer,
tiny files); a refused case must exit 2 with one line on stderr, naming the problem."""
from __future__ import annotations

import http.server
import json
import os
import shutil
import signal
import socket
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
torch.set_num_threads(1)

from attnspec.cli import main  # noqa: E402
from attnspec.diagnostics.pipeline import forward_cache  # noqa: E402
from attnspec.models import load_model  # noqa: E402
from attnspec.models.files import ModelLoadError  # noqa: E402
from attnspec.models.packaged import minilm_dir  # noqa: E402

FAST = ["--n-texts", "4", "--max-length", "16", "--quiet", "--threads", "1", "--n-boot", "20"]


def _tokenizer(d: Path) -> None:
    for f in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.json"):
        if (minilm_dir() / f).is_file():
            shutil.copy(minilm_dir() / f, d / f)


def _bert_cfg(**kw):
    return transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                   vocab_size=30522, max_position_embeddings=64, **kw)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A tiny BERT and a tiny GPT-2 directory (safetensors, MiniLM's tokenizer), and a root for variants."""
    root = tmp_path_factory.mktemp("models")
    torch.manual_seed(0)
    bert = root / "bert"
    transformers.BertModel(_bert_cfg()).save_pretrained(bert)
    _tokenizer(bert)
    gpt = root / "gpt"
    transformers.GPT2LMHeadModel(transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=30522,
                                                         n_positions=64)).save_pretrained(gpt)
    _tokenizer(gpt)
    return {"bert": bert, "gpt": gpt, "root": root}


def _variant(models, name: str, base: str = "bert") -> Path:
    d = models["root"] / name
    if d.exists():
        shutil.rmtree(d)
    shutil.copytree(models[base], d)
    return d


def _edit_weights(d: Path, edit) -> None:
    from safetensors.torch import load_file, save_file
    sd = load_file(d / "model.safetensors")
    edit(sd)
    save_file(sd, d / "model.safetensors", metadata={"format": "pt"})


def _one_line(capsys, rc, *needles):
    err = capsys.readouterr().err.strip().splitlines()
    err = [e for e in err if not e.startswith("loading ")]
    assert rc == 2, err
    assert len(err) == 1 and "Traceback" not in err[0], err
    for n in needles:
        assert n in err[0], (n, err[0])
    return err[0]


def _diagnose(model, out, *extra):
    return main(["diagnose", "--model", str(model), "--out", str(out), *FAST, *extra])


# ------------------------------------------------------------------------------------------------ 1: verified loading
def _wrong_config(models):
    d = _variant(models, "bert_with_gpt_config")
    shutil.copy(models["gpt"] / "config.json", d / "config.json")
    return d


def _wrong_config_gpt(models):
    d = _variant(models, "gpt_with_bert_config", "gpt")
    shutil.copy(models["bert"] / "config.json", d / "config.json")
    return d


def _missing_query(models):
    d = _variant(models, "missing_query")
    _edit_weights(d, lambda sd: sd.pop("encoder.layer.0.attention.self.query.weight"))
    return d


def _other_shape(models):
    d = _variant(models, "other_shape")
    cfg = json.loads((d / "config.json").read_text())
    cfg["intermediate_size"] = 48
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def _nan_weight(models):
    d = _variant(models, "nan_weight")
    _edit_weights(d, lambda sd: sd["encoder.layer.1.attention.self.key.weight"].__setitem__((0, 0), float("nan")))
    return d


def _inf_weight(models):
    d = _variant(models, "inf_weight")
    _edit_weights(d, lambda sd: sd["embeddings.LayerNorm.weight"].__setitem__(3, float("inf")))
    return d


def _truncated(n_bytes):
    def make(models):
        d = _variant(models, f"truncated_{n_bytes}")
        data = (d / "model.safetensors").read_bytes()
        (d / "model.safetensors").write_bytes(data[:n_bytes if n_bytes > 0 else len(data) // 2])
        return d
    return make


BAD_MODELS = {
    "bert weights, gpt-2 config": (_wrong_config, ["29 parameter(s) of the model are not in the file",
                                                   "transformer.h.0.attn.c_attn"]),
    "gpt-2 weights, bert config": (_wrong_config_gpt, ["parameter(s) of the model are not in the file",
                                                       "embeddings.LayerNorm"]),
    "a query weight missing": (_missing_query, ["1 parameter(s)", "encoder.layer.0.attention.self.query.weight"]),
    "another shape": (_other_shape, ["have another shape", "intermediate.dense"]),
    "a NaN weight": (_nan_weight, ["non-finite", "encoder.layer.1.attention.self.key.weight (1 NaN"]),
    "an infinite weight": (_inf_weight, ["non-finite", "embeddings.LayerNorm.weight (0 NaN, 1 inf)"]),
    "safetensors cut in half": (_truncated(0), ["model.safetensors: not a complete safetensors file"]),
    "safetensors cut to 4 bytes": (_truncated(4), ["model.safetensors: not a complete safetensors file"]),
}


@pytest.mark.parametrize("case", list(BAD_MODELS))
def test_mis_loaded_model_refused_in_one_line(models, case, tmp_path, capsys):
    make, needles = BAD_MODELS[case]
    d = make(models)
    with pytest.raises(ModelLoadError):
        load_model(d)
    rc = _diagnose(d, tmp_path / "out")
    _one_line(capsys, rc, *needles)
    assert not (tmp_path / "out" / "heads.csv").exists()


def test_good_models_load(models):
    """Extra tensors of another head are fine, and so is a missing pooler (a masked-LM checkpoint)."""
    extra = _variant(models, "extra_tensor")
    _edit_weights(extra, lambda sd: sd.__setitem__("cls.predictions.bias", torch.zeros(30522)))
    no_pooler = _variant(models, "no_pooler")
    _edit_weights(no_pooler, lambda sd: [sd.pop(k) for k in list(sd) if k.startswith("pooler.")])
    for d in (models["bert"], models["gpt"], extra, no_pooler):
        model, tok = load_model(d)
        assert not any(torch.isnan(p).any() for p in model.parameters())


def test_loaded_weights_are_the_files(models):
    from safetensors.torch import load_file
    model, _ = load_model(models["gpt"])
    sd = load_file(models["gpt"] / "model.safetensors")
    own = model.state_dict()
    assert all(torch.equal(own[k], v) for k, v in sd.items() if k in own)
    assert torch.equal(model.lm_head.weight, model.transformer.wte.weight)      # tied, not stored


def _tiny_gguf(path: Path) -> Path:
    gguf = pytest.importorskip("gguf")
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tensor("token_embd.weight", np.ones((64, 16), dtype=np.float32))
    w.add_tensor("output_norm.weight", np.ones((16,), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize("cut", [0, 4, 100, -64, "garbage"])
def test_truncated_gguf_one_line(tmp_path, capsys, cut):
    whole = _tiny_gguf(tmp_path / "whole.gguf").read_bytes()
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"not a gguf file at all" if cut == "garbage" else whole[:cut] if cut >= 0 else whole[:cut])
    with pytest.raises(ModelLoadError, match="model.gguf: not a"):
        load_model(bad)
    rc = _diagnose(bad, tmp_path / "out")
    _one_line(capsys, rc, "model.gguf: not a")


def test_loading_info_names_missing_and_mismatched():
    from attnspec.models.loading import _check_loading_info
    _check_loading_info({"missing_keys": {"pooler.dense.weight"}, "unexpected_keys": {"cls.x"}}, Path("m"))
    with pytest.raises(ModelLoadError, match=r"2 parameter\(s\).*a.weight, b.weight.*1 tensor\(s\) of the file"):
        _check_loading_info({"missing_keys": {"b.weight", "a.weight"}, "unexpected_keys": {"model.a.weight"},
                             "mismatched_keys": set(), "error_msgs": []}, Path("model.gguf"))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["minilm", "mpnet", "gemma3-270m", "qwen2.5-0.5b"])
def test_packaged_models_still_load(name):
    model, tok = load_model(name)
    assert tok is not None and not model.training


# ------------------------------------------------------------------------------------------------ 5: atomic outputs
def test_outputs_replace_an_earlier_run(models, tmp_path, capsys):
    out = tmp_path / "out"
    assert _diagnose(models["bert"], out, "--parquet") == 0
    assert (out / "heads.parquet").is_file()
    victim = tmp_path / "victim.html"
    victim.write_text("not yours")
    (out / "report.html").unlink()
    (out / "report.html").symlink_to(victim)
    capsys.readouterr()
    assert _diagnose(models["bert"], out) == 0
    assert victim.read_text() == "not yours"                       # the symlink was replaced, not written through
    assert not (out / "report.html").is_symlink() and "<html" in (out / "report.html").read_text()
    assert sorted(p.name for p in out.iterdir()) == ["heads.csv", "layers.csv", "pairs.csv", "report.html",
                                                      "roles.csv", "summary.json"]   # no stale parquet or temporary


def test_failed_write_leaves_the_earlier_run(models, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    assert _diagnose(models["bert"], out) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    import attnspec.report as report

    def full_disk(diag):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(report, "render_report", full_disk)
    capsys.readouterr()
    rc = _diagnose(models["bert"], out, "--seed", "1")
    _one_line(capsys, rc, "No space left on device")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_diagnosis_writers_are_atomic(tmp_path, monkeypatch):
    import pandas as pd

    from attnspec.diagnostics.result.diagnosis import Diagnosis
    d = Diagnosis(heads=pd.DataFrame({"layer": [0], "head": [0]}), layers=pd.DataFrame({"layer": [0]}),
                  summary={"model": "toy"})
    assert [p.name for p in d.to_csv(tmp_path)] == ["heads.csv", "layers.csv", "pairs.csv", "summary.json"]
    old = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    calls = []

    def fail_third(self, path, **kw):
        calls.append(path)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        Path(path).write_text("x")
    monkeypatch.setattr(pd.DataFrame, "to_csv", fail_third)
    with pytest.raises(OSError):
        d.to_csv(tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == old
    link = tmp_path / "doc.json"
    target = tmp_path.parent / f"{tmp_path.name}-target.json"
    target.write_text("keep")
    link.symlink_to(target)
    d.to_json(link)
    assert target.read_text() == "keep" and not link.is_symlink()


@pytest.mark.parametrize("argv", [["diagnose", "--model", "minilm"], ["reproduce", "hayase2025"], ["figures"]])
def test_empty_out_refused(argv, capsys):
    rc = main(argv + ["--out", ""])
    _one_line(capsys, rc, "--out", "not empty")


# ------------------------------------------------------------------------------------------------ 6: no debris
@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_removes_the_forward_cache(models, tmp_path, monkeypatch, capsys, sig, code):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    finish = forward_cache.ForwardCache.finish
    seen = []

    def finish_then_signal(self, key, writer, n):      # a batch just written during the first forward pass
        records = finish(self, key, writer, n)
        seen.append(self.dir)
        os.kill(os.getpid(), sig)
        return records
    monkeypatch.setattr(forward_cache.ForwardCache, "finish", finish_then_signal)
    # the command line leaves a SIGINT that its parent ignores ignored (``cmd &`` in a script): not this test's case
    ignored = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        rc = _diagnose(models["bert"], tmp_path / "out")
    finally:
        signal.signal(signal.SIGINT, ignored)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == code and seen
    assert err[-1] == f"attnspec diagnose: interrupted by {signal.Signals(sig).name}; temporary files removed"
    assert not any("Traceback" in e for e in err)
    assert not list(scratch.glob("attnspec-forward-*"))
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL                  # handlers restored


def test_stale_caches_removed_live_ones_kept(tmp_path):
    host = socket.gethostname()

    def cache(name, owner=None, age=0.0):
        d = tmp_path / f"{forward_cache.PREFIX}{name}"
        d.mkdir()
        if owner is not None:
            (d / forward_cache.OWNER).write_text(owner)
        t = os.path.getmtime(d) - age
        os.utime(d, (t, t))
        return d
    dead = cache("dead", f"{host} 999999999")
    live = cache("live", f"{host} {os.getpid()}", age=10 * forward_cache.STALE_AGE_S)
    other_new = cache("other-new", "elsewhere 1")
    other_old = cache("other-old", "elsewhere 1", age=2 * forward_cache.STALE_AGE_S)
    orphan_new = cache("no-owner")
    removed = forward_cache.remove_stale(str(tmp_path))
    assert sorted(removed) == sorted([str(dead), str(other_old)])
    assert live.is_dir() and other_new.is_dir() and orphan_new.is_dir()


def test_new_cache_cleans_stale_ones_and_names_its_owner(tmp_path, monkeypatch):
    dead = tmp_path / f"{forward_cache.PREFIX}killed"
    dead.mkdir()
    (dead / forward_cache.OWNER).write_text(f"{socket.gethostname()} 999999999")
    monkeypatch.setattr(forward_cache, "_CLEANED", set())
    with forward_cache.ForwardCache(directory=str(tmp_path)) as c:
        assert not dead.exists()
        assert (Path(c.dir) / forward_cache.OWNER).read_text() == f"{socket.gethostname()} {os.getpid()}"
    assert not Path(c.dir).exists()


# ------------------------------------------------------------------------------------------------ 7: bounded resources
@pytest.mark.parametrize("flags,needles", [
    (["--workers", "100000"], ["--workers 100000: at most", "--scheduler"]),
    (["--threads", "100000"], ["--threads 100000: at most"]),
    (["--n-boot", "10000000"], ["--n-boot", "10000000: must be an integer in [0, 10000]"]),
])
def test_resource_bounds_before_loading(models, flags, needles, tmp_path, capsys, monkeypatch):
    import attnspec.models as M
    monkeypatch.setattr(M, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    rc = main(["diagnose", "--model", str(models["bert"]), "--out", str(tmp_path / "o"), "--max-length", "16", *flags])
    _one_line(capsys, rc, *needles)


def test_sweep_grid_bound_and_dry_run_count(tmp_path, capsys):
    db = str(tmp_path / "s.sqlite")
    rc = main(["sweep", "--db", db, "--grid", "beta=0:1:1000", "--grid", "seed=0:999:1000", "--dry-run"])
    _one_line(capsys, rc, "1,000,000 points", "100,000")
    rc = main(["sweep", "--db", db, "--grid", "beta=0:1:1000000000", "--dry-run"])
    _one_line(capsys, rc, "NUM 1,000,000,000")
    rc = main(["sweep", "--db", db, "--grid", "beta=0.5,1.0", "--seeds", "0,1", "--seq-len", "8", "--d-model", "8",
               "--dry-run"])
    assert rc == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("sweep: 4 points")
    rc = main(["sweep", "--db", db, "--workers", "100000", "--grid", "beta=1.0"])
    _one_line(capsys, rc, "--workers 100000: at most")


def test_identify_spectrum_size_bounded(tmp_path, capsys):
    f = tmp_path / "eigs.npy"
    np.save(f, np.random.default_rng(0).chisquare(3, 30_000))
    rc = main(["identify", str(f), "--boot", "2", "--no-progress"])
    _one_line(capsys, rc, "INPUT (30000 eigenvalues)", "of memory")


def test_scheduler_that_is_not_dask(tmp_path, capsys, monkeypatch, models):
    pytest.importorskip("distributed")
    import attnspec.cli.diagnose as D
    monkeypatch.setattr(D, "SCHEDULER_TIMEOUT_S", 2)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        rc = main(["diagnose", "--model", str(models["bert"]), "--out", str(tmp_path / "o"), *FAST,
                   "--scheduler", f"tcp://127.0.0.1:{server.server_address[1]}"])
    finally:
        server.shutdown()
        server.server_close()
    _one_line(capsys, rc, "--scheduler", "no Dask scheduler answered there within 2 s")


# ------------------------------------------------------------------------------------------------ 8, 10: before loading
@pytest.mark.parametrize("model_type", ["deberta", "bloom", "xlnet"])
def test_refused_family_before_loading(models, model_type, tmp_path, capsys, monkeypatch):
    import attnspec.models as M
    monkeypatch.setattr(M, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    d = _variant(models, f"family_{model_type}")
    cfg = json.loads((d / "config.json").read_text())
    cfg["model_type"] = model_type
    (d / "config.json").write_text(json.dumps(cfg))
    rc = _diagnose(d, tmp_path / "o")
    _one_line(capsys, rc, "--model", f"model_type '{model_type}'", "refuses")


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is available")
def test_missing_cuda_before_loading(models, tmp_path, capsys, monkeypatch):
    import attnspec.models as M
    monkeypatch.setattr(M, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    rc = _diagnose(models["bert"], tmp_path / "o", "--device", "cuda")
    _one_line(capsys, rc, "--device cuda: no CUDA device")


def test_missing_mps_before_loading(models, tmp_path, capsys, monkeypatch):
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        pytest.skip("an MPS device is available")
    rc = _diagnose(models["bert"], tmp_path / "o", "--device", "mps")
    _one_line(capsys, rc, "--device mps: no MPS device")


def test_gemma3_float16_refused_before_loading(tmp_path, capsys, monkeypatch):
    import attnspec.models as M
    monkeypatch.setattr(M, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    rc = main(["diagnose", "--model", "gemma3-270m", "--dtype", "float16", "--out", str(tmp_path / "o")])
    _one_line(capsys, rc, "--dtype float16", "bfloat16")


def test_overflow_in_reduced_dtype_is_one_line(models, tmp_path, capsys, monkeypatch):
    import attnspec.diagnostics as Dg

    def overflow(*a, **k):
        raise torch.linalg.LinAlgError("linalg.eigh: The algorithm failed to converge because the input matrix is "
                                       "ill-conditioned")
    monkeypatch.setattr(Dg, "diagnose", overflow)
    rc = _diagnose(models["bert"], tmp_path / "o", "--dtype", "bfloat16")
    _one_line(capsys, rc, "--dtype bfloat16", "not finite")


def test_zoo_checkpoint_without_simulation_names_inputs(tmp_path, capsys):
    d = tmp_path / "ckpt"
    d.mkdir()
    (d / "attnspec_zoo.json").write_text(json.dumps({"format": "attnspec.zoo", "version": 1, "arch": "staged",
                                                     "config": {}, "meta": {}}))
    rc = main(["diagnose", "--model", str(d), "--out", str(tmp_path / "o")])
    _one_line(capsys, rc, "--inputs", "meta['sim']")


def test_truncated_png_names_the_file(tmp_path, capsys):
    from PIL import Image
    cfg = transformers.ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                                 image_size=32, patch_size=8)
    d = tmp_path / "vit"
    transformers.ViTModel(cfg).save_pretrained(d)
    images = tmp_path / "images"
    images.mkdir()
    Image.fromarray(np.zeros((32, 32, 3), dtype=np.uint8)).save(images / "a.png")
    data = (images / "a.png").read_bytes()
    (images / "b.png").write_bytes(data[:len(data) // 2])
    rc = main(["diagnose", "--model", str(d), "--images", str(images), "--n-texts", "2", "--out", str(tmp_path / "o"),
               "--quiet", "--n-boot", "0"])
    _one_line(capsys, rc, "--images", "b.png", "cannot be read as an image")


@pytest.mark.slow
def test_sigterm_from_another_process_leaves_no_cache(models, tmp_path):
    """`timeout`, SLURM and `docker stop` send SIGTERM from outside: the CLI in its own process, signalled while its
    forward cache is on disk, ends with one line and exit 143, and the cache is gone."""
    import subprocess
    import sys
    import time
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = dict(os.environ, TMPDIR=str(scratch))
    cmd = [sys.executable, "-m", "attnspec", "diagnose", "--model", str(models["bert"]), "--out", str(tmp_path / "o"),
           "--n-texts", "512", "--max-length", "64", "--threads", "1", "--quiet", "--removal", "none"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list(scratch.glob("attnspec-forward-*")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, "the diagnosis ended before its cache appeared"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    lines = err.strip().splitlines()
    assert proc.returncode == 143, err
    assert lines[-1] == "attnspec diagnose: interrupted by SIGTERM; temporary files removed"
    assert "Traceback" not in err and not list(scratch.glob("attnspec-forward-*"))


def test_diagnose_and_the_callback_leave_every_submodule_in_its_own_mode():
    """A model in training mode whose embeddings are frozen in evaluation mode: after a diagnosis and after the
    training callback, each submodule is in the mode it had (``model.train()`` would give the frozen part its
    dropout back)."""
    import transformers
    from attnspec import diagnose
    from attnspec.callbacks import AttnspecCallback
    from attnspec.data import builtin_texts
    from attnspec.models import load_model
    tok = load_model("minilm")[1]
    torch.manual_seed(0)
    model = transformers.BertModel(transformers.BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=1,
                                                           num_attention_heads=2, intermediate_size=64)).train()
    model.embeddings.eval()
    before = {name: m.training for name, m in model.named_modules()}
    assert before["embeddings.dropout"] is False and before["encoder"] is True
    diagnose(model, tok, builtin_texts(8), removal="none", gradient=False, progress=False)
    assert {name: m.training for name, m in model.named_modules()} == before
    AttnspecCallback(tok, builtin_texts(8), n_boot=20).diagnose_now(model, step=1)
    assert {name: m.training for name, m in model.named_modules()} == before
