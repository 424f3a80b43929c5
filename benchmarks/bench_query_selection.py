"""Per-query selection on the packaged models against the standard probes (docs/validity.md, *Real models*).

For each model: the diagnosis at the CLI defaults (built-in texts, 128 tokens, 64 texts for encoders and 16 packed
texts for causal LMs, 200 bootstrap replicates; removal off, which changes no selection column), and the probes from
the model's own eager attention on other texts (:mod:`attnspec.validation.probes`): the previous-token score on
built-in texts 1024-1055 and Olsson et al.'s induction score on seeded random tokens repeated twice. Prints, per
model and probe, the AUC with which ``query_selection_score`` ranks the probe's top decile of heads above the rest,
the same for the score of the heads whose best rule is the probe's own (``offset -1``, ``induction``; other heads 0)
and for the excess of the probe's rule whatever the best rule (``previous_token_excess``, ``induction_excess``),
and how many of the top decile are ``selective``.

    python benchmarks/bench_query_selection.py [--models minilm gemma3-270m qwen2.5-0.5b] [--threads 2]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
import torch

PROBE_TEXTS = range(1024, 1056)     # built-in texts the diagnosis (at most its first 64 or packed 16) never reads


def run(name: str) -> list[dict]:
    import attnspec
    from attnspec.data import builtin_texts
    from attnspec.models import load_model
    from attnspec.validation.probes import induction_scores, previous_token_scores, top_decile
    from attnspec.validation.scoring import roc_auc

    model, tok = load_model(name)
    t0 = time.perf_counter()
    d = attnspec.diagnose(model, tok, "builtin", removal="none")
    t_diag = time.perf_counter() - t0
    h = d.heads
    texts = builtin_texts(max(PROBE_TEXTS) + 1)
    probes = {"previous token": (previous_token_scores(model, tok, [texts[i] for i in PROBE_TEXTS]), "offset -1",
                                 "previous_token_excess"),
              "induction": (induction_scores(model, tok, n_sequences=8, length=50, seed=0), "induction",
                            "induction_excess")}
    score = h["query_selection_score"].to_numpy(float)
    rows = []
    for probe, (s, rule, column) in probes.items():
        pos = top_decile(s).ravel()
        own = np.where(h["query_selection_rule"].to_numpy() == rule, score, 0.0)
        rows.append({"model": name, "probe": probe, "heads": len(h), "top decile": int(pos.sum()),
                     "AUC query_selection_score": roc_auc(score, pos),
                     "AUC score, own rule": roc_auc(own, pos),
                     "AUC rule's excess": roc_auc(h[column].to_numpy(float), pos),
                     "top decile selective": int((h["query_selection"].to_numpy()[pos] == "selective").sum()),
                     "top decile with own rule": int((h["query_selection_rule"].to_numpy()[pos] == rule).sum()),
                     "diagnosis s": round(t_diag, 1)})
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["minilm", "gemma3-270m", "qwen2.5-0.5b"])
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = [r for m in args.models for r in run(m)]
    pd.set_option("display.width", 200)
    print(pd.DataFrame(rows).to_string(index=False, float_format=lambda x: f"{x:.3f}"))


if __name__ == "__main__":
    main()
