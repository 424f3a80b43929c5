"""The statistics on the model's device (``statistics_device='model'``), run here on the CPU.

Without a GPU these tests check what a CPU can: the option and its flag, that ``'model'`` gives the CPU tables
on a CPU model, and the rule that keeps the one code path valid on CUDA: inside the statistics, results leave
the device only through :func:`attnspec.diagnostics.statistics.devices.host` (``Tensor.numpy()`` fails on a CUDA
tensor, and works silently on a CPU one). On a machine with CUDA the last test compares CUDA tables with CPU
tables (float32, 1e-4).
"""
import subprocess
import sys
import threading

import numpy as np
import pandas as pd
import pytest
import torch

from attnspec import diagnose
from attnspec.data import builtin_texts
from attnspec.diagnostics import DiagnoseOptions
from attnspec.diagnostics.options import OptionError
from attnspec.diagnostics.pipeline import fit, passes, spectra
from attnspec.diagnostics.statistics import devices
from attnspec.models import adapt, load_model

torch.set_num_threads(1)


def _numeric(df: pd.DataFrame) -> list[str]:
    return [c for c in df.columns if pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c])]


def test_option_values_and_resolution():
    assert DiagnoseOptions().statistics_device == "cpu"
    with pytest.raises(OptionError, match="statistics_device must be one of 'cpu', 'model', got 'gpu'"):
        DiagnoseOptions(statistics_device="gpu")
    with pytest.raises(ValueError, match="statistics_device must be one of"):
        devices.statistics_device("cuda")
    model = torch.nn.Linear(2, 2)
    assert devices.statistics_device("model", model) == torch.device("cpu")
    assert devices.statistics_device("model", torch.nn.ReLU()) == torch.device("cpu")      # no parameters


def test_cli_flag_refuses_other_values(tmp_path):
    r = subprocess.run([sys.executable, "-m", "attnspec", "diagnose", "--model", "minilm", "--out", str(tmp_path),
                        "--statistics-device", "gpu"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--statistics-device" in r.stderr and "one of 'cpu', 'model'" in r.stderr


@pytest.fixture(scope="module")
def minilm():
    model, tok = load_model("minilm")
    return adapt(model), tok


def test_model_device_on_a_cpu_model_gives_the_cpu_tables(minilm):
    ad, tok = minilm
    texts = builtin_texts(12)
    kw = dict(removal="none", gradient=False, n_boot=20, min_tokens=0)
    a = diagnose(ad, tok, texts, **kw)
    b = diagnose(ad, tok, texts, statistics_device="model", **kw)
    assert a.summary["statistics_device"] == b.summary["statistics_device"] == "cpu"
    assert b.summary["options"]["statistics_device"] == "model"
    for t in ("heads", "layers"):
        cols = _numeric(getattr(a, t))
        assert len(cols) > 20
        pd.testing.assert_frame_equal(getattr(a, t)[cols], getattr(b, t)[cols], check_exact=True)


class _HostOnly:
    """While a statistic runs (in any worker thread), ``Tensor.numpy()`` raises unless called by ``devices.host``."""

    def __init__(self, monkeypatch):
        self.state, self.calls = threading.local(), 0
        real_numpy, real_host = torch.Tensor.numpy, devices.host

        def numpy(t, *a, **k):
            if getattr(self.state, "guarded", 0) and not getattr(self.state, "host", False):
                raise AssertionError("Tensor.numpy() inside the statistics: use devices.host (fails on CUDA)")
            return real_numpy(t, *a, **k)

        def host(x):
            self.state.host = True
            try:
                return real_host(x)
            finally:
                self.state.host = False
        monkeypatch.setattr(torch.Tensor, "numpy", numpy)
        for mod in (devices, fit, spectra) + tuple(sys.modules[m] for m in sys.modules
                                                   if m.startswith("attnspec.diagnostics.statistics.")):
            if getattr(mod, "host", None) is real_host:
                monkeypatch.setattr(mod, "host", host)

    def guard(self, fn):
        def run(*a, **k):
            self.state.guarded = getattr(self.state, "guarded", 0) + 1
            self.calls += 1
            try:
                return fn(*a, **k)
            finally:
                self.state.guarded -= 1
        return run


@pytest.mark.parametrize("which", ["minilm", "smollm2-135m"])
def test_statistics_hand_results_over_only_through_host(monkeypatch, minilm, which):
    """The fit, null and spectra statistics of an encoder (dense masks) and of a causal LM with grouped keys and
    values (rule masks): every ``Tensor.numpy()`` inside them goes through ``devices.host``."""
    guard = _HostOnly(monkeypatch)
    monkeypatch.setattr(fit.LayerFitSums, "update", guard.guard(fit.LayerFitSums.update))
    monkeypatch.setattr(fit.NullFitSums, "update", guard.guard(fit.NullFitSums.update))
    monkeypatch.setattr(passes, "layer_batch_spectra", guard.guard(spectra.layer_batch_spectra))
    if which == "minilm":
        ad, tok = minilm
    else:
        pytest.importorskip("gguf")
        model, tok = load_model(which)
        ad = adapt(model)
    d = diagnose(ad, tok, "builtin", n_texts=8, max_length=32, removal="none", gradient=False, n_boot=20,
                 min_tokens=0, statistics_device="model")
    assert guard.calls >= 3 * len(ad.sites)
    assert np.isfinite(d.heads["spec_w1_rel"]).all()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
def test_cuda_tables_equal_cpu_tables():
    """On CUDA, the statistics on the GPU give the CPU's tables to 1e-4 (float32 model)."""
    texts = builtin_texts(16)
    kw = dict(removal="none", gradient=False, n_boot=50, min_tokens=0)
    model, tok = load_model("minilm")
    cpu = diagnose(adapt(model), tok, texts, **kw)
    model, tok = load_model("minilm", device="cuda")
    gpu = diagnose(adapt(model), tok, texts, statistics_device="model", **kw)
    assert gpu.summary["statistics_device"].startswith("cuda")
    for col in _numeric(cpu.heads):
        x, y = cpu.heads[col].to_numpy(float), gpu.heads[col].to_numpy(float)
        np.testing.assert_allclose(y, x, rtol=1e-4, atol=1e-6, err_msg=col)
