"""TransformerLens's head detector beside attnspec's roles, on the same models, token ids and texts.

TransformerLens 4.x ``transformer_lens.head_detector.detect_head`` scores each head against a 0/1 detection pattern
(``error_measure='mul'``: the share of the head's attention on the pattern's query-key pairs, per text, averaged
over texts) for ``previous_token_head``, ``duplicate_token_head`` and ``induction_head``; it has no null, no interval
and no threshold. attnspec's roles.csv gives, for the matching rules ``offset -1``, ``same token`` and ``induction``,
the head's attention on the rule's keys *beyond* the exchangeable null of the same query (the excess), its 95 %
bootstrap interval and a verdict under family-wise control over the head's rules.

Both read the same token ids: each built-in text is cut to ``--max-length`` tokens by the model's tokenizer
(without a prepended BOS, as attnspec tokenizes), decoded, and kept when TransformerLens's ``to_tokens``
(``prepend_bos=False``) gives back the same ids. TransformerLens runs on a ``TransformerBridge`` booted offline
around the packaged model; attnspec diagnoses that same bridge (``pack=False``, ``removal='none'``).

Per model and pattern it prints: Spearman's rho between the detector's score and the rule's excess over all heads,
the top-decile overlap, the heads where they disagree most (rank gap), with attnspec's verdict, the head's weight on
the real keys (``real_weight``), its ``sink`` excess (attention parked on the first token) and its best rule, and how
many heads attnspec calls selective for the rule. Prints figures only; asserts nothing.

    python benchmarks/bench_head_detector.py [--models smollm2-135m qwen2.5-0.5b gemma3-270m] [--texts 32]
        [--max-length 128] [--show 5]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import time

import numpy as np
import pandas as pd
import torch

#: TransformerLens pattern name -> attnspec rule.
PATTERNS = {"previous_token_head": "offset -1", "duplicate_token_head": "same token", "induction_head": "induction"}


def same_ids_texts(bridge, tok, n: int, max_length: int) -> tuple[list[str], int]:
    """Built-in texts cut to ``max_length`` tokens whose decoded string TransformerLens tokenizes back to the same
    ids; returns the texts and how many were dropped."""
    from attnspec.data import builtin_texts
    kept, dropped = [], 0
    for text in builtin_texts(n):
        ids = tok(text, truncation=True, max_length=max_length, add_special_tokens=True)["input_ids"]
        s = tok.decode(ids, skip_special_tokens=False)
        back = bridge.to_tokens(s, prepend_bos=False)[0].tolist()
        if back == ids and len(ids) > 2:
            kept.append(s)
        else:
            dropped += 1
    return kept, dropped


def detector_scores(bridge, texts: list[str]) -> dict[str, np.ndarray]:
    """``detect_head`` per pattern, ``(n_layers, n_heads)``, averaged over the texts (one forward per text)."""
    from transformer_lens.head_detector import compute_head_attention_similarity_score, get_duplicate_token_head_detection_pattern, \
        get_induction_head_detection_pattern, get_previous_token_head_detection_pattern
    makers = {"previous_token_head": get_previous_token_head_detection_pattern,
              "duplicate_token_head": get_duplicate_token_head_detection_pattern,
              "induction_head": get_induction_head_detection_pattern}
    cfg = bridge.cfg
    total = {p: np.zeros((cfg.n_layers, cfg.n_heads)) for p in PATTERNS}
    for s in texts:
        tokens = bridge.to_tokens(s, prepend_bos=False)
        # the detector's own code path: detect_head(bridge, s, pattern, cache=cache) with the cache of these tokens
        _, cache = bridge.run_with_cache(tokens, remove_batch_dim=True)
        for p in PATTERNS:
            pattern = makers[p](tokens.cpu())
            for layer in range(cfg.n_layers):
                att = cache["pattern", layer, "attn"]
                for h in range(cfg.n_heads):
                    total[p][layer, h] += compute_head_attention_similarity_score(
                        att[h], detection_pattern=pattern, exclude_bos=False, exclude_current_token=False,
                        error_measure="mul")
    return {p: v / len(texts) for p, v in total.items()}


def detect_head_agrees(bridge, text: str, scores_one: dict) -> float:
    """Largest difference between ``detect_head`` itself and this script's loop on one text (a check of the loop)."""
    from transformer_lens.head_detector import detect_head
    gaps = []
    for p in PATTERNS:
        got = detect_head(bridge, text, p).float().numpy()
        gaps.append(float(np.nanmax(np.abs(got - scores_one[p]))))
    return max(gaps)


def compare(name: str, n_texts: int, max_length: int, show: int) -> list[dict]:
    import attnspec
    from scipy.stats import spearmanr
    from transformer_lens.model_bridge import TransformerBridge

    from attnspec.models import load_model

    model, tok = load_model(name, attn_implementation="eager")
    bridge = TransformerBridge.boot_transformers(name, hf_model=model, tokenizer=tok)
    bridge.cfg.default_prepend_bos = False
    texts, dropped = same_ids_texts(bridge, tok, n_texts, max_length)
    t0 = time.perf_counter()
    tl = detector_scores(bridge, texts)
    t_tl = time.perf_counter() - t0
    check = detect_head_agrees(bridge, texts[0], detector_scores(bridge, texts[:1]))
    t0 = time.perf_counter()
    d = attnspec.diagnose(bridge, tok, texts, pack=False, max_length=max_length, removal="none", progress=False)
    t_as = time.perf_counter() - t0
    roles = d.roles                     # every layer, head and rule
    heads = d.heads.set_index(["layer", "head"])
    print(f"\n## {name}: {len(texts)} texts of <= {max_length} tokens ({dropped} dropped: ids not recovered), "
          f"{len(heads)} heads; detector {t_tl:.1f} s, attnspec {t_as:.1f} s; detect_head vs loop max gap {check:.1e}")
    rows = []
    for p, rule in PATTERNS.items():
        r = roles[roles["rule"] == rule].set_index(["layer", "head"]).reindex(heads.index)
        excess = r["excess"].to_numpy(float)
        score = np.array([tl[p][lh] for lh in heads.index])
        ok = np.isfinite(excess) & np.isfinite(score)
        rho = float(spearmanr(score[ok], excess[ok]).statistic)
        k = max(1, int(round(0.1 * ok.sum())))
        top_tl = set(np.argsort(-np.where(ok, score, -np.inf))[:k])
        top_as = set(np.argsort(-np.where(ok, excess, -np.inf))[:k])
        n_sel = int((r["verdict"] == "selective").sum())
        rows.append({"model": name, "pattern": p, "rule": rule, "spearman": round(rho, 3),
                     "top_decile_overlap": f"{len(top_tl & top_as)}/{k}", "attnspec_selective": n_sel,
                     "heads": int(ok.sum())})
        rank_tl = pd.Series(score).rank(ascending=False).to_numpy()
        rank_as = pd.Series(excess).rank(ascending=False).to_numpy()
        gap = np.where(ok, rank_as - rank_tl, 0)
        sink = roles_col(roles, "sink", heads.index)
        print(f"{p:22s} vs {rule!r:12s} Spearman {rho:6.3f}  top-decile overlap {len(top_tl & top_as)}/{k}  "
              f"attnspec selective {n_sel}")
        for label, order in (("detector high, attnspec low", np.argsort(-gap)), ("attnspec high, detector low",
                                                                                  np.argsort(gap))):
            for i in order[:show]:
                lh = heads.index[i]
                print(f"    {label}: L{lh[0]}H{lh[1]} detector {score[i]:.3f} (rank {rank_tl[i]:.0f}) excess "
                      f"{excess[i]:+.3f} [{r['excess_lo'].iloc[i]:+.3f}, {r['excess_hi'].iloc[i]:+.3f}] (rank "
                      f"{rank_as[i]:.0f}) {r['verdict'].iloc[i]}, real weight {r['real_weight'].iloc[i]:.4f}; sink "
                      f"excess {sink[i]:+.3f}; best rule "
                      f"{heads['query_selection_rule'].iloc[i]!r}")
    return rows


def roles_col(roles: pd.DataFrame, rule: str, index) -> np.ndarray:
    r = roles[roles["rule"] == rule].set_index(["layer", "head"]).reindex(index)
    return r["excess"].to_numpy(float)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["smollm2-135m", "qwen2.5-0.5b", "gemma3-270m"])
    ap.add_argument("--texts", type=int, default=32)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--show", type=int, default=3)
    a = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(max(1, torch.get_num_threads()))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    from importlib.metadata import version
    print(f"# head detector vs attnspec roles: commit {commit}, transformer-lens {version('transformer-lens')}, "
          f"torch threads {torch.get_num_threads()}")
    rows = []
    for name in a.models:
        rows += compare(name, a.texts, a.max_length, a.show)
    print("\n" + pd.DataFrame(rows).to_string(index=False))


if __name__ == "__main__":
    main()
