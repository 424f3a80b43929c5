"""Regenerate the tiny seeded zoo checkpoints of this directory (one per architecture).

    python tests/data/zoo_tiny/make_checkpoints.py

Each is trained for 2 epochs on a small simulated set with one torch thread, so the weights are a
function of the seed. The tables next to them (``<arch>/tables/*.csv``) were written by the zoo's
former diagnosis path (``attnspec.zoo.diagnose_checkpoint``, before issue 15) on the first 4
held-out trials; ``tests/test_zoo_public_api.py`` checks that ``attnspec diagnose`` reproduces them.
"""
from pathlib import Path

import torch

from attnspec.zoo.checkpoint import build, save
from attnspec.zoo.eeg_sim import SimConfig, make_dataset
from attnspec.zoo.train import split, train_model

SIM = SimConfig(n_subjects=1, trials_per_class=12, erd_depth=0.85, erd_depth_sd=0.05, mu_uv=14.0,
                background_uv=5.0, seed=0)
MODELS = {
    "anisotropic": dict(patch=32, n_filters=4, d_model=16, n_heads=2),
    "staged": dict(scales=(15, 31), n_filters=4, pool=32, stride=16, d_model=16, n_heads=2, n_layers=1),
    "spd": dict(n_segments=2, numtaps=33, d_model=16, n_heads=2, bands=((8, 13), (13, 30))),
    "diffuse": dict(n_filters=4, d_model=16, n_heads=2, n_layers=1),
}


def main(root: Path = Path(__file__).parent) -> None:
    torch.set_num_threads(1)
    X, y, _ = make_dataset(SIM, 0.5, 1.5)
    tr, _ = split(y, 0.25, 0)
    meta = dict(sim=SIM.to_dict(), tmin=0.5, tmax=1.5, split_seed=0, test_fraction=0.25)
    for arch, kw in MODELS.items():
        torch.manual_seed(0)
        m = build(arch, dict(n_channels=X.shape[1], n_times=X.shape[2], n_classes=2, **kw))
        train_model(m, X[tr], y[tr], epochs=2, lr=5e-3, seed=0, progress=False)
        save(m, root / arch, meta)
        print(root / arch)


if __name__ == "__main__":
    main()
