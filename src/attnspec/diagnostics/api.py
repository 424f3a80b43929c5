"""``diagnose()``: per-layer, per-head diagnosis of a trained transformer's attention.

Pipeline (one reference forward pass per length bucket; the model is never modified):

1. hooks record, at every attention layer, the weights ``A``, values ``V`` and per-head contexts;
2. identification (:mod:`.identification`): ``beta_hat``, ``alpha_hat``, ``R^2`` per head;
3. spectra (:mod:`.spectral`) of each head's centered output against its Gaussian equivalent and
   against a null head (:mod:`.selection`); layer spectra against the layer's Gaussian equivalent
   and the free sum of its heads (:mod:`.dependence`); spectra with each head removed
   (:mod:`.removal`);
4. exact head removal with activation reuse, on finer length buckets, and Michel et al. gradient
   importance (:mod:`attnspec.models.ablation`).
"""
from __future__ import annotations

import contextlib
import math
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch

from ..models import adapt, capture, make_batches, michel_importance
from ..models.ablation import removal_effects
from . import dependence as dep
from . import identification as ident
from . import selection as sel
from . import spectral as spec
from .noise import TextNoise
from .removal import normalize_per_layer, spearman_table, spectral_shift
from .result import Diagnosis

__all__ = ["diagnose"]

_NOTE_CAUSAL = ("causal attention: the theory (THEORY.md s.1) assumes every query sees all l tokens. Here query i "
                "sees n_i = i keys; the Gaussian equivalent is applied row by row with l -> n_i, and the uniform part "
                "11^T/n_i no longer vanishes under centering (it becomes a running mean). Read beta_hat, R^2 and "
                "the baselines as usual; read spectral distances as descriptive, not as tests of the law.")
_NOTE_WINDOW = ("sliding-window layers: keys farther than the window are masked; the window {w} binds only for "
                "texts longer than {w} tokens (longest text here: {L}), so {status}.")


def _site_data(site, cap, i, batch):
    mask = batch["attention_mask"]
    A = cap.weights[i].float()
    V = cap.values[i].float()
    C = cap.contexts[i].float()
    real = getattr(cap, "allowed", None)
    real = real[i] if real else None
    if real is not None:   # the mask the attention module received (causal, padding, windows), real queries only
        allowed = real & mask.bool()[:, :, None]
        batch.setdefault("_allowed", {})[i] = allowed   # read by _null_heads
    else:
        allowed = site.allowed(mask)
    groups = torch.tensor([site.kv_group(h) for h in range(site.n_heads)])
    return A, V, C, allowed, groups


def _null_heads(site, i: int, batch: dict, f: dict, seed: int) -> torch.Tensor:
    """Null heads of layer ``i`` on ``batch`` (random scores at each head's fitted ``score_scale``; drawn
    text by text, so the same for any batching): weights ``(B, H, L, L)``."""
    valid = batch["attention_mask"].bool()
    noise = TextNoise(seed, 2, i, batch["order"], valid)
    allowed = batch.get("_allowed", {}).get(i)   # the recorded mask, left by _site_data
    if allowed is None:
        allowed = site.allowed(batch["attention_mask"])
    return ident.null_weights(allowed, f["score_scale"], site.n_heads, noise, d_qk=site.head_dim)


def _site_spectra(site, cap, i: int, batch: dict, f: dict, f0: dict, ch: np.ndarray, W: torch.Tensor,
                  seed: int) -> dict:
    """Spectra of one layer on one batch (module docstring, step 3).

    ``heads[key][h]``: pooled eigenvalues of head ``h`` for ``key`` in ``act`` (the head), ``ge`` (its
    Gaussian equivalent), ``null`` (a null head) and ``nullge`` (the null head's equivalent);
    ``layer[key]`` for the layer output (``act``), its Gaussian equivalent (``ge``) and the free sum of
    its heads (``free``); ``removed[h]``: the layer without head ``h``, ``removed_ge[h]``: its Gaussian
    equivalent without head ``h`` (the ``H - 1``-head prediction); ``gram``/``gram_free``: the
    head-pair Gram blocks of the contexts and of their free rotations.
    """
    valid = batch["attention_mask"].bool()
    lengths = valid.sum(1).numpy()
    H, dh = site.n_heads, site.head_dim
    A, V, C, allowed, groups = _site_data(site, cap, i, batch)

    def noise(purpose: int) -> TextNoise:   # draws per text: independent of batching
        return TextNoise(seed, purpose, i, batch["order"], valid)
    Wh = W.view(H, dh, -1)
    Ks = spec.sqrt_psd(Wh @ Wh.transpose(-1, -2))
    M = spec.center(C.view(C.shape[0], C.shape[1], H, dh).transpose(1, 2), valid)
    Age = ident.surrogate_weights(A, allowed, f["score_scale"], f["beta_hat"], f["alpha_hat"], noise(1))
    Mge = spec.head_contexts(Age, V, groups, valid)
    A0 = _null_heads(site, i, batch, f, seed)
    A0ge = ident.surrogate_weights(A0, allowed, f0["score_scale"], f0["beta_hat"], f0["alpha_hat"], noise(3))
    M0 = spec.head_contexts(A0, V, groups, valid)
    M0ge = spec.head_contexts(A0ge, V, groups, valid)
    heads = {key: spec.head_eigs(MM, Ks, lengths, ch, site.d_out)
             for key, MM in (("act", M), ("ge", Mge), ("null", M0), ("nullge", M0ge))}
    c_layer = float(ch.sum())
    Yh = torch.einsum("bhld,hde->bhle", M, Wh)            # (B, H, L, d_out)
    Y = Yh.sum(1)
    Mfree = spec.free_rotation(M, valid, noise(4))
    Yge_h = torch.einsum("bhld,hde->bhle", Mge, Wh)
    Yge = Yge_h.sum(1)
    layer = {"act": spec.layer_eigs(Y, lengths, c_layer), "ge": spec.layer_eigs(Yge, lengths, c_layer),
             "free": spec.layer_eigs(torch.einsum("bhld,hde->ble", Mfree, Wh), lengths, c_layer)}
    removed = spec.layer_eigs(Y[None] - Yh.transpose(0, 1), lengths, c_layer)  # (H, n)
    removed_ge = spec.layer_eigs(Yge[None] - Yge_h.transpose(0, 1), lengths, c_layer)
    return {"heads": heads, "layer": layer, "removed": removed, "removed_ge": removed_ge,
            "gram": dep.gram_blocks(M), "gram_free": dep.gram_blocks(Mfree)}


@contextlib.contextmanager
def _thread_pool(n: int):
    """``n`` worker threads, each running torch single-threaded (numpy's LAPACK and torch release
    the GIL, so the per-layer spectra of step 3 run side by side)."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with ThreadPoolExecutor(max_workers=max(1, n)) as pool:
            yield pool
    finally:
        torch.set_num_threads(old)


def _resolve_texts(texts, n_texts):
    if texts is None or (isinstance(texts, str) and texts == "builtin"):
        from ..data import builtin_texts
        return builtin_texts(n_texts), "builtin"
    if isinstance(texts, str):
        raise ValueError("texts must be a list of strings or 'builtin'")
    return list(texts), "user"


def _one_blas_thread():
    """numpy's OpenBLAS with several threads is 10x slower on the small batched eigenproblems used here."""
    try:
        from threadpoolctl import ThreadpoolController
        return ThreadpoolController().select(internal_api="openblas").limit(limits=1)
    except Exception:  # threadpoolctl missing or no OpenBLAS: nothing to limit
        return contextlib.nullcontext()


def diagnose(model: Any, tokenizer_or_inputs: Any = None, texts: Sequence[str] | str | None = None, *,
             n_texts: int = 64, max_length: int = 128, bucket_size: int = 16, removal: bool = True,
             mean_ablation: bool = False, gradient: bool = True, threshold: float = sel.DIFFUSE_THRESHOLD,
             seed: int = 0, max_tokens: int = 16384, removal_bucket_size: int = 4, progress: bool = False,
             model_name: str | None = None) -> Diagnosis:
    """Diagnose every attention head of ``model``.

    Parameters
    ----------
    model : nn.Module or ModelAdapter
        A supported model (see :func:`attnspec.models.adapt`), in eval mode with eager attention.
    tokenizer_or_inputs : tokenizer, dict or tensor
        A tokenizer (then ``texts`` are tokenized, truncated to ``max_length`` and length-bucketed),
        a dict/BatchEncoding of ``input_ids``/``attention_mask``, or inputs for generic models (see
        :func:`attnspec.models.make_batches`).
    texts : list of str or 'builtin' or None
        Texts; ``'builtin'``/``None`` takes ``n_texts`` from the built-in corpus (:mod:`attnspec.data`).
    removal, mean_ablation, gradient : bool
        Run exact head removal (zero ablation), also mean ablation, and Michel et al. importance.
    threshold : float
        Selection-score threshold below which a head is flagged diffuse (default ``log 2``).
    seed : int
        Seeds the Gaussian-equivalent noise, null heads, free rotations and gradient probes.
    max_tokens : int
        Token budget of one ablation forward pass (``K`` heads removed per pass = budget / (B L)).
    removal_bucket_size : int
        Texts per length bucket in exact removal (at most ``bucket_size``): its arithmetic is
        proportional to padded tokens, so it uses finer buckets than the statistics.

    Returns
    -------
    Diagnosis
        ``.heads`` (one row per layer x head), ``.layers`` (one row per layer), ``.pairs`` (head
        pairs) and ``.summary``; column meanings in :mod:`attnspec.diagnostics` and the report.
    """
    if not isinstance(removal_bucket_size, int) or removal_bucket_size < 1:
        raise ValueError(f"removal_bucket_size must be an integer >= 1, got {removal_bucket_size!r}")
    with _one_blas_thread():
        return _diagnose(model, tokenizer_or_inputs, texts, n_texts=n_texts, max_length=max_length,
                         bucket_size=bucket_size, removal=removal, mean_ablation=mean_ablation, gradient=gradient,
                         threshold=threshold, seed=seed, max_tokens=max_tokens,
                         removal_bucket_size=removal_bucket_size, progress=progress, model_name=model_name)


def _diagnose(model, tokenizer_or_inputs, texts, *, n_texts, max_length, bucket_size, removal, mean_ablation,
              gradient, threshold, seed, max_tokens, removal_bucket_size, progress, model_name) -> Diagnosis:
    from tqdm.auto import tqdm
    t_start = time.perf_counter()
    adapter = adapt(model)
    tmod = adapter.model
    was_training = tmod.training
    tmod.eval()
    source = "inputs"
    if tokenizer_or_inputs is not None and callable(tokenizer_or_inputs) and not isinstance(
            tokenizer_or_inputs, torch.Tensor) and not isinstance(tokenizer_or_inputs, dict) and \
            not hasattr(tokenizer_or_inputs, "keys"):
        texts, source = _resolve_texts(texts, n_texts)
        batches = make_batches(tokenizer_or_inputs, texts, max_length=max_length, bucket_size=bucket_size)
    else:
        batches = make_batches(tokenizer_or_inputs, max_length=max_length, bucket_size=bucket_size)
    sites = adapter.sites
    nS = len(sites)
    reuse = adapter.can_reuse
    timings: dict[str, float] = {}

    # ---------------------------------------------------------------- 1. reference passes
    t0 = time.perf_counter()
    caps = []
    for batch in tqdm(batches, desc="forward", disable=not progress, leave=False):
        with torch.inference_mode(), capture(sites) as cap:
            if reuse:
                adapter.run_base(batch)   # the LM head is not needed for the statistics
            else:
                adapter.run(batch)
        caps.append(cap)
    timings["forward"] = time.perf_counter() - t0

    # ---------------------------------------------------------------- 2. identification + baselines (pass 1)
    t0 = time.perf_counter()
    W = [s.w_out().float() for s in sites]
    sums = [None] * nS
    bsums = [None] * nS
    vpow = [np.zeros(s.n_heads) for s in sites]
    vcount = np.zeros(nS)
    ctx_sum = [torch.zeros(s.n_heads, s.head_dim, dtype=torch.float64) for s in sites]
    ntok = 0.0
    for batch, cap in zip(batches, caps):
        valid = batch["attention_mask"].bool()
        ntok += float(valid.sum())
        for i, site in enumerate(sites):
            A, V, C, allowed, groups = _site_data(site, cap, i, batch)
            sums[i] = ident.add_sums(sums[i], ident.score_sums(A, allowed))
            bs = sel.baseline_sums(A, allowed, valid, batch["special"])
            bsums[i] = bs if bsums[i] is None else {k: bsums[i][k] + bs[k] for k in bs}
            p, c = spec.value_power(V, groups, W[i], valid)
            vpow[i] += p
            vcount[i] += c
            ctx_sum[i] += (C.view(*C.shape[:2], site.n_heads, site.head_dim) * valid[..., None, None]).sum((0, 1)).double()
    fits = [ident.fit(s) for s in sums]
    # the null heads' own Gaussian-equivalent fit, pooled over all texts like the heads' fits
    null_sums = [None] * nS
    for batch in batches:
        for i, site in enumerate(sites):
            A0 = _null_heads(site, i, batch, fits[i], seed)
            null_sums[i] = ident.add_sums(null_sums[i], ident.score_sums(A0, site.allowed(batch["attention_mask"])))
    null_fits = [ident.fit(s) for s in null_sums]
    timings["identification"] = time.perf_counter() - t0

    # ---------------------------------------------------------------- 3. spectra (pass 2)
    t0 = time.perf_counter()
    H_of = [s.n_heads for s in sites]
    acc = {k: [[[] for _ in range(H_of[i])] for i in range(nS)] for k in ("act", "ge", "null", "nullge")}
    lay = {k: [[] for _ in range(nS)] for k in ("act", "ge", "free")}
    lay_rm = [[[] for _ in range(H_of[i])] for i in range(nS)]
    lay_rm_ge = [[[] for _ in range(H_of[i])] for i in range(nS)]
    Cg = [0.0] * nS
    Cg_null = [0.0] * nS
    jobs = [(b, i) for b in range(len(batches)) for i in range(nS)]

    def one(job):
        b, i = job
        return _site_spectra(sites[i], caps[b], i, batches[b], fits[i], null_fits[i], vpow[i] / vcount[i], W[i], seed)
    with _thread_pool(torch.get_num_threads()) as pool, \
            tqdm(total=len(jobs), desc="spectra", disable=not progress, leave=False) as bar:
        for (_, i), r in zip(jobs, pool.map(one, jobs)):   # in order: pooled spectra do not depend on threads
            for key in ("act", "ge", "null", "nullge"):
                for h, e in enumerate(r["heads"][key]):
                    acc[key][i][h].append(e)
            for key in ("act", "ge", "free"):
                lay[key][i].append(r["layer"][key])
            for h in range(H_of[i]):
                lay_rm[i][h].append(r["removed"][h])
                lay_rm_ge[i][h].append(r["removed_ge"][h])
            Cg[i] = Cg[i] + r["gram"]
            Cg_null[i] = Cg_null[i] + r["gram_free"]
            bar.update()
    cat = np.concatenate
    timings["spectra"] = time.perf_counter() - t0

    # ---------------------------------------------------------------- 4. removal and importance
    t0 = time.perf_counter()
    H_max = max(H_of)
    eff, eff_n, eff_mean = (np.zeros((nS, H_max)) for _ in range(3))
    mich = np.zeros((nS, H_max))
    n_texts_total = sum(bt["attention_mask"].shape[0] for bt in batches)
    means = [(ctx_sum[i] / ntok).float() for i in range(nS)]
    if removal:
        # exact removal on its own, finer length buckets: its cost is proportional to padded tokens
        rm_batches = make_batches(tokenizer_or_inputs, texts, max_length=max_length,
                                  bucket_size=min(bucket_size, removal_bucket_size)) if source != "inputs" else batches
        total = sum(H_of) * len(rm_batches) * (2 if mean_ablation else 1)
        with tqdm(total=total, desc="head removal", disable=not progress, leave=False) as bar:
            eff, eff_n = removal_effects(adapter, rm_batches, max_tokens=max_tokens, progress=bar.update)
            if mean_ablation:
                eff_mean, _ = removal_effects(adapter, rm_batches, mode="mean", means=means, max_tokens=max_tokens,
                                              progress=bar.update)
    timings["removal"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    if gradient:
        for batch in tqdm(batches, desc="gradient", disable=not progress, leave=False):
            mich += np.nan_to_num(michel_importance(adapter, batch, seed=seed))
        mich /= n_texts_total
    timings["gradient"] = time.perf_counter() - t0
    caps.clear()   # free the captured activations before the tables
    if was_training:
        tmod.train()

    # ---------------------------------------------------------------- 5. tables
    t0 = time.perf_counter()
    L_max = max(bt["attention_mask"].sum(1).max().item() for bt in batches)
    rows, lrows, prow = [], [], []
    spectra_store = {}
    mich_norm = normalize_per_layer(np.where(np.arange(H_max)[None] < np.array(H_of)[:, None], mich, np.nan))
    effect_name = "loss_increase" if adapter.kind == "causal-lm" else "embedding_shift"
    notes = []
    for i, site in enumerate(sites):
        H = site.n_heads
        f = fits[i]
        bl = sel.baselines(bsums[i])
        groups = np.array([site.kv_group(h) for h in range(H)])
        cka = dep.cka_matrix(Cg[i], H)
        cka0 = dep.cka_matrix(Cg_null[i], H)
        inner = dep.output_inner(Cg[i], W[i].double().numpy(), H)
        la, lge, lfree = cat(lay["act"][i]), cat(lay["ge"][i]), cat(lay["free"][i])
        shift = spectral_shift(la, [cat(lay_rm[i][h]) for h in range(H)])
        shift_ge = spectral_shift(lge, [cat(lay_rm_ge[i][h]) for h in range(H)])
        energy = np.diag(inner)
        n_texts_layer = n_texts_total
        att = "causal" if site.causal else "bidirectional"
        if site.window is not None:
            att += f", window {site.window}"
        offdiag = ~np.eye(H, dtype=bool)
        for h in range(H):
            act, ge = cat(acc["act"][i][h]), cat(acc["ge"][i][h])
            d = sel.spectral_departure(act, ge)
            d0 = sel.spectral_departure(cat(acc["null"][i][h]), cat(acc["nullge"][i][h]))
            score = float(sel.selection_score(np.array(d["w1_rel"]), np.array(d0["w1_rel"])))
            others = np.where(offdiag[h])[0]
            s_h = float(f["score_scale"][h])
            row = {
                "layer": i, "head": h, "kv_group": int(groups[h]), "attention": att,
                "score_scale": s_h, "beta_hat": float(f["beta_hat"][h]), "alpha_hat": float(f["alpha_hat"][h]),
                "alpha_null": math.sqrt(max(math.expm1(min(s_h, 25) ** 2) - s_h ** 2, 0.0)),
                "r2": float(f["r2"][h]),
                "spec_w1": d["w1"], "spec_w1_rel": d["w1_rel"], "spec_ks": d["ks"],
                "spec_outliers_per_text": d["n_outliers"] / n_texts_layer, "spec_m1": d["m1"], "spec_m1_ge": d["m1_ref"],
                "null_w1_rel": d0["w1_rel"], "selection_score": score,
                "selection": sel.label(score, s_h, threshold),
                **{k: float(v[h]) for k, v in bl.items()},
                "cka_mean": float(np.nanmean(cka[h, others])) if H > 1 else np.nan,
                "cka_max": float(np.nanmax(cka[h, others])) if H > 1 else np.nan,
                "cka_partner": int(others[np.nanargmax(cka[h, others])]) if H > 1 else -1,
                "cka_null_mean": float(np.nanmean(cka0[h, others])) if H > 1 else np.nan,
                "energy_share": float(energy[h] / energy.sum()) if energy.sum() > 0 else np.nan,
                "removal_spec_shift": float(shift[h]), "removal_spec_shift_ge": float(shift_ge[h]),
            }
            row["diffuse"] = row["selection"] == "diffuse"
            row["cka_excess"] = row["cka_mean"] - row["cka_null_mean"]
            if removal:
                row["removal_effect"] = float(eff[i, h] / max(eff_n[i, h], 1))
                row[effect_name] = row["removal_effect"]
                if mean_ablation:
                    row["removal_effect_mean"] = float(eff_mean[i, h] / max(eff_n[i, h], 1))
            if gradient:
                row["michel_importance"] = float(mich_norm[i, h])
                row["michel_importance_raw"] = float(mich[i, h])
            rows.append(row)
        g, hh, ck, ck0, corr, shared = dep.pair_table_arrays(cka, cka0, inner, groups)
        for a, bb, x1, x2, x3, x4 in zip(g, hh, ck, ck0, corr, shared):
            prow.append({"layer": i, "head_a": int(a), "head_b": int(bb), "cka": float(x1), "cka_null": float(x2),
                         "cka_excess": float(x1 - x2), "output_corr": float(x3), "shared_kv": bool(x4)})
        dfree = sel.spectral_departure(la, lfree)
        dge = sel.spectral_departure(la, lge)
        iu = np.triu_indices(H, 1)
        sh_mask = (groups[iu[0]] == groups[iu[1]])
        full_theory = (not site.causal) and (site.window is None or site.window >= L_max)
        lrows.append({
            "layer": i, "attention": att, "n_heads": H, "n_kv_heads": site.n_kv_heads, "head_dim": site.head_dim,
            "d_out": site.d_out, "theory_applies": bool(full_theory),
            "window_binds": bool(site.window is not None and site.window < L_max),
            "value_power": float(vpow[i].sum() / vcount[i]),
            "spec_m1": dge["m1"], "ge_m1": dge["m1_ref"], "ge_w1_rel": dge["w1_rel"], "ge_ks": dge["ks"],
            "free_defect_w1_rel": dfree["w1_rel"], "free_defect_ks": dfree["ks"], "free_m1": dfree["m1_ref"],
            "interference": float(inner.sum() / np.trace(inner) - 1) if np.trace(inner) > 0 else np.nan,
            "cka_mean": float(np.nanmean(cka[iu])) if H > 1 else np.nan,
            "cka_null_mean": float(np.nanmean(cka0[iu])) if H > 1 else np.nan,
            "cka_shared_kv_mean": float(np.nanmean(cka[iu][sh_mask])) if sh_mask.any() else np.nan,
            "cka_unshared_kv_mean": float(np.nanmean(cka[iu][~sh_mask])) if (~sh_mask).any() else np.nan,
            "beta_hat_mean": float(np.mean(f["beta_hat"])), "score_scale_mean": float(np.mean(f["score_scale"])),
            "n_diffuse": int(sum(r["selection"] == "diffuse" for r in rows if r["layer"] == i)),
            "n_selective": int(sum(r["selection"] == "selective" for r in rows if r["layer"] == i)),
            "n_sparse": int(sum(r["selection"] == "sparse" for r in rows if r["layer"] == i)),
        })
        spectra_store[i] = {"actual": la, "gaussian_equivalent": lge, "free_sum": lfree}
    heads = pd.DataFrame(rows)
    layers = pd.DataFrame(lrows)
    pairs = pd.DataFrame(prow)
    if any(s.causal for s in sites):
        notes.append(_NOTE_CAUSAL)
    windows = sorted({s.window for s in sites if s.window is not None})
    for w in windows:
        notes.append(_NOTE_WINDOW.format(w=w, L=L_max, status="it does not change any statistic here" if w >= L_max
                                         else "those layers attend to a band, and the full-attention theory does not apply to them"))
    if any(s.n_kv_heads < s.n_heads for s in sites):
        notes.append("grouped-query attention: query heads of a group share keys and values (column shared_kv in the "
                     "pairs table; layer columns cka_shared_kv_mean / cka_unshared_kv_mean). THEORY.md s.4 predicts that "
                     "sharing across heads leaves the spectrum of the sum unchanged: compare free_defect_w1_rel with a "
                     "model without sharing.")
    timings["tables"] = time.perf_counter() - t0
    timings["total"] = time.perf_counter() - t_start
    summary = {
        "model": model_name or type(tmod).__name__, "family": adapter.family, "kind": adapter.kind,
        "n_layers": nS, "n_heads": int(sum(H_of)), "n_texts": int(n_texts_total), "n_tokens": int(ntok),
        "max_tokens_per_text": int(L_max), "texts": source, "max_length": max_length, "bucket_size": bucket_size,
        "removal_effect": effect_name if removal else None, "activation_reuse": bool(reuse),
        "selection_threshold": threshold, "beta_max_diffuse": sel.BETA_MAX_DIFFUSE,
        "n_diffuse": int((heads["selection"] == "diffuse").sum()),
        "n_selective": int((heads["selection"] == "selective").sum()),
        "n_sparse": int((heads["selection"] == "sparse").sum()),
        "selection_score_quantiles": {str(q): float(heads["selection_score"].quantile(q)) for q in (0.1, 0.5, 0.9)},
        "spearman": spearman_table(heads), "notes": notes,
        "seed": seed, "timings_s": {k: round(v, 3) for k, v in timings.items()},
        "torch_threads": torch.get_num_threads(),
    }
    if source == "builtin":
        from ..data import CORPUS_SOURCE
        summary["corpus"] = CORPUS_SOURCE
    return Diagnosis(heads=heads, layers=layers, pairs=pairs, spectra=spectra_store, summary=summary)
