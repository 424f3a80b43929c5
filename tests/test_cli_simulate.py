"""``attnspec simulate`` end to end: flags, config files, JSON and PNG outputs, clear errors."""
import json
import subprocess
import sys

import pytest

from attnspec import MHSAConfig
from attnspec.cli import main


def test_simulate_writes_json_and_plot(tmp_path):
    out, png = tmp_path / "sim.json", tmp_path / "sim.png"
    rc = main(["simulate", "--seq-len", "120", "--d-model", "160", "--heads", "4", "--d-qk", "40", "--d-out", "100",
               "--beta", "0.8", "--kv-groups", "2", "--draws", "2", "--seed", "3", "--json", str(out), "--plot", str(png),
               "--no-progress"])
    assert rc == 0
    data = json.loads(out.read_text())
    assert len(data["softmax_eigenvalues"]) == len(data["surrogate_eigenvalues"]) == 240
    assert set(data["moments"]) == {"softmax", "surrogate"} and len(data["moments"]["softmax"]) == 4
    assert {"w1", "ks", "w1_bulk", "ks_bulk", "n_outliers"} <= set(data["distances"])
    cfg = MHSAConfig.from_dict(data["config"])
    assert cfg.key_groups == cfg.value_groups == 2 and cfg.beta == 0.8 and cfg.d_qk == (40,) * 4
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_config_file_and_flag_override(tmp_path):
    cfg = MHSAConfig.uniform(100, 100, heads=2, d_qk=50, values="tied-to-keys", beta=0.5).save(tmp_path / "c.toml")
    out = tmp_path / "o.json"
    assert main(["simulate", "--config", str(cfg), "--beta", "0.9", "--json", str(out)]) == 0
    got = MHSAConfig.from_dict(json.loads(out.read_text())["config"])
    assert got.values == "tied-to-keys" and got.beta == 0.9 and got.n_heads == 2


def test_attention_target_and_per_head_widths(tmp_path):
    out = tmp_path / "a.json"
    assert main(["simulate", "--target", "attention", "--seq-len", "100", "--d-model", "100", "--json", str(out)]) == 0
    assert MHSAConfig.from_dict(json.loads(out.read_text())["config"]).d_qk == (100,)
    assert main(["simulate", "--seq-len", "80", "--d-model", "100", "--d-qk", "10,30", "--d-v", "20,20",
                 "--json", str(out)]) == 0
    assert MHSAConfig.from_dict(json.loads(out.read_text())["config"]).d_qk == (10, 30)


@pytest.mark.parametrize("flags, parameter", [
    (["--beta", "nan"], "beta"),
    (["--seq-len", "600"], "seq_len"),
    (["--heads", "4", "--kv-groups", "3"], "key_groups"),
    (["--heads", "2", "--d-v", "10", "--tie-values-to-keys"], "d_v"),
])
def test_invalid_flags_exit_2_naming_the_parameter(flags, parameter, capsys):
    assert main(["simulate", "--d-model", "100", "--seq-len", "100", *flags]) == 2  # later flags win
    assert parameter in capsys.readouterr().err


def test_console_script_help():
    done = subprocess.run([sys.executable, "-m", "attnspec", "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "simulate" in done.stdout
    sub = subprocess.run([sys.executable, "-m", "attnspec", "simulate", "--help"], capture_output=True, text=True,
                         timeout=120)
    for flag in ("--seq-len", "--d-model", "--heads", "--d-qk", "--d-v", "--d-out", "--beta", "--input", "--kv-groups",
                 "--tie-values-to-keys", "--target", "--draws", "--seed", "--config", "--json", "--plot"):
        assert flag in sub.stdout
