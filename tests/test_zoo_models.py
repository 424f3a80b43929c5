"""Each zoo model learns the easy small simulated task; checkpoints; the diagnosis sees every block."""
import numpy as np
import pandas as pd
import pytest
import torch

from attnspec import zoo
from attnspec.zoo.checkpoint import build
from attnspec.zoo.eeg_sim import SimConfig, make_dataset
from attnspec.zoo.train import evaluate, split, train_model

# easy and small: one subject, strong mu rhythm with deep ERD, 1 s epochs, 84 training trials
EASY = SimConfig(n_subjects=1, trials_per_class=60, erd_depth=0.85, erd_depth_sd=0.05, mu_uv=14.0, background_uv=5.0)
SETTINGS = {
    "anisotropic": dict(model=dict(patch=32, n_filters=4, d_model=16, n_heads=2), epochs=10),
    "staged": dict(model=dict(scales=(15, 31), n_filters=4, pool=32, stride=16, d_model=16, n_heads=2, n_layers=1), epochs=12),
    "spd": dict(model=dict(n_segments=2, numtaps=33, d_model=16, n_heads=2, bands=((8, 13), (13, 30))), epochs=12),
    "diffuse": dict(model=dict(n_filters=4, d_model=16, n_heads=2, n_layers=1), epochs=12),
}


@pytest.fixture(scope="module")
def data():
    X, y, _ = make_dataset(EASY, 0.5, 1.5)
    tr, te = split(y, 0.3, 0)       # 84 train / 36 test
    return X[tr], y[tr], X[te], y[te]


@pytest.mark.parametrize("arch", list(SETTINGS))
def test_model_beats_chance_on_easy_set(arch, data):
    Xtr, ytr, Xte, yte = data
    s = SETTINGS[arch]
    torch.manual_seed(0)
    m = build(arch, dict(n_channels=22, n_times=Xtr.shape[-1], n_classes=2, **s["model"]))
    train_model(m, Xtr, ytr, epochs=s["epochs"], lr=5e-3, progress=False)
    acc = evaluate(m, Xte, yte)
    # 36 held-out trials: P(acc >= 0.75 | chance) < 0.002
    assert acc >= 0.75, f"{arch}: held-out accuracy {acc:.2f} (chance 0.5, n={len(yte)})"


def test_training_is_deterministic(data):
    Xtr, ytr, _, _ = data
    outs = []
    for _ in range(2):
        torch.manual_seed(0)
        m = build("diffuse", dict(n_channels=22, n_times=Xtr.shape[-1], n_classes=2, **SETTINGS["diffuse"]["model"]))
        train_model(m, Xtr[:24], ytr[:24], epochs=2, progress=False, seed=3)
        outs.append(torch.cat([p.detach().flatten() for p in m.parameters()]))
    assert torch.equal(outs[0], outs[1])


def test_checkpoint_round_trip_and_diagnosis(tmp_path, data):
    pytest.importorskip("attnspec.diagnostics")
    Xtr, ytr, Xte, _ = data
    torch.manual_seed(0)
    m = build("anisotropic", dict(n_channels=22, n_times=Xtr.shape[-1], n_classes=2, patch=32, n_filters=4,
                                  d_model=16, n_heads=2))
    train_model(m, Xtr[:16], ytr[:16], epochs=1, progress=False)
    meta = dict(sim=EASY.to_dict(), tmin=0.5, tmax=1.5, split_seed=0, test_fraction=0.3)
    zoo.save(m, tmp_path / "ck", meta)
    assert zoo.is_checkpoint(tmp_path / "ck") and not (tmp_path / "ck" / "config.json").exists()
    assert not list((tmp_path / "ck").glob("*.pt")) and not list((tmp_path / "ck").glob("*.bin"))
    m2 = zoo.load(tmp_path / "ck")
    x = torch.as_tensor(Xte[:4])
    torch.testing.assert_close(m2(x), m.eval()(x))
    # `attnspec diagnose --model CK` on a zoo checkpoint: held-out trials regenerated from its metadata
    from attnspec.cli import main

    assert main(["diagnose", "--model", str(tmp_path / "ck"), "--n-texts", "4", "--no-gradient", "--quiet",
                 "--out", str(tmp_path / "d")]) == 0
    assert (tmp_path / "d" / "report.html").stat().st_size > 10_000
    heads = pd.read_csv(tmp_path / "d" / "heads.csv")
    layers = pd.read_csv(tmp_path / "d" / "layers.csv")
    assert (tmp_path / "d" / "summary.json").is_file()
    assert set(heads.block) == {"blocks.0.temporal", "blocks.0.spatial"}
    assert set(heads.path) == {"temporal", "spatial"} and len(heads) == 4
    assert list(layers.block) == ["blocks.0.temporal", "blocks.0.spatial"]
    # the structure masks reach the statistics: a temporal query sees only its own electrode's P patches
    P = m2.n_patches
    assert np.allclose(heads[heads.path == "temporal"].entropy_uniform, np.log(P))
    assert np.allclose(heads[heads.path == "spatial"].entropy_uniform, np.log(22))
