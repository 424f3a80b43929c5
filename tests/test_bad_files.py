"""Damaged or foreign files end in one line naming the flag and the file (exit 2), never a traceback: EEG
recordings given to --inputs, zoo checkpoints with an unknown architecture or a configuration key the
architecture does not take, and spectra in deeply nested JSON or with integers no float holds."""
import json
import shutil
from pathlib import Path

import pytest

from attnspec.cli import main

ZOO = Path(__file__).parent / "data" / "zoo_tiny" / "anisotropic"


def _one_line(capsys, *needles):
    err = capsys.readouterr().err.strip().splitlines()
    assert err and "Traceback" not in "\n".join(err), err
    for n in needles:
        assert n in err[-1], (n, err[-1])


@pytest.mark.parametrize("content", [b"", b"garbage, not a FIF file"])
def test_an_unreadable_eeg_file_names_inputs(content, tmp_path, capsys):
    bad = tmp_path / "rec.fif"
    bad.write_bytes(content)
    assert main(["diagnose", "--model", str(ZOO), "--inputs", str(bad), "--quiet", "--out", str(tmp_path / "o")]) == 2
    _one_line(capsys, "--inputs", "cannot be read as an EEG recording")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("edit,words", [
    (lambda doc: doc.__setitem__("arch", "no-such-arch"), "unknown architecture 'no-such-arch'"),
    (lambda doc: doc["config"].__setitem__("extra_key", 3), "does not fit architecture 'anisotropic'"),
])
def test_a_foreign_zoo_checkpoint_names_model(edit, words, tmp_path, capsys):
    ck = tmp_path / "ck"
    shutil.copytree(ZOO, ck)
    doc = json.loads((ck / "attnspec_zoo.json").read_text())
    edit(doc)
    (ck / "attnspec_zoo.json").write_text(json.dumps(doc))
    assert main(["diagnose", "--model", str(ck), "--quiet", "--out", str(tmp_path / "o")]) == 2
    _one_line(capsys, "--model", words)


@pytest.mark.parametrize("text,words", [
    ("[" * 5000 + "]" * 5000, "not valid JSON"),
    (json.dumps({"eigenvalues": [int("9" * 401), 1.0]}), "fit a float"),
])
def test_a_spectrum_no_parser_or_float_holds_is_one_line(text, words, tmp_path, capsys):
    f = tmp_path / "eigs.json"
    f.write_text(text)
    assert main(["identify", str(f)]) == 2
    _one_line(capsys, "eigs.json", words)


def test_more_removal_texts_than_texts_names_the_flag_before_loading(tmp_path, capsys):
    assert main(["diagnose", "--model", "minilm", "--n-texts", "4", "--removal-texts", "100", "--quiet",
                 "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "loading" not in err and "Traceback" not in err                  # refused before the model loads
    assert "--removal-texts 100" in err.strip().splitlines()[-1] and "exceeds the 4 texts" in err
