"""Head roles (roles.csv) against probes the diagnosis never saw, on planted heads and on random models.

Three parts (``--parts``, default all):

* ``real``: each packaged model diagnosed at the CLI defaults (built-in texts, 64 for encoders, 16 packed texts of
  128 tokens for causal LMs; removal off, which changes no role), and the probes of
  :mod:`attnspec.validation.probes` from the model's own eager attention on other inputs: previous token (and next
  token for encoders) on built-in texts 1024-1055, duplicate token and induction on seeded random tokens repeated
  twice, averaged over sequences of 30, 40, 50, 60 and 70 tokens (:data:`REPEAT_LENGTHS`; also printed at 50 alone,
  the usual single length). Per model and probe: the AUC with which the probe's own rule's ``excess`` in roles.csv (``offset -1``,
  ``offset 1``, ``same token``, ``induction``) ranks the probe's top decile of heads above the rest, the same for
  the plain ``query_selection_score`` (for comparison), how many of the top decile hold the role, and the rule's AUC
  for the heads whose probe weight exceeds :data:`CLEAR_WEIGHT` against the rest;
* ``planted``: tiny BERT and GPT-2 with planted heads (:mod:`attnspec.validation.planted`, strength 1, 64 texts,
  seeds 0..S-1): per planted pattern and rule (offset ``d``: ``offset d``; identity: ``offset 0``; class: ``sink``;
  induction: ``induction``; two-role heads ``offset+sink``: both rules), the AUC with which the rule's ``excess``
  ranks the pattern's heads above the heads planted without that rule (heads of another pattern or offset planted
  with the same rule are left out of the negatives: every ``offset+sink`` head has a sink), and the share of the
  pattern's heads holding the role (rule ``all``, for a pattern with several rules: the heads holding every one);
* ``random``: randomly initialized BERT, RoBERTa, GPT-2 and Llama (2 layers x 4 heads, seeds 0-2, 4/16/64 texts, as
  tests/test_calibration_random.py): heads with any role, and the rules they hold.

Prints figures only; asserts nothing.

    python benchmarks/bench_roles.py [--parts real,planted,random] [--models minilm gemma3-270m ...] [--seeds 3]
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

PROBE_TEXTS = range(1024, 1056)     # built-in texts the diagnosis (at most its first 64 or packed 16) never reads
#: Lengths of the repeated random sequences of the duplicate-token and induction probes, each probe the mean of its
#: scores over them: at one length ``n`` every target sits at offset ``-n`` (the earlier occurrence) or ``-n + 1``
#: (the token after it), where a positional head scores too (Qwen2.5-0.5B's layer-0 head 7, whose weight peaks near
#: offset -49, read 0.178 as an induction head at n = 50 and 0.014 or 0 at 30, 40, 60, 70).
REPEAT_LENGTHS = (30, 40, 50, 60, 70)
#: A head "clearly" follows a probe when the probe's weight exceeds this (the roles' margin): the probe's top decile
#: is no ground truth where fewer heads than a decile follow it (duplicate token: 4 of Gemma 3 270M's 72 heads).
CLEAR_WEIGHT = 0.1
#: Planted pattern -> the rule(s) of roles.csv that should find it.
PLANTED_RULES = {"offset": lambda o: [f"offset {o}"], "identity": lambda o: ["offset 0"], "class": lambda o: ["sink"],
                 "induction": lambda o: ["induction"], "offset+sink": lambda o: [f"offset {o}", "sink"]}


def _rule_auc(roles: pd.DataFrame, rule: str, positive: pd.Series, negative: pd.Series | None = None) -> float:
    """AUC of ``rule``'s excess (NaN as 0) ranking the heads flagged in ``positive`` above those in ``negative``
    (default: every other head), both indexed by layer, head."""
    from attnspec.validation.scoring import roc_auc
    r = roles[roles["rule"] == rule].set_index(["layer", "head"])
    pos = positive.reindex(r.index).fillna(False).to_numpy(bool)
    neg = ~pos if negative is None else negative.reindex(r.index).fillna(False).to_numpy(bool)
    keep = pos | neg
    return roc_auc(r["excess"].fillna(0.0).to_numpy(float)[keep], pos[keep])


def real(name: str) -> list[dict]:
    import attnspec
    from attnspec.data import builtin_texts
    from attnspec.models import load_model
    from attnspec.validation import probes as pr
    from attnspec.validation.scoring import roc_auc

    model, tok = load_model(name)
    t0 = time.perf_counter()
    d = attnspec.diagnose(model, tok, "builtin", removal="none", progress=False)
    t_diag = time.perf_counter() - t0
    h = d.heads.set_index(["layer", "head"])
    texts = builtin_texts(max(PROBE_TEXTS) + 1)
    held_out = [texts[i] for i in PROBE_TEXTS]
    repeated = {L: (pr.duplicate_token_scores(model, tok, n_sequences=8, length=L, seed=0),
                    pr.induction_scores(model, tok, n_sequences=8, length=L, seed=0)) for L in REPEAT_LENGTHS}
    probes = {"previous token": (pr.offset_scores(model, tok, held_out, -1), "offset -1"),
              "duplicate token": (np.mean([dup for dup, _ in repeated.values()], 0), "same token"),
              "induction": (np.mean([ind for _, ind in repeated.values()], 0), "induction"),
              "duplicate token, length 50 only": (repeated[50][0], "same token"),
              "induction, length 50 only": (repeated[50][1], "induction")}
    if d.summary.get("kind") != "causal-lm":
        probes["next token"] = (pr.offset_scores(model, tok, held_out, 1), "offset 1")
    rows = []
    for probe, (s, rule) in probes.items():
        top = pd.Series(pr.top_decile(s).ravel(), index=h.index)
        with_role = h["roles"].fillna("").str.split("; ").apply(lambda rs, r=rule: r in rs)
        clear = pd.Series(np.asarray(s).ravel() > CLEAR_WEIGHT, index=h.index)
        rows.append({"model": name, "probe": probe, "rule": rule, "heads": len(h), "top decile": int(top.sum()),
                     "AUC rule's excess": _rule_auc(d.roles, rule, top),
                     f"heads above {CLEAR_WEIGHT}": int(clear.sum()),
                     f"AUC above {CLEAR_WEIGHT}": _rule_auc(d.roles, rule, clear) if 0 < clear.sum() < len(h) else np.nan,
                     "AUC query_selection_score": roc_auc(h["query_selection_score"].to_numpy(float), top.to_numpy()),
                     "top decile with the role": int((with_role & top).sum()),
                     "other heads with the role": int((with_role & ~top).sum()), "diagnosis s": round(t_diag, 1)})
    return rows


def planted(architecture: str, seeds: int) -> list[dict]:
    import attnspec
    from attnspec.data import builtin_texts
    from attnspec.models import load_model
    from attnspec.validation import PlantSpec, build_planted_model

    specs = {"default": dict(patterns=("offset", "class", "identity") + (("induction",) if architecture == "gpt2"
                                                                           else ())),
             "two roles": dict(patterns=("offset+sink",), max_gain=7.0)}
    rows = []
    for label, kw in specs.items():
        per: dict = {}
        for seed in range(seeds):
            spec = PlantSpec(strength=1.0, n_layers=2, n_heads=12, head_dim=16, n_selective=3, n_pairs=2,
                             n_important=2, architecture=architecture, **kw)
            with tempfile.TemporaryDirectory() as tmp:
                pm = build_planted_model(spec, seed, Path(tmp) / "m")
                model, tok = load_model(pm.path, attn_implementation="eager")
                d = attnspec.diagnose(model, tok, builtin_texts(64), removal=False, gradient=False, progress=False)
            truth = pm.heads.set_index(["layer", "head"])
            held = d.heads.set_index(["layer", "head"])["roles"].fillna("").str.split("; ")
            planted_rules = pd.Series([set(PLANTED_RULES[p](o)) if p else set()
                                       for p, o in zip(truth["pattern"], truth["offset"])], index=truth.index)
            for pattern in sorted(set(truth["pattern"]) - {""}):
                for rule in sorted(set().union(*planted_rules[truth["pattern"] == pattern])):
                    # positives: this pattern's heads planted with the rule; negatives: the heads planted without it
                    # (a head of another pattern planted with the same rule, e.g. a two-role head of another offset
                    # for the sink, is neither)
                    has = planted_rules.apply(lambda rs, r=rule: r in rs)
                    mine = (truth["pattern"] == pattern) & has
                    per.setdefault((pattern, rule), []).append({
                        "auc": _rule_auc(d.roles, rule, mine, ~has),
                        "found": int(held[mine].apply(lambda rs, r=rule: r in rs).sum()), "n": int(mine.sum())})
                if len(PLANTED_RULES[pattern](0)) > 1:          # heads holding every rule of their pattern
                    mine = truth["pattern"] == pattern
                    per.setdefault((pattern, "all"), []).append({"auc": np.nan, "n": int(mine.sum()), "found": int(sum(
                        planted_rules[k] <= set(held[k]) for k in truth.index[mine]))})
            background = truth["role"] != "selective"
            per.setdefault(("none", "any"), []).append({"auc": np.nan, "found": int((held[background].str.join("")
                                                                                   != "").sum()),
                                                         "n": int(background.sum())})
        for (pattern, rule), v in per.items():
            rows.append({"architecture": architecture, "models": label, "pattern": pattern, "rule": rule,
                         "min AUC": float(np.nanmin([x["auc"] for x in v])) if rule not in ("any", "all") else np.nan,
                         "heads with the role": f"{sum(x['found'] for x in v)} / {sum(x['n'] for x in v)}"})
    return rows


def random_models() -> dict:
    import transformers as tr
    from attnspec import diagnose
    from attnspec.data import builtin_texts
    from attnspec.models import load_model

    tok = load_model("minilm")[1]
    S = dict(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_hidden_layers=2, max_position_embeddings=160)
    families = {
        "bert": lambda v: tr.BertModel(tr.BertConfig(vocab_size=v, **S)),
        "roberta": lambda v: tr.RobertaModel(tr.RobertaConfig(vocab_size=v, pad_token_id=0, **S)),
        "gpt2": lambda v: tr.GPT2LMHeadModel(tr.GPT2Config(vocab_size=v, n_embd=32, n_layer=2, n_head=4, n_positions=160)),
        "llama": lambda v: tr.LlamaForCausalLM(tr.LlamaConfig(vocab_size=v, num_key_value_heads=2, **S)),
    }
    heads, with_role, rules = 0, 0, {}
    for build in families.values():
        for seed in (0, 1, 2):
            torch.manual_seed(seed)
            model = build(tok.vocab_size).eval()
            for n in (4, 16, 64):
                d = diagnose(model, tok, builtin_texts(n), removal=False, gradient=False, seed=seed,
                             reference_seed=seed, progress=False)
                heads += len(d.heads)
                with_role += int((d.heads["roles"] != "").sum())
                for r in d.roles.loc[d.roles["verdict"] == "selective", "rule"]:
                    rules[r] = rules.get(r, 0) + 1
    return {"heads": heads, "with a role": with_role, "rules": rules}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", default="real,planted,random")
    ap.add_argument("--models", nargs="+", default=["minilm", "gemma3-270m", "qwen2.5-0.5b", "smollm2-135m"])
    ap.add_argument("--seeds", type=int, default=3, help="planted models per architecture and spec")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    pd.set_option("display.width", 200)
    parts = args.parts.split(",")
    if "real" in parts:
        print(pd.DataFrame([r for m in args.models for r in real(m)]).to_string(index=False), flush=True)
    if "planted" in parts:
        print(pd.DataFrame([r for a in ("bert", "gpt2") for r in planted(a, args.seeds)]).to_string(index=False),
              flush=True)
    if "random" in parts:
        print("random models:", random_models(), flush=True)


if __name__ == "__main__":
    main()
