"""A model held by an interpretability toolkit against the same Hugging Face model: every table, column by column.

For each packaged model (eager attention): the Hugging Face model, a TransformerLens 4.x ``TransformerBridge`` booted
offline around it, the bridge in compatibility mode (``enable_compatibility_mode()``: HookedTransformer's weight
processing) and an nnsight ``TransformersModel`` wrapping it (``LanguageModel``, deprecated in nnsight 0.8, reads the
same hooks), each diagnosed with the same tokenizer, texts and options
(exact removal of every head). Per wrapper and table it prints the largest difference of a numeric column relative to
the column's largest magnitude, the column it occurs in, the number of columns that differ at all, and for
compatibility mode the columns that moved beyond 1e-6 and the verdict agreement. Prints figures only.

    python benchmarks/bench_toolkits.py [--models smollm2-135m qwen2.5-0.5b gemma3-270m] [--texts 8] [--max-length 32]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import time

import numpy as np
import pandas as pd
import torch


def differences(a: pd.DataFrame, b: pd.DataFrame) -> dict[str, float]:
    """Per numeric column: ``max |a - b| / max |a|`` (inf where NaN patterns differ); text columns: 0 or inf."""
    out = {}
    for c in a.columns:
        if c not in b:
            out[c] = np.inf
        elif pd.api.types.is_numeric_dtype(a[c]) and not pd.api.types.is_bool_dtype(a[c]):
            u, v = a[c].to_numpy(float), b[c].to_numpy(float)
            if not np.array_equal(np.isnan(u), np.isnan(v)):
                out[c] = np.inf
                continue
            scale = max(np.nanmax(np.abs(u), initial=0.0), 1e-30)
            out[c] = float(np.nanmax(np.abs(u - v), initial=0.0) / scale)
        else:
            out[c] = 0.0 if a[c].astype(str).equals(b[c].astype(str)) else np.inf
    return out


def wrappers(name: str, tok):
    """``(label, model)`` in turn: an nnsight TransformersModel, a TransformerBridge, then the same bridge in
    compatibility mode (enabled only once the bridge itself was diagnosed: a generator)."""
    import nnsight
    from transformer_lens.model_bridge import TransformerBridge

    from attnspec.models import load_model
    yield "nnsight TransformersModel", nnsight.TransformersModel(load_model(name, attn_implementation="eager")[0],
                                                                 tokenizer=tok)
    bridge = TransformerBridge.boot_transformers(name, hf_model=load_model(name, attn_implementation="eager")[0],
                                                 tokenizer=tok)
    yield "TransformerBridge", bridge
    bridge.enable_compatibility_mode(disable_warnings=True)
    yield "TransformerBridge, compatibility mode", bridge


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["smollm2-135m", "qwen2.5-0.5b", "gemma3-270m"])
    ap.add_argument("--texts", type=int, default=8)
    ap.add_argument("--max-length", type=int, default=32)
    a = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)
    import attnspec
    from attnspec.models import load_model
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"# toolkit wrappers vs the Hugging Face model: commit {commit}, {a.texts} texts x {a.max_length} tokens, "
          "exact removal, n_boot 50, 1 torch thread")
    opts = dict(n_texts=a.texts, max_length=a.max_length, n_boot=50, removal="exact", progress=False)
    rows = []
    for name in a.models:
        model, tok = load_model(name, attn_implementation="eager")
        t0 = time.perf_counter()
        ref = attnspec.diagnose(model, tok, None, **opts)
        print(f"\n## {name}: {len(ref.heads)} heads, reference {time.perf_counter() - t0:.0f} s")
        for label, held in wrappers(name, tok):
            d = attnspec.diagnose(held, tok, None, **opts)
            for table in ("heads", "layers", "pairs"):
                diff = differences(getattr(ref, table), getattr(d, table))
                worst = max(diff, key=diff.get) if diff else ""
                moved = sorted(c for c, v in diff.items() if v > 1e-6)
                row = {"model": name, "wrapper": label, "table": table, "columns": len(diff),
                       "differing": sum(v > 0 for v in diff.values()), "max_rel_diff": diff.get(worst, 0.0),
                       "at": worst, "beyond_1e-6": ", ".join(moved[:12]) + (" ..." if len(moved) > 12 else "")}
                rows.append(row)
                print(f"{label:38s} {table:6s} max rel diff {row['max_rel_diff']:.1e} ({worst}); "
                      f"{row['differing']}/{len(diff)} columns differ; beyond 1e-6: {row['beyond_1e-6'] or '-'}")
            if label.endswith("compatibility mode"):
                kit = d.summary.get("toolkit", {})
                agree = {c: float((ref.heads[c] == d.heads[c]).mean()) for c in ("selection", "query_selection", "roles")
                         if c in ref.heads}
                print(f"    processing {kit.get('processing')}; verdicts equal: "
                      + ", ".join(f"{c} {v:.3f}" for c, v in agree.items()))
    print("\n" + pd.DataFrame(rows).to_string(index=False))


if __name__ == "__main__":
    main()
