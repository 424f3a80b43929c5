"""Paired comparison and the training callback: the acceptance figures of docs/compare.md.

1. MiniLM (6 x 12 heads) on ``--texts`` built-in texts, exact removal, against itself, against a copy whose layer-3
   head-5 output-projection slice is zeroed, and against a copy whose layer-2 head-7 queries are scaled by 3: heads
   changed (the planted head, and how many of the 71 others), and the median ratio of the paired interval's width to
   the unpaired one's (the same replicates with B's replicates drawn independently: a random permutation), per
   diagnostic.
2. Coverage of a planted difference: a random tiny BERT (2 x 4 heads) and a copy whose layer-1 head-0 queries are
   scaled by 1.5; the truth is the difference of the two models' diagnostics on the whole built-in corpus
   (2,048 texts); each repetition draws ``--cov-texts`` texts at random and checks whether the paired 95 % interval
   of every head's ``score_scale`` and ``selection_score`` difference covers it.
3. Callback overhead: a tiny GPT-2 fine-tuned with the transformers Trainer for ``--steps`` steps, evaluated every
   ``--eval-steps`` steps, with and without :class:`attnspec.callbacks.AttnspecCallback` at its defaults (a
   diagnosis at each evaluation): the ratio of the training times.

Asserts nothing; prints one line per figure. Usage: ``python benchmarks/bench_compare.py [--texts 32] [--reps 100]
[--threads 2] [--skip-minilm]``.
"""
from __future__ import annotations

import argparse
import copy
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from attnspec.comparing import compare
from attnspec.data import builtin_texts
from attnspec.diagnostics import diagnose
from attnspec.diagnostics.statistics.bootstrap import interval
from attnspec.models import load_model


def width_ratios(c, a, b, rng) -> dict[str, float]:
    out = {}
    for col in c.replicates:
        ra, rb = a.replicates[col].astype(float), b.replicates[col].astype(float)
        lo, hi = interval(rb[rng.permutation(len(rb))] - ra)
        paired = (c.heads[f"{col}_diff_hi"] - c.heads[f"{col}_diff_lo"]).to_numpy()
        r = paired / (hi - lo)
        r = r[np.isfinite(r) & (hi - lo > 0)]
        if r.size:
            out[col] = float(np.median(r))
    return out


def minilm(n_texts: int) -> None:
    model, tok = load_model("minilm")
    texts = builtin_texts(n_texts)
    zero, q3 = copy.deepcopy(model), copy.deepcopy(model)
    with torch.no_grad():
        zero.encoder.layer[3].attention.output.dense.weight[:, 5 * 32:6 * 32] = 0
        q = q3.encoder.layer[2].attention.self.query
        q.weight[7 * 32:8 * 32] *= 3
        q.bias[7 * 32:8 * 32] *= 3
    t = time.perf_counter()
    d = {k: diagnose(m, tok, texts, seed=0, progress=False) for k, m in (("base", model), ("zero", zero), ("q3", q3))}
    print(f"MiniLM, {n_texts} texts: three diagnoses in {time.perf_counter() - t:.0f} s")
    rng = np.random.default_rng(0)
    c = compare(d["base"], d["base"])
    print(f"self-compare: {c.summary['n_changed']} of {len(c.heads)} heads changed")
    for name, planted in (("zero", (3, 5)), ("q3", (2, 7))):
        c = compare(d["base"], d[name])
        h = c.heads.set_index(["layer", "head"])
        others = h.drop(index=planted)
        print(f"{name}: planted head L{planted[0]} H{planted[1]} changed={bool(h.loc[planted, 'changed'])} "
              f"in [{h.loc[planted, 'changed_in']}]; other heads changed {int(others['changed'].sum())} of "
              f"{len(others)} ({100 * others['changed'].mean():.1f} %): "
              f"{[(int(a), int(b), r) for (a, b), r in others[others['changed']]['changed_in'].items()]}")
        ratios = width_ratios(c, d["base"], d[name], rng)
        print(f"{name}: median paired/unpaired interval width: "
              + ", ".join(f"{k} {v:.3f}" for k, v in ratios.items())
              + f"; median over diagnostics {np.median(list(ratios.values())):.3f}")


def coverage(reps: int, n_texts: int) -> None:
    import transformers
    tok = load_model("minilm")[1]
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=tok.vocab_size, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=128, initializer_range=0.2)
    a = transformers.BertModel(cfg).eval()
    b = copy.deepcopy(a)
    with torch.no_grad():
        q = b.encoder.layer[1].attention.self.query
        q.weight[:16] *= 1.5
        q.bias[:16] *= 1.5
    kw = dict(removal="none", gradient=False, progress=False, n_boot=200)
    corpus = builtin_texts()
    t = time.perf_counter()
    truth = compare(diagnose(a, tok, corpus, **kw), diagnose(b, tok, corpus, **kw))
    cols = ("score_scale", "selection_score")
    true = {c: truth.heads[f"{c}_diff"].to_numpy() for c in cols}
    hits = {c: [] for c in cols}
    rng = np.random.default_rng(1)
    for r in range(reps):
        idx = rng.choice(len(corpus), n_texts, replace=False)
        texts = [corpus[i] for i in idx]
        c = compare(diagnose(a, tok, texts, seed=r, **kw), diagnose(b, tok, texts, seed=r, **kw))
        for col in cols:
            lo, hi = c.heads[f"{col}_diff_lo"].to_numpy(), c.heads[f"{col}_diff_hi"].to_numpy()
            hits[col].append((lo <= true[col]) & (true[col] <= hi))
    for col in cols:
        hm = np.array(hits[col])
        print(f"coverage of the planted difference ({col}, {reps} repetitions of {n_texts} texts, 8 heads): "
              f"planted head L1 H0 (true diff {true[col][4]:+.3f}) {100 * hm[:, 4].mean():.0f} %, all heads "
              f"{100 * hm.mean():.1f} % (per head {', '.join(f'{100 * x:.0f}' for x in hm.mean(0))})")
    print(f"coverage: {time.perf_counter() - t:.0f} s")


class _Texts(torch.utils.data.Dataset):
    def __init__(self, tok, texts, length=64):
        self.enc = [tok(t, truncation=True, max_length=length, padding="max_length", return_tensors="pt") for t in texts]

    def __len__(self):
        return len(self.enc)

    def __getitem__(self, i):
        ids, mask = self.enc[i]["input_ids"][0], self.enc[i]["attention_mask"][0]
        return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def overhead(steps: int, eval_steps: int) -> None:
    import transformers

    from attnspec.callbacks import AttnspecCallback
    tok = load_model("minilm")[1]
    train, ev = _Texts(tok, builtin_texts(512)), _Texts(tok, builtin_texts(576)[512:])
    times = {}
    for with_cb in (False, True, False, True):
        torch.manual_seed(0)
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_embd=128, n_layer=4, n_head=4,
                                                                     vocab_size=tok.vocab_size, n_positions=128))
        with tempfile.TemporaryDirectory() as tmp:
            args = transformers.TrainingArguments(output_dir=tmp, max_steps=steps, per_device_train_batch_size=8,
                                                  learning_rate=5e-4, report_to=[], use_cpu=True, disable_tqdm=True,
                                                  eval_strategy="steps", eval_steps=eval_steps, save_strategy="no",
                                                  logging_steps=eval_steps, seed=0)
            trainer = transformers.Trainer(model=model, args=args, train_dataset=train, eval_dataset=ev,
                                           processing_class=tok)
            cb = AttnspecCallback(tok, out=Path(tmp) / "track").attach(trainer) if with_cb else None
            t = time.perf_counter()
            trainer.train()
            times.setdefault(with_cb, []).append(time.perf_counter() - t)
            if cb is not None:
                diag_s, n = cb.seconds, len(cb.scalars)
    base, withcb = min(times[False]), min(times[True])
    print(f"callback overhead: tiny GPT-2 (4 x 4 heads, d 128), {steps} steps, evaluation every {eval_steps}: "
          f"{base:.1f} s without, {withcb:.1f} s with the callback ({n} diagnoses, {diag_s:.1f} s diagnosing); "
          f"ratio {withcb / base:.3f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--texts", type=int, default=32)
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--cov-texts", type=int, default=32)
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--eval-steps", type=int, default=200)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--skip-minilm", action="store_true")
    p.add_argument("--skip-coverage", action="store_true")
    p.add_argument("--skip-overhead", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    if not a.skip_minilm:
        minilm(a.texts)
    if not a.skip_coverage:
        coverage(a.reps, a.cov_texts)
    if not a.skip_overhead:
        overhead(a.steps, a.eval_steps)


if __name__ == "__main__":
    main()
