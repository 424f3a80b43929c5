"""Zoo training is a function of the seed, not of the clock: same seed, same weights, busy or idle."""
import inspect
import subprocess
import sys

import pytest
import torch

from attnspec.zoo.checkpoint import build
from attnspec.zoo.eeg_sim import SimConfig, make_dataset
from attnspec.zoo.train import split, train_model

MODEL = dict(scales=(15, 31), n_filters=4, pool=32, stride=16, d_model=16, n_heads=2, n_layers=1)
EPOCHS = 4


@pytest.fixture(scope="module")
def data():
    X, y, _ = make_dataset(SimConfig(n_subjects=1, trials_per_class=24, erd_depth=0.85, erd_depth_sd=0.05,
                                     mu_uv=14.0, background_uv=5.0), 0.5, 1.5)
    tr, _ = split(y, 0.25, 0)
    return X[tr], y[tr]


def _train(X, y) -> tuple[torch.Tensor, list[dict]]:
    torch.manual_seed(0)
    m = build("staged", dict(n_channels=X.shape[1], n_times=X.shape[2], n_classes=2, **MODEL))
    hist = train_model(m, X, y, epochs=EPOCHS, lr=5e-3, seed=7, progress=False)
    state = torch.cat([t.detach().flatten().double() for t in m.state_dict().values()])
    return state, hist


@pytest.mark.timeout(120)
def test_same_seed_same_weights_idle_and_under_load(data):
    X, y = data
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        idle, h_idle = _train(X, y)
        # two CPU-bound busy loops (this box has 2 cores): the training below gets a fraction of a core
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
        try:
            busy, h_busy = _train(X, y)
        finally:
            for h in hogs:
                h.kill()
                h.wait()
    finally:
        torch.set_num_threads(threads)
    assert len(h_idle) == len(h_busy) == EPOCHS                      # a count, not a time budget
    assert torch.equal(idle, busy)                                   # bit for bit, parameters and buffers
    assert [h["loss"] for h in h_idle] == [h["loss"] for h in h_busy]


def test_no_time_budget_left():
    params = inspect.signature(train_model).parameters
    assert "max_seconds" not in params and "budget_clock" not in params
