"""Fine-tune a tiny GPT-2 on the built-in texts with attnspec's training callback, then track its checkpoints.

The callback diagnoses the model every --every steps on 16 built-in texts (no head removal), logs summary scalars
through the Trainer (add report_to=["tensorboard"] to see them there) and writes out/finetune/track/track.csv;
`attnspec track` over the saved checkpoints gives the same table, and `attnspec compare` the paired differences
between the first and the last checkpoint.

    python examples/finetune_with_callback.py
    python examples/finetune_with_callback.py --steps 60 --every 20
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch
import transformers

from attnspec.callbacks import AttnspecCallback
from attnspec.comparing import compare, track
from attnspec.data import builtin_texts
from attnspec.models import load_model


class Texts(torch.utils.data.Dataset):
    def __init__(self, tok, texts, length=48):
        self.enc = [tok(t, truncation=True, max_length=length, padding="max_length", return_tensors="pt") for t in texts]

    def __len__(self):
        return len(self.enc)

    def __getitem__(self, i):
        ids, mask = self.enc[i]["input_ids"][0], self.enc[i]["attention_mask"][0]
        return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--every", type=int, default=100)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default="out/finetune")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    out = Path(a.out)
    tok = load_model("minilm")[1]                      # a WordPiece tokenizer that ships with attnspec
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4,
                                                                 vocab_size=tok.vocab_size, n_positions=64))
    args = transformers.TrainingArguments(output_dir=str(out / "run"), max_steps=a.steps, save_steps=a.every,
                                          per_device_train_batch_size=8, learning_rate=1e-3, report_to=[],
                                          use_cpu=True, disable_tqdm=True, logging_steps=a.every, seed=0)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Texts(tok, builtin_texts(512)),
                                   processing_class=tok)
    cb = AttnspecCallback(tok, every=a.every, out=out / "track").attach(trainer)
    trainer.train()
    print(f"callback: {len(cb.scalars)} diagnoses in {cb.seconds:.1f} s; logged:",
          {k: v for k, v in trainer.state.log_history[-2].items() if k.startswith("attnspec/")})
    t = track(out / "run", texts=cb.texts, options=cb.options, out=out / "track_checkpoints")
    same = (t.table.select_dtypes("number") - cb.table.select_dtypes("number")).abs().max().max()
    print(f"attnspec track over {len(t.summary['steps'])} checkpoints: largest difference from the callback's "
          f"table {same:.2e}")
    first, last = t.summary["steps"][0], t.summary["steps"][-1]
    c = compare(t.diagnoses[first], t.diagnoses[last])
    c.save(out / "compare")
    print(c, "\n", c.changed()[["layer", "head", "changed_in"]].head(10).to_string(index=False))
    print(f"wrote {out}/track/, {out}/track_checkpoints/report.html, {out}/compare/report.html")
