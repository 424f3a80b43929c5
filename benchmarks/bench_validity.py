"""Validity of attnspec's per-head diagnostics on models whose truth is planted.

For each architecture (BERT encoder; GPT-2 causal LM with ``--architectures gpt2``), strength and seed,
:func:`attnspec.validation.build_planted_model` builds a tiny random model (2 layers x 12 heads, head
width 16) with planted selective heads (three patterns: a fixed
relative position, the class tokens [CLS]/[SEP]/./, , the token's own identity), dependent head pairs
(copied Q/K/V with noise) and, in GPT-2, induction heads (a two-layer circuit, the opt-in pattern
``'induction'``; ``--no-induction`` leaves it out), signal-carrying heads (the other heads' output projections scaled down) and
a planted inverse temperature for every head. The model is saved with ``save_pretrained``, loaded with
:func:`attnspec.models.load_model` and diagnosed with :func:`attnspec.diagnose` on the first ``n`` texts
of the built-in corpus (temperatures were calibrated on its last 64 texts), for each corpus size.

Per architecture, planted property, strength and corpus size (seeds pooled): ROC AUC and the false-positive rate at
90 % true-positive rate of each attnspec diagnostic (``selection_score`` for shared targets,
``query_selection_score`` for per-query rules: computed here from the model's eager attention with
:func:`attnspec.validation.probes.query_selection_from_attention` when the diagnosis does not report it)
and each baseline (entropy ratio, Voita confidence, the previous-token and induction probes of
:mod:`attnspec.validation.probes`,
score scale, CKA without the null, a correlation of attention maps computed here from the model's eager
attention weights, first-order importance, energy share), the TPR/FPR of attnspec's own 'selective'
label, and the error of ``beta_hat``, ``beta_corrected`` and ``score_scale`` against the planted beta.

Writes ``results.csv``, ``beta.csv``, ``heads.csv``, ``pairs.csv`` and ``results.md`` to ``--out``.
Deterministic (seeded models, seeded diagnosis). Default budget: BERT, 5 strengths x 6 seeds x 3 corpus
sizes, about 5 minutes on 2 cores (each added architecture as much again); ``--quick`` is 2 strengths x
2 seeds x 2 corpus sizes.
``--coverage N``: instead, the coverage of the 95 % bootstrap intervals of ``beta_corrected`` (the head's inverse
temperature as diagnosed, with the key null), ``beta_hat`` and ``score_scale`` over ``N`` planted-beta repetitions
per ``--coverage-betas`` value (:func:`coverage`), the planted beta calibrated on the last ``--coverage-calibration``
texts (default 512, so that it is the population value to about 0.4 %, not a 64-text sample value with 1.1 %);
the summary splits the error into the error of ``score_scale`` (the planted definition) and
``beta_corrected - score_scale`` (the head's departure from its key null).
``--diagnosis-seed-offset K`` diagnoses the same planted models with other bootstrap draws (seed ``k + K``), and
``--reference-seed-offset K`` with other reference draws (null heads, equivalents' noise: ``reference_seed = k + K``):
runs that differ only in them give the AUCs' seed-to-seed spread, the yardstick for a change of the diagnosis'
random draws.
Usage: ``python benchmarks/bench_validity.py [--quick] [--architectures bert gpt2] [--strengths 0 0.5 1]
[--texts 8 64] [--seeds 3] [--diagnosis-seed-offset 100] [--out DIR]``;
``python benchmarks/bench_validity.py --coverage 100``.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

import attnspec
from attnspec.data import builtin_texts
from attnspec.models import load_model
from attnspec.validation import PlantSpec, build_planted_model
from attnspec.validation.architectures import ARCHITECTURES
from attnspec.validation.patterns import DEFAULT_PATTERNS, allowed_pairs
from attnspec.validation.planted import calibration_texts, minilm_tokenizer_dir
from attnspec.validation.probes import induction_scores, previous_token_scores, query_selection_from_attention
from attnspec.validation.scoring import beta_errors, null_beta_hat, score_detectors

BY = ["architecture", "strength", "n_texts"]


def attention_correlation(path: Path, texts: list[str], causal: bool) -> pd.DataFrame:
    """Baseline for dependence: Pearson correlation between two heads' centered attention maps
    ``n_i A_ij - 1`` over all allowed (query, key) pairs of the texts, per layer and head pair."""
    model, tok = load_model(path, attn_implementation="eager")
    enc = tok(texts, padding=True, truncation=True, max_length=128, return_tensors="pt")
    allowed = allowed_pairs(enc["attention_mask"].bool(), causal)
    n = allowed.sum(-1)[:, None, :, None].double()
    with torch.no_grad():
        attentions = model(**enc, output_attentions=True).attentions
    rows = []
    for layer, A in enumerate(attentions):
        y = (n * A.double() - 1).permute(1, 0, 2, 3)[:, allowed]          # (H, real pairs)
        c = np.corrcoef(y.numpy())
        H = c.shape[0]
        a, b = np.triu_indices(H, 1)
        rows.append(pd.DataFrame({"layer": layer, "head_a": a, "head_b": b, "attention_corr": c[a, b]}))
    return pd.concat(rows, ignore_index=True)


def _per_head(arrays: dict) -> pd.DataFrame:
    """``{column: (n_layers, H) array}`` as one row per (layer, head)."""
    L, H = next(iter(arrays.values())).shape
    out = pd.DataFrame({"layer": np.repeat(np.arange(L), H), "head": np.tile(np.arange(H), L)})
    for k, v in arrays.items():
        out[k] = np.asarray(v).ravel()
    return out


def run_model(architecture: str, strength: float, seed: int, sizes: list[int],
              induction: bool = True, diagnosis_seed_offset: int = 0,
              reference_seed_offset: int | None = None) -> tuple[list, list, float]:
    """Build one planted model (seed ``seed``), diagnose it at each corpus size (diagnosis seed
    ``seed + diagnosis_seed_offset``, reference seed ``seed + reference_seed_offset``, default the diagnosis'
    default 0); merged head and pair tables."""
    heads, pairs = [], []
    t0 = time.perf_counter()
    causal = ARCHITECTURES[architecture].causal
    patterns = DEFAULT_PATTERNS + (("induction",) if induction and causal else ())
    with tempfile.TemporaryDirectory() as d:
        pm = build_planted_model(PlantSpec(strength=strength, architecture=architecture, patterns=patterns), seed, d)
        model, tok = load_model(pm.path)
        probes = _per_head({"induction_probe": induction_scores(model, tok, n_sequences=8, length=50, seed=seed)})
        for n in sizes:
            texts = builtin_texts(n)
            ref = {} if reference_seed_offset is None else {"reference_seed": seed + reference_seed_offset}
            dg = attnspec.diagnose(model, tok, texts, seed=seed + diagnosis_seed_offset, **ref)
            tag = {"architecture": architecture, "strength": strength, "seed": seed, "n_texts": n,
                   "n_tokens": dg.summary["n_tokens"]}
            h = dg.heads.merge(pm.heads, on=["layer", "head"]).merge(probes, on=["layer", "head"])
            h = h.merge(_per_head({"previous_token_probe": previous_token_scores(model, tok, texts)}),
                        on=["layer", "head"])
            if "query_selection_score" not in h:
                h = h.merge(_per_head(query_selection_from_attention(model, tok, texts, seed=seed)), on=["layer", "head"])
            heads.append(h.assign(**tag))
            pr = dg.pairs.merge(pm.pairs, on=["layer", "head_a", "head_b"])
            pr["cka_over_background"] = pr["cka_excess_lo"] - pr["cka_excess_background"]
            pr = pr.merge(attention_correlation(pm.path, texts, causal), on=["layer", "head_a", "head_b"])
            pairs.append(pr.assign(**tag))
    return heads, pairs, time.perf_counter() - t0


def coverage(n_reps: int, beta: float, n_texts: int, architecture: str = "bert",
             n_calibration: int = 512) -> pd.DataFrame:
    """Coverage of the 95 % bootstrap intervals of ``beta_corrected`` (the head's inverse temperature as
    diagnosed), ``beta_hat`` and ``score_scale`` for a planted beta.

    Repetition = one head of a planted model at strength 0 whose every head has the planted ``beta``
    (random Q/K rescaled so that the RMS of its row-centered logits is ``beta`` on the calibration texts).
    Model ``k`` (seed ``k``) is diagnosed on its own ``n_texts`` built-in texts (the ``k``-th block, never
    the calibration texts), so repetitions differ in model and texts; models are added until ``n_reps``
    heads are collected (the first ``n_reps`` are kept). One row per repetition. The 24 heads of a model
    share its texts, so their errors are correlated: 100 repetitions are 5 models.

    ``n_calibration``: the planted beta is the RMS on the last ``n_calibration`` texts of the corpus
    (:func:`calibration_texts`), itself a sample value; with 64 texts its sampling error is as large as
    that of the 64 evaluation texts, which no interval computed from the evaluation texts can include.
    A larger calibration corpus makes the planted beta the population value the interval is about."""
    rows, k = [], 0
    calibration = calibration_texts(n_calibration)
    corpus = builtin_texts(2048 - n_calibration)
    cols = ["score_scale", "score_scale_lo", "score_scale_hi", "beta_hat", "beta_hat_lo", "beta_hat_hi", "beta_null",
            "beta_null_keys", "beta_corrected", "beta_corrected_lo", "beta_corrected_hi"]
    while len(rows) < n_reps:
        texts = corpus[k * n_texts:(k + 1) * n_texts]
        with tempfile.TemporaryDirectory() as d:
            pm = build_planted_model(PlantSpec(strength=0.0, betas=(beta,), architecture=architecture), k, d,
                                     calibration=calibration)
            model, tok = load_model(pm.path)
            dg = attnspec.diagnose(model, tok, texts, seed=k, removal=False, gradient=False)
        h = dg.heads.merge(pm.heads, on=["layer", "head"])
        rows += [{"model": k, "layer": r["layer"], "head": r["head"], "planted_beta": r["planted_beta"],
                  **{c: r[c] for c in cols}} for r in h.to_dict("records")]
        k += 1
    df = pd.DataFrame(rows[:n_reps])
    for est in ("beta_hat", "beta_corrected", "score_scale"):
        df[f"{est}_covers"] = (df[f"{est}_lo"] <= df["planted_beta"]) & (df["planted_beta"] <= df[f"{est}_hi"])
    return df


def _fmt(x: float) -> str:
    return "" if not np.isfinite(x) else f"{x:.2f}"


def to_markdown(df: pd.DataFrame, digits: int = 2) -> str:
    """A pipe table (no optional dependency); floats rounded to ``digits``."""
    def cell(v):
        if isinstance(v, (float, np.floating)):
            return f"{v:.{digits}f}" if np.isfinite(v) else ""
        return str(v)
    lines = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


def results_table(res: pd.DataFrame) -> pd.DataFrame:
    """Wide table: one row per property/subset/diagnostic, 'AUC / FPR@90' per strength x corpus size."""
    r = res.copy()
    r["cell"] = [f"{_fmt(a)} / {_fmt(f)}" for a, f in zip(r["auc"], r["fpr_at_tpr90"])]
    r["col"] = [f"s={s:g} n={n}" for s, n in zip(r["strength"], r["n_texts"])]
    order = list(dict.fromkeys(r["col"]))
    wide = r.pivot_table(index=["architecture", "property", "unit", "subset", "diagnostic", "kind"], columns="col",
                         values="cell",
                         aggfunc="first", sort=False)
    return wide[order].reset_index()


def label_table(res: pd.DataFrame) -> pd.DataFrame:
    lab = res.dropna(subset=["label_tpr"])
    return lab[["property", "subset", "diagnostic", *BY, "n_pos", "n_neg", "label_tpr", "label_fpr"]]


def null_expectations(architectures: list[str], sizes: list[int], betas) -> pd.DataFrame:
    """``beta_hat`` of a random Gaussian-score head at each planted beta, on the benchmark's text lengths."""
    import transformers
    tok = transformers.AutoTokenizer.from_pretrained(minilm_tokenizer_dir(), local_files_only=True)
    lengths = [len(ids) for ids in tok(builtin_texts(max(sizes)), truncation=True, max_length=128)["input_ids"]]
    return pd.DataFrame([{"architecture": a, "n_texts": n, "planted_beta": float(b),
                          "null_beta_hat": null_beta_hat(float(b), lengths[:n], causal=ARCHITECTURES[a].causal)}
                         for a in architectures for n in sizes for b in betas])


def beta_table(beta: pd.DataFrame, null: pd.DataFrame) -> pd.DataFrame:
    """Errors pooled over strengths (weighted by heads), with the random-head expectation of beta_hat."""
    b = beta.assign(w_mean=beta["mean"] * beta["n"], w_bias=beta["bias"] * beta["n"], w_mae=beta["mae"] * beta["n"])
    b = b.groupby(["architecture", "n_texts", "planted_beta", "estimate"], as_index=False)[
        ["n", "w_mean", "w_bias", "w_mae"]].sum()
    for c in ("mean", "bias", "mae"):
        b[c] = b.pop(f"w_{c}") / b["n"]
    b["rel_mae"] = b["mae"] / b["planted_beta"]
    b = b.merge(null, on=["architecture", "n_texts", "planted_beta"], how="left")
    b.loc[b["estimate"] != "beta_hat", "null_beta_hat"] = np.nan
    return b


def write_markdown(out: Path, res: pd.DataFrame, beta: pd.DataFrame, meta: str) -> str:
    """``results.md``: AUC/FPR table, label rates and temperature errors (``beta``: :func:`beta_table`)."""
    md = ["# Planted-ground-truth validity benchmark", "", meta, "",
          "## AUC / FPR at 90 % TPR (seeds pooled; s = strength, n = texts)", "",
          to_markdown(results_table(res)), "",
          "## attnspec's labels: 'selective' and 'dependent' (TPR / FPR)", "",
          to_markdown(label_table(res)), "",
          "## Temperature: estimate vs planted beta (heads without a pattern, all strengths)", "",
          "null_beta_hat: what the fit returns for a random Gaussian-score head at that beta on these texts.", "",
          to_markdown(beta, 3), ""]
    text = "\n".join(md)
    (out / "results.md").write_text(text)
    return text


def coverage_report(args) -> str:
    """Run :func:`coverage` for each beta (64 texts each); write ``coverage.csv``; the summary as text."""
    t0 = time.perf_counter()
    dfs = [coverage(args.coverage, b, 64, args.architectures[0], args.coverage_calibration)
           for b in args.coverage_betas]
    df = pd.concat(dfs, ignore_index=True)
    df.to_csv(args.out / "coverage.csv", index=False)
    df = df.assign(error=df["beta_corrected"] - df["planted_beta"], scale_error=df["score_scale"] - df["planted_beta"],
                   null_departure=df["beta_corrected"] - df["score_scale"])
    g = df.groupby("planted_beta")
    width = lambda est: g.apply(lambda x: (x[f"{est}_hi"] - x[f"{est}_lo"]).mean())  # noqa: E731
    summ = pd.DataFrame({"repetitions": g.size(), "beta_corrected covers": g["beta_corrected_covers"].sum(),
                         "below / above": [f"{(x['beta_corrected_hi'] < x['planted_beta']).sum()} / "
                                           f"{(x['beta_corrected_lo'] > x['planted_beta']).sum()}" for _, x in g],
                         "beta_hat covers": g["beta_hat_covers"].sum(),
                         "score_scale covers": g["score_scale_covers"].sum(),
                         "mean beta_hat": g["beta_hat"].mean(), "mean beta_corrected": g["beta_corrected"].mean(),
                         "sd of beta_corrected error / mean width / 3.92": [
                             f"{a:.4f} / {b / 3.92:.4f}" for a, b in zip(g["error"].std(), width("beta_corrected"))],
                         "mean score_scale - planted": g["scale_error"].mean(),
                         "mean (sd) beta_corrected - score_scale": [
                             f"{a:.4f} ({b:.4f})" for a, b in zip(g["null_departure"].mean(), g["null_departure"].std())],
                         "models": g["model"].nunique()}).reset_index()
    return (f"## Coverage of the 95 % intervals ({args.architectures[0]}, 64 texts per repetition, planted beta "
            f"calibrated on {args.coverage_calibration} texts, "
            f"{time.perf_counter() - t0:.0f} s)\n\n" + to_markdown(summ, 3))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--architectures", nargs="+", default=["bert"], choices=sorted(ARCHITECTURES))
    ap.add_argument("--strengths", type=float, nargs="+", default=[0.0, 0.25, 0.5, 0.75, 1.0])
    ap.add_argument("--texts", type=int, nargs="+", default=[8, 16, 64], help="corpus sizes (texts)")
    ap.add_argument("--seeds", type=int, default=6, help="planted models per strength (seeds 0..N-1)")
    ap.add_argument("--diagnosis-seed-offset", type=int, default=0, metavar="K",
                    help="diagnose planted model k with seed k + K (the same models, other draws: the AUCs' "
                         "seed-to-seed spread, against which a change of the draws is judged)")
    ap.add_argument("--reference-seed-offset", type=int, default=None, metavar="K",
                    help="diagnose planted model k with reference seed k + K (default: the diagnosis' reference seed 0): "
                         "other reference draws (null heads, equivalents' noise), the spread a single draw carries")
    ap.add_argument("--quick", action="store_true", help="reduced budget: strengths 0 1, texts 16 64, 2 seeds")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-induction", action="store_true", help="plant no induction heads in GPT-2")
    ap.add_argument("--out", type=Path, default=Path("out/bench_validity"))
    ap.add_argument("--coverage", type=int, default=0, metavar="N",
                    help="only the interval coverage check: N planted-beta repetitions per --coverage-betas value")
    ap.add_argument("--coverage-betas", type=float, nargs="+", default=[0.5, 1.0, 2.0, 3.0])
    ap.add_argument("--coverage-calibration", type=int, default=512, metavar="N",
                    help="texts on which the coverage models' planted beta is calibrated (the last N of the corpus)")
    args = ap.parse_args(argv)
    if args.coverage:
        torch.set_num_threads(args.threads)
        args.out.mkdir(parents=True, exist_ok=True)
        print(coverage_report(args), flush=True)
        return
    if args.quick:
        args.strengths, args.texts, args.seeds = [0.0, 1.0], [16, 64], 2
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    heads, pairs = [], []
    t0 = time.perf_counter()
    for arch in args.architectures:
        for s in args.strengths:
            for seed in range(args.seeds):
                h, p, dt = run_model(arch, s, seed, args.texts, induction=not args.no_induction,
                                     diagnosis_seed_offset=args.diagnosis_seed_offset,
                                     reference_seed_offset=args.reference_seed_offset)
                heads += h
                pairs += p
                print(f"{arch} strength {s:g} seed {seed}: {dt:.1f} s", flush=True)
    heads, pairs = pd.concat(heads, ignore_index=True), pd.concat(pairs, ignore_index=True)
    res = score_detectors(heads, pairs, BY)
    beta = beta_table(beta_errors(heads, BY, ("beta_hat", "beta_corrected", "score_scale")),
                      null_expectations(args.architectures, args.texts, PlantSpec().betas))
    for name, df in (("heads", heads), ("pairs", pairs), ("results", res), ("beta", beta)):
        df.to_csv(args.out / f"{name}.csv", index=False)
    tokens = heads.groupby("n_texts")["n_tokens"].first().to_dict()
    meta = (f"architectures {args.architectures}, strengths {args.strengths}, corpus sizes {args.texts} texts "
            f"({tokens} real tokens), "
            f"{args.seeds} seeds (diagnosis seeds offset by {args.diagnosis_seed_offset}, reference seeds "
            f"{'0' if args.reference_seed_offset is None else f'offset by {args.reference_seed_offset}'}), torch threads "
            f"{args.threads}, {time.perf_counter() - t0:.0f} s")
    print(write_markdown(args.out, res, beta, meta))


if __name__ == "__main__":
    main()
