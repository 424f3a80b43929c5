"""Where the one-pass diagnosis' time goes, in forwards: each part's seconds over a plain forward's.

For each model (the texts of ``bench_scale.py --parts speed``: MiniLM 64 built-in texts, the causal models 16 packed
texts of 128 tokens), one thread, after one warm-up diagnosis: a plain forward over the diagnosis' batches (the second
of two), then the one-pass diagnosis (``removal=False, gradient=False``) with a timing wrapper around each part's
function (no profiler): the recording forward (``collect.record``), the fit statistics (``LayerFitSums.update``), the
null heads' fit (``fit.null_sums``), the contexts of the heads and their equivalents and of the null heads and theirs
(``spectra._contexts``, per pass), the head spectra (``head_spectra``: four a head and text, the null's two among
them), the CKA influences, the layer outputs, the Rayleigh-Ritz spectra, the free rotation, the layer spectra, the
tables (``build_tables``, with the refined selection intervals and the head replicates inside it) and the roles
table. Parts nested in another (the refined intervals in the tables) are printed indented and counted once in the
sum. Prints figures only; take them on an idle machine (one busy thread). Usage:
``python benchmarks/bench_parts.py [--models minilm,gemma3-270m,qwen2.5-0.5b,smollm2-135m]``.
"""
from __future__ import annotations

import argparse
import collections
import functools
import os
import time
import warnings

#: (module, attribute, label, nested): the parts timed, in pipeline order.
PARTS = (
    ("attnspec.diagnostics.pipeline.collect", "record", "recording forward (collect.record)", False),
    ("attnspec.diagnostics.pipeline.fit", "LayerFitSums.update", "fit statistics (LayerFitSums.update)", False),
    ("attnspec.diagnostics.pipeline.fit", "null_sums", "null heads' fit (fit.null_sums)", False),
    ("attnspec.diagnostics.pipeline.spectra", "_contexts", "contexts", False),
    ("attnspec.diagnostics.statistics.spectral", "head_eigs", "head spectra, 4 a head and text (head_eigs)", False),
    ("attnspec.diagnostics.pipeline.spectra", "cka_influence", "CKA influences (cka_influence)", False),
    ("attnspec.diagnostics.statistics.spectral", "layer_output", "layer outputs (layer_output)", False),
    ("attnspec.diagnostics.statistics.spectral", "layer_eigs_ritz", "layer and layer without each head (layer_eigs_ritz)",
     False),
    ("attnspec.diagnostics.statistics.rotation", "free_rotation", "free rotation (free_rotation)", False),
    ("attnspec.diagnostics.statistics.spectral", "layer_eigs", "layer spectra (layer_eigs)", False),
    ("attnspec.diagnostics.result.tables", "build_tables", "tables (build_tables)", False),
    ("attnspec.diagnostics.result.tables", "refined_selection", "refined selection intervals", True),
    ("attnspec.diagnostics.result.tables", "head_replicates", "head replicates", True),
    ("attnspec.diagnostics.result.build", "roles_table", "roles table (roles_table)", False),
)


def _wrap(times: dict, modname: str, attr: str, label: str) -> None:
    """Replace ``modname.attr`` (``Class.method`` allowed) by a timing wrapper, everywhere the package bound it."""
    import importlib
    import sys
    mod = importlib.import_module(modname)
    owner, _, name = attr.rpartition(".")
    obj = getattr(mod, owner) if owner else mod
    f = getattr(obj, name)

    @functools.wraps(f)
    def timed(*a, **k):
        key = label + (f" ({a[5] if len(a) > 5 else k.get('which', 'head')} pass)" if name == "_contexts" else "")
        t = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            times[key] += time.perf_counter() - t
    setattr(obj, name, timed)
    if not owner:                         # names imported elsewhere (from x import f): rebind them too
        for m in list(sys.modules.values()):
            if getattr(m, "__name__", "").startswith("attnspec") and getattr(m, name, None) is f:
                setattr(m, name, timed)


def run(name: str) -> None:
    import torch
    torch.set_num_threads(1)
    from attnspec import diagnose
    from attnspec.data import builtin_texts, packed_texts
    from attnspec.models import adapt, load_model, make_batches
    times: dict = collections.defaultdict(float)
    for modname, attr, label, _ in PARTS:
        _wrap(times, modname, attr, label)
    model, tok = load_model(name)
    ad = adapt(model)
    n = 64 if name == "minilm" else 16
    texts = packed_texts(tok, n, 128) if ad.kind == "causal-lm" else builtin_texts(n)
    batches = make_batches(tok, texts, max_length=128, bucket_size=16)
    kw = dict(max_length=128, removal=False, gradient=False, min_tokens=0, progress=False)
    diagnose(ad, tok, texts, **kw)                       # warm-up
    with torch.no_grad():
        for _ in range(2):
            t = time.perf_counter()
            for b in batches:
                ad.run_base(b)
            forward = time.perf_counter() - t
    times.clear()
    t = time.perf_counter()
    diagnose(ad, tok, texts, **kw)
    total = time.perf_counter() - t
    print(f"{name}: forward {forward:.2f} s, diagnosis {total:.2f} s = {total / forward:.2f} forwards "
          f"(one thread, load {os.getloadavg()[0]:.1f})")
    nested = {label for _, _, label, inner in PARTS if inner}
    for key, s in times.items():
        print(f"  {'  ' if key in nested else ''}{key:58s} {s:7.2f} s {s / forward:6.2f}")
    rest = total - sum(s for k, s in times.items() if k not in nested)
    print(f"  {'the rest':58s} {rest:7.2f} s {rest / forward:6.2f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="minilm,gemma3-270m,qwen2.5-0.5b,smollm2-135m")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    import subprocess
    import sys
    for m in args.models.split(","):                     # each model in a fresh process (no wrapper left behind)
        subprocess.run([sys.executable, __file__, "--one", m], check=True)


if __name__ == "__main__":
    import sys
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        warnings.filterwarnings("ignore")
        run(sys.argv[2])
    else:
        main()
