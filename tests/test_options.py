"""``DiagnoseOptions``: frozen, every constraint declared once and enforced from the API and the command line alike.

Invalid values are generated from the declarations (:func:`attnspec.diagnostics.options.invalid_values`), so a
new option is covered as soon as it is declared; a test also checks that every option is set by a flag of
``attnspec diagnose`` or listed as fixed there.
"""
import dataclasses

import pytest

import attnspec
from attnspec.cli import main
from attnspec.cli.diagnose import FLAG_OF
from attnspec.diagnostics.options import DiagnoseOptions, OptionError, invalid_values

FIELDS = [f.name for f in dataclasses.fields(DiagnoseOptions)]
#: Options that ``attnspec diagnose`` leaves at their defaults (documented next to FLAG_OF).
FIXED_ON_THE_CLI = {"threshold", "min_tokens", "max_tokens", "removal_bucket_size", "tile_bytes", "reuse_forward"}
#: Flags whose value is a number or a word, with the option they set (the others are switches).
VALUED_FLAGS = {n: f for n, f in FLAG_OF.items() if n not in ("pack", "removal", "mean_ablation", "gradient",
                                                               "progress", "model_name")}


def test_options_are_frozen_and_keyword_arguments_are_the_same_options():
    o = DiagnoseOptions(n_boot=50)
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.n_boot = 10
    assert DiagnoseOptions.of(None, n_boot=50) == o == DiagnoseOptions.of(DiagnoseOptions(), n_boot=50)
    assert DiagnoseOptions.of(o) is o
    with pytest.raises(TypeError, match="unknown diagnosis options \\['n_bot'\\]"):
        DiagnoseOptions.of(None, n_bot=3)


@pytest.mark.parametrize("name", FIELDS)
def test_every_invalid_value_is_refused_naming_the_option(name):
    bad = invalid_values(name)
    assert bad, name
    for v in bad:
        with pytest.raises(OptionError, match=f"^{name} must be ") as err:
            DiagnoseOptions(**{name: v})
        assert err.value.option == name and DiagnoseOptions.constraints()[name] in str(err.value)
        with pytest.raises(OptionError, match=f"^{name} must be "):          # the API checks before any work
            attnspec.diagnose(None, None, None, **{name: v})


def test_cross_option_rule_and_unknown_keyword_from_the_api():
    with pytest.raises(OptionError, match="removal_texts must be .*'auto' applies to removal 'exact' or 'sampled'"):
        DiagnoseOptions(removal="screened", removal_texts="auto")
    DiagnoseOptions(removal="auto", removal_texts="auto")          # 'auto' resolves to exact or sampled
    with pytest.raises(TypeError, match="n_bot"):
        attnspec.diagnose(None, None, None, n_bot=3)


def test_every_option_has_a_flag_or_is_fixed_on_the_command_line():
    assert set(FIELDS) == set(FLAG_OF) | FIXED_ON_THE_CLI
    assert not set(FLAG_OF) & FIXED_ON_THE_CLI


@pytest.mark.parametrize("name", sorted(VALUED_FLAGS))
def test_the_command_line_refuses_what_the_declarations_refuse(name, tmp_path, capsys):
    """Each invalid number or word generated from the declaration exits 2 with one line naming the flag,
    before any model is loaded."""
    bad = [v for v in invalid_values(name) if v is not None and not isinstance(v, bool)
           and not (isinstance(v, str) and v.isdigit())]          # '1' is the number 1 on a command line
    assert bad
    for v in bad:
        argv = ["diagnose", "--model", "minilm", "--out", str(tmp_path / "o"), VALUED_FLAGS[name], str(v)]
        assert main(argv) == 2, (name, v)
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) <= 3 and VALUED_FLAGS[name] in err[-1] and "must be" in err[-1], (name, v, err)
        assert not (tmp_path / "o").exists()


def test_the_command_line_refuses_auto_texts_with_screened_removal_before_loading(tmp_path, capsys):
    argv = ["diagnose", "--model", "minilm", "--out", str(tmp_path / "o"), "--removal", "screened",
            "--removal-texts", "auto"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--removal-texts auto" in err and "'auto' applies to removal 'exact' or 'sampled'" in err
    assert "loading" not in capsys.readouterr().err


def test_the_help_states_the_declared_bound_of_n_boot_and_the_spectra_texts(capsys):
    from attnspec.diagnostics.options import MAX_N_BOOT
    from attnspec.diagnostics.pipeline.spectra_plan import MIN_EIGENVALUES, START, TARGET
    from attnspec.diagnostics.statistics.bootstrap import MIN_TEXTS_FOR_INTERVALS
    assert main(["diagnose", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"0..{MAX_N_BOOT}" in text.replace(" ", "")
    spectra = text[text.index("--spectra-texts"):]
    assert f">= {MIN_TEXTS_FOR_INTERVALS}," in spectra and f"'auto' (default): {START} texts" in spectra
    assert f"at least {MIN_EIGENVALUES} eigenvalues" in spectra
    assert f"on {TARGET:.0%} of heads" in spectra


def test_the_summary_records_what_was_used_and_what_did_not_apply():
    """An option this model or mode ignores is listed with the reason, beside every option asked and the model's
    dtype and device."""
    import torch

    from attnspec.models.tiny import tiny_causal_lm
    torch.set_num_threads(1)
    ad, batch = tiny_causal_lm()
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask")}
    s = attnspec.diagnose(ad, inputs, removal="first-order", removal_vocab=64, screen_top=1, n_texts=3,
                          min_tokens=0, n_boot=20).summary
    assert sorted(s["options_not_applied"]) == ["n_texts", "removal_vocab", "screen_top"]
    assert "causal LM" in s["options_not_applied"]["removal_vocab"]
    assert s["options"]["removal_vocab"] == 64 and s["options"]["removal"] == "first-order"
    assert (s["dtype"], s["device"]) == ("torch.float32", "cpu")
