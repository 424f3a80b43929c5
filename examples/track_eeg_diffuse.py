"""Track the diffuse-correction EEG model (attnspec.zoo) over its 20 training epochs.

The zoo's training loop takes attnspec's callback: after every epoch it diagnoses the model on 16 held-out
simulated trials, and the long table (out/eeg_diffuse_track/track.csv), its trajectories and report show when the
heads' temperature and selection settle.

    python examples/track_eeg_diffuse.py
    python examples/track_eeg_diffuse.py --quick
"""
from __future__ import annotations

import argparse

import torch

from attnspec.callbacks import AttnspecCallback
from attnspec.comparing.tracking import write_track

if __name__ == "__main__":
    from attnspec.zoo.experiment import QUICK_EPOCHS, build, default_sim, make_dataset
    from attnspec.zoo.train import evaluate, split, train_model

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--quick", action="store_true", help="small easy data set, 8 epochs")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--trials", type=int, default=16, help="held-out trials diagnosed after each epoch")
    p.add_argument("--out", default="out/eeg_diffuse_track")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    sim = default_sim(2, quick=a.quick, seed=0)
    X, y, _ = make_dataset(sim, 0.5, 2.5)                   # as attnspec.zoo.experiment.run_experiment
    tr, te = split(y, 0.25, 0)
    torch.manual_seed(0)
    model = build("diffuse", dict(n_channels=X.shape[1], n_times=X.shape[2], n_classes=len(sim.classes)))
    cb = AttnspecCallback(inputs=X[te][:a.trials], model_name="DiffuseCorrectionNet")
    hist = train_model(model, X[tr], y[tr], epochs=QUICK_EPOCHS if a.quick else a.epochs, callbacks=[cb])
    write_track(cb.table, a.out, {"model": "DiffuseCorrectionNet", "source": "zoo training loop"})
    for rec in hist:
        print(f"epoch {rec['epoch']:2d}: loss {rec['loss']:.3f}, diffuse heads {rec.get('attnspec/n_diffuse')}, "
              f"selective {rec.get('attnspec/n_selective')}, "
              f"mean score scale {rec.get('attnspec/score_scale_mean', float('nan')):.2f}")
    print(f"held-out accuracy {evaluate(model, X[te], y[te]):.3f}; diagnosing took {cb.seconds:.1f} s; "
          f"wrote {a.out}/track.csv, trajectories.png, report.html")
