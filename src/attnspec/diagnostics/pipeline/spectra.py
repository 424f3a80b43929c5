"""Step 3, spectra: per layer batch, the centered output spectra of each head, of its fitted Gaussian
equivalent, of a null head and of the null head's equivalent; the layer's spectrum, its Gaussian
equivalent's, the free sum of its heads, and the layer without each head (normalizations in
:mod:`..statistics.spectral`).

The four contexts ``A V`` (head, equivalent, null, null equivalent) are built one query tile at a
time, in two passes over the tiles: the null head's and its equivalent's first, whose spectra are taken and
the contexts dropped, then the head's and its equivalent's; the spectra need only the contexts
``(B, H, L, d_head)``. Memory of one layer batch, in numbers of ``B H L d_head``: two contexts while a pass
builds them (beside about a dozen tiles' temporaries) and while their head spectra are taken (with one product of
their size); then the layer spectra in turn, each context dropped once its spectra are taken: the equivalent's,
the free rotation of the head's (its output in the contexts' dtype, beside float64 temporaries of at most
:data:`..statistics.rotation.ROTATION_BYTES`), the head's; each with its layer output (``B L d_out`` numbers, built
over chunks of tokens, :data:`..statistics.spectral.SIDE_BY_SIDE_BYTES`) and the budget of the layer without each
head (:data:`..statistics.spectral.REMOVED_GRAM_BYTES`, or one text's Rayleigh-Ritz products, about
``5 H min(L, d_out) d_head`` numbers, when they need more): at most three contexts' worth, i.e. linear in ``L``
beyond one tile of weights and, for texts shorter than ``d_out``, one ``L x L`` eigendecomposition.

The spectra are taken on the **spectra texts** (:mod:`.spectra_plan`: a seeded sample of the corpus, grown in
stages by default), and so is the free rotation behind the ``free`` layer spectrum, while the dependence
statistics (each text's influence on the CKA against step 2's Gram sum) cover every text: the eigensolves,
``4 H`` head spectra and 3 layer spectra per text and layer (with ``removal_spectra='exact'`` ``2 H`` more, the
layer without each head; by default that spectrum comes from the layer's own eigendecomposition,
:func:`..statistics.spectral.layer_eigs_ritz`), are most of this step's cost.
A sampled text's eigenvalues are those it has without a sample (per-text draws), and the bootstrap over the
spectra texts widens the spectral columns' intervals accordingly.

:class:`LayerSpectra` keeps the pooled eigenvalues (one array per batch and spectrum, texts in batch
order) with each batch's text positions and lengths, and the head-pair Gram sums; merging concatenates
and adds, so every distance computed from it depends only on the multiset of texts. :meth:`LayerSpectra.text_index` gives each pooled
eigenvalue its text (for the bootstrap weights) (:mod:`..statistics.bootstrap`): a text of ``l_b`` real tokens contributes
its top ``min(l_b - 1, d_head)`` eigenvalues to a head spectrum and ``min(l_b - 1, d_out)`` to a layer
spectrum (:mod:`..statistics.spectral`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ..statistics import dependence as dep
from ..statistics import identification as ident
from ..statistics import selection as sel
from ..statistics import spectral
from ..statistics.bootstrap import weighted, weighted_relative_w1
from ..statistics.devices import host
from ..statistics.noise import BLOCK_PER_WIDTH, Draw, TextNoise, block_factors
from .collect import LayerBatch, batch_rows
from .fit import null_tile_weights

__all__ = ["LayerSpectra", "layer_batch_spectra", "cka_influence", "HEAD_SPECTRA", "LAYER_SPECTRA",
           "INFLUENCE_BYTES"]

#: Head spectra: the head, its Gaussian equivalent, a null head, the null head's equivalent.
HEAD_SPECTRA = ("act", "ge", "null", "nullge")
#: Layer spectra: the layer, its Gaussian equivalent, the free sum of its heads.
LAYER_SPECTRA = ("act", "ge", "free")
#: Budget (bytes) of one block of texts in :func:`cka_influence` (its float64 contexts and products).
INFLUENCE_BYTES = 32 * 2 ** 20


def _contexts(lb: LayerBatch, f: dict, f0: dict, reference_seed: int, idx: torch.Tensor | None = None,
              which: str = "head") -> dict[str, torch.Tensor]:
    """Uncentered contexts ``A V`` of one layer batch, built one query tile at a time. ``which='head'``: the
    head's ``(B, H, L, d_v)`` (every text of the batch) and its Gaussian equivalent's for the texts ``idx``
    (default all) ``(len(idx), H, L, d_v)``; ``which='null'``: the null head's and its equivalent's for the texts
    ``idx``. The two pairs come from two passes over the tiles, so that a layer holds two contexts at a time,
    not four; each pass draws only its own streams, so the numbers do not depend on the split.
    The draws are per text (:class:`..statistics.noise.TextNoise`): a text's contexts do not depend on which
    other texts are taken. An equivalent's noise enters its context as ``(alpha / n_i) sum_j Z_ij V_j``; on the
    keys of a row that form whole blocks of ``BLOCK_PER_WIDTH d_v`` keys (long texts) it is drawn as
    ``(alpha / n_i) sum_m R_m^T g_im`` with ``R_m^T R_m = V_m^T V_m`` (:func:`..statistics.noise.block_factors`),
    which has the same law given the values, from ``d_v`` numbers a block instead of one a key."""
    if which not in ("head", "null"):
        raise ValueError(f"which must be 'head' or 'null', got {which!r}")
    head = which == "head"
    H, i = lb.site.n_heads, lb.index
    B, _, L, dv = lb.values.shape
    sub = torch.arange(B, device=lb.device) if idx is None else idx
    n = int(sub.numel())
    plain, equivalent = ("act", "ge") if head else ("null", "nullge")
    out = {k: torch.empty(B if k == "act" else n, H, L, dv, dtype=lb.dtype, device=lb.device)   # every row tile is written
           for k in (plain, equivalent)}
    if not n and not head:
        return out
    order, valid = [lb.order[int(b)] for b in sub], lb.valid[sub]
    allowed = lb.allowed if idx is None else batch_rows(lb.allowed, sub, B)
    Vs = lb.values if idx is None else lb.values[sub]      # per key/value head (lb.attend)
    fit = f if head else f0
    noise = TextNoise(reference_seed, Draw.GE_NOISE if head else Draw.NULL_GE_NOISE, i, order, valid)
    size = BLOCK_PER_WIDTH * dv                     # whole blocks of keys of the equivalents' noise (long texts)
    R = None                                        # one factorization per key/value head, shared by its query heads
    if n:
        R = block_factors(Vs, valid, size)
        R = R[:, lb.groups] if R is not None else None
    alpha = torch.as_tensor(np.asarray(fit["alpha_hat"]), dtype=lb.dtype, device=lb.device)[:, None, None]
    tiles = list(lb.tiles())                        # the whole batch's tiles: the texts idx read the same keys
    weights = (((rows, keys, lb.weights_of(rows, keys)) for rows, keys in tiles) if head else
               null_tile_weights(allowed, valid, order, i, H, lb.site.head_dim, f["score_scale"], reference_seed,
                                 tiles, lb.dtype))
    for rows, keys, A in weights:
        if head:
            out["act"][:, :, rows] = lb.attend(A, keys)
            if not n:
                continue
            A = A if idx is None else A[sub]
        else:
            out["null"][:, :, rows] = lb.attend(A, keys, Vs)
        al = allowed[:, rows][..., keys]
        Z, G = noise.on_allowed_blocks(rows, (H,), al, size, dv, lb.dtype)
        Ae = ident.surrogate_weights(A, al, fit["score_scale"], fit["beta_hat"], fit["alpha_hat"], Z)
        del Z, A
        c = lb.attend(Ae, keys, Vs)
        if G is not None:                           # the whole blocks' noise: (alpha / n_i) sum_m R_m^T g_im
            per_row = al.sum(-1).clamp(min=1).to(lb.dtype)[:, None, :, None]          # n_i: (n, 1, r, 1)
            c += torch.einsum("bimdh,bhmde->bhie", G, R) * alpha / per_row
        out[equivalent][:, :, rows] = c
    return out


def cka_influence(M: torch.Tensor, gram: np.ndarray, max_bytes: int = INFLUENCE_BYTES) -> np.ndarray:
    """Each text's influence on the CKA numerators: ``IF[b, g, h] = <C_gh, C^b_gh>_F`` ``(B, H, H)`` float64,
    with ``C = gram`` the head-pair Gram sum over all texts and ``C^b = M_b^T M_b`` text ``b``'s (``M``
    ``(B, H, L, dh)`` centered contexts). ``sum_b IF[b] = ||C_gh||_F^2``, and under text weights ``w``
    ``||sum_b w_b C^b_gh||^2 = 2 sum_b w_b IF[b, g, h] - ||C_gh||^2`` to first order in ``w - 1``.

    Computed without the texts' ``(H d_head)^2`` Grams, as ``IF[b, g, h] = <M_bg C_gh, M_bh>_F`` (sum over
    tokens and columns), for ``h >= g`` only (``IF[b]`` is symmetric, ``C_hg = C_gh^T``): one float64
    product ``(texts x tokens, d_head) @ (d_head, (H - g) d_head)`` per head ``g``, over blocks of texts
    whose float64 contexts and products take at most ``max_bytes`` (a text longer than that: over chunks of its
    tokens, the sum being one over tokens); ``(H + 1) / (2 H)`` of the multiplications of the texts' Grams. Float64, since
    the replicates are differences of large sums (``2 sum w IF - F``).

    Parameters
    ----------
    M : torch.Tensor, shape (B, H, L, d_head)
        Centered contexts of the batch.
    gram : numpy.ndarray, shape (H (H + 1) / 2, d_head, d_head)
        Head-pair Gram blocks summed over all texts (:func:`..statistics.dependence.gram_blocks`).
    max_bytes : int
        Budget of one block's float64 contexts and products (>= 1; at least one token per block).

    Returns
    -------
    numpy.ndarray, shape (B, H, H)

    Examples
    --------
    With the batch as the whole corpus, the influences add up to ``||C_gh||_F^2``:

    >>> import numpy as np, torch
    >>> from attnspec.diagnostics.statistics.dependence import gram_blocks
    >>> from attnspec.diagnostics.statistics.spectral import center
    >>> M = center(torch.randn(3, 2, 5, 4, generator=torch.Generator().manual_seed(0)), torch.ones(3, 5, dtype=torch.bool))
    >>> from attnspec.diagnostics.statistics.dependence import block_inner
    >>> C = gram_blocks(M)
    >>> IF = cka_influence(M, C)
    >>> IF.shape, np.allclose(IF.sum(0), block_inner(C))
    ((3, 2, 2), True)

    Token by token (the smallest budget), the same numbers:

    >>> bool(np.allclose(cka_influence(M, C, max_bytes=1), IF, rtol=1e-14, atol=0))
    True
    """
    if int(max_bytes) < 1:
        raise ValueError(f"max_bytes must be >= 1, got {max_bytes}")
    B, H, L, dh = M.shape
    C = torch.from_numpy(np.asarray(gram, dtype=np.float64)).to(M.device)
    Cg = [C[dep.block_row(H, g)].transpose(0, 1).reshape(dh, (H - g) * dh) for g in range(H)]   # [C_gg ... C_gH]
    out = np.zeros((B, H, H))
    per_token = 8 * H * dh * 3                                         # the contexts, the product, its elementwise one
    chunk = max(1, min(L, int(max_bytes) // per_token))                # tokens at once (a long text: in chunks)
    step = max(1, int(max_bytes) // (per_token * L)) if chunk == L else 1
    for b0 in range(0, B, step):
        for l0 in range(0, L, chunk):
            X = M[b0:b0 + step, :, l0:l0 + chunk].double()            # (b, H, l, dh)
            b, l = X.shape[0], X.shape[2]
            for g in range(H):
                U = X[:, g].reshape(b * l, dh) @ Cg[g]                                     # M_bg C_gh, h >= g
                out[b0:b0 + b, g, g:] += host((U.view(b, l, H - g, dh) * X[:, g:].transpose(1, 2)).sum(dim=(1, 3)))
    iu = np.triu_indices(H, 1)
    out[:, iu[1], iu[0]] = out[:, iu[0], iu[1]]                        # IF[b] is symmetric
    return out


def layer_batch_spectra(lb: LayerBatch, W: torch.Tensor, f: dict, f0: dict, ch: np.ndarray, reference_seed: int,
                        gram: np.ndarray | None = None, w: np.ndarray | None = None,
                        texts: frozenset | None = None, dependence: bool = True,
                        removal_spectra: str = spectral.REMOVAL_SPECTRA[0]) -> dict:
    """Spectra of one layer on one batch.

    ``heads[key][h]``: eigenvalues of head ``h`` for ``key`` in :data:`HEAD_SPECTRA`; ``layer[key]`` for
    :data:`LAYER_SPECTRA`; ``removed[h]`` / ``removed_ge[h]``: the layer (its equivalent) without head
    ``h`` (``removal_spectra``: Rayleigh-Ritz values on the layer's eigenvectors,
    :func:`..statistics.spectral.layer_eigs_ritz`, or exactly, :func:`..statistics.spectral.layer_eigs_without_each`);
    ``gram``: head-pair Gram blocks of the contexts.
    ``W`` ``(H d_head, d_out)``, ``f``/``f0`` the head and null fits, ``ch`` the value-path powers, ``reference_seed``
    the seed of the reference draws (the equivalents' noise, the null heads, the free rotation; the diagnosis'
    ``reference_seed``, not its ``seed``, :mod:`..statistics.noise`);
    ``boot_cka``: ``sum_b w_rb IF[b]`` ``(n_boot, H, H)`` (:func:`cka_influence`) for the merged Gram sum
    ``gram`` of step 2 and the texts' bootstrap weights ``w`` (0.0 without them). Given step 2's ``gram``,
    the batch's own Gram of the contexts is not recomputed (``gram`` is 0.0 in the result): step 2
    already summed exactly these numbers (same contexts, same tiles, same centering), and the tables
    read them from there (:func:`..result.tables.build_tables`).

    ``texts``: the corpus positions whose spectra are taken (the spectra texts, :mod:`.spectra_plan`; None:
    all). The Gram sums and the CKA influences (the dependence statistics) always cover every text of the
    batch; the spectra (heads, layer, removed heads) only the batch's texts in ``texts``, each exactly as
    without a sample (the draws are per text). ``dependence=False`` (a later stage of the
    spectra texts, :mod:`.spectra_plan`, whose batches were already counted): no Gram sum, influence or corpus
    entry, only the spectra of the texts ``texts``.

    Returns
    -------
    dict
        The entries above, with ``order`` and ``lengths`` (real tokens) of the batch's spectra texts, and
        ``corpus_order`` and ``corpus_lengths`` of all its texts.

    Examples
    --------
    Each text of 6 tokens gives its top ``min(6 - 1, d_head)`` = 5 eigenvalues per spectrum:

    >>> import numpy as np
    >>> from attnspec.diagnostics.pipeline.fit import LayerFitSums, NullFitSums
    >>> from attnspec.diagnostics.pipeline.collect import tiny_layer
    >>> ad, batch, lb = tiny_layer()             # layer 0 of a 2-layer GPT-2: 2 heads of width 16, d_out = 32
    >>> W = ad.sites[0].w_out(); sums = LayerFitSums().update(lb, W); f = sums.fit()
    >>> f0 = NullFitSums().update(lb.allowed, lb.valid, lb.order, 0, 2, 16, f["score_scale"], 0, 6).fit()
    >>> r = layer_batch_spectra(lb, W, f, f0, sums.head_power(), reference_seed=0)
    >>> [len(e) for e in r["heads"]["act"]], r["layer"]["free"].shape, r["removed"].shape
    ([10, 10], (10,), (2, 10))

    With one of the two texts as the spectra texts, its eigenvalues only, the same as with both:

    >>> one = layer_batch_spectra(lb, W, f, f0, sums.head_power(), reference_seed=0, texts=frozenset({lb.order[1]}))
    >>> one["order"].tolist(), [len(e) for e in one["heads"]["ge"]]
    ([1], [5, 5])
    >>> all(np.allclose(one["heads"][k][h], r["heads"][k][h][5:], rtol=1e-5, atol=1e-6)
    ...     for k in HEAD_SPECTRA for h in (0, 1))
    True
    >>> one["corpus_order"].tolist()                      # the dependence statistics: every text
    [0, 1]
    """
    valid = lb.valid
    H, dh, i = lb.site.n_heads, lb.site.head_dim, lb.index
    keep = [b for b, t in enumerate(lb.order) if texts is None or t in texts]
    idx = None if len(keep) == len(lb.order) else torch.tensor(keep, dtype=torch.long, device=lb.device)
    Wh = W.to(lb.device, lb.dtype).view(H, dh, -1)
    K = Wh @ Wh.transpose(-1, -2)                       # W_O^h W_O^{hT}: head spectra and removed-head Grams
    Ks = spectral.sqrt_psd(K)
    valid_s = valid if idx is None else valid[idx]     # the spectra texts' real tokens
    lengths = host(valid_s.sum(1))
    heads = {}
    if keep:                                            # the null heads first: a pass holds two contexts, not four
        for k, X in _contexts(lb, f, f0, reference_seed, idx, "null").items():
            heads[k] = spectral.head_eigs(spectral.center(X, valid_s, inplace=True), Ks, lengths, ch, lb.site.d_out)
        del X
    M = _contexts(lb, f, f0, reference_seed, idx, "head")
    M["act"] = spectral.center(M["act"], valid, inplace=True)
    if dependence:                                      # the dependence statistics: every text of the batch
        counted = {"gram": dep.gram_blocks(M["act"]) if gram is None else 0.0,
                   "boot_cka": weighted(w, cka_influence(M["act"], gram)) if gram is not None and w is not None
                   else 0.0, "corpus_order": np.asarray(lb.order, dtype=np.int64), "corpus_lengths": host(lb.valid.sum(1))}
    else:
        counted = {"gram": 0.0, "boot_cka": 0.0, "corpus_order": np.zeros(0, np.int64),
                   "corpus_lengths": np.zeros(0, np.int64)}
    if idx is not None:                                 # the spectra of the spectra texts only
        M["act"] = M["act"][idx]
    valid = valid_s
    order = np.asarray([lb.order[b] for b in keep], dtype=np.int64)
    if not keep:                                        # none of the batch's texts is a spectra text
        none = np.zeros(0)
        return {"heads": {k: [none] * H for k in HEAD_SPECTRA}, "layer": {k: none for k in LAYER_SPECTRA},
                "order": order, "lengths": lengths, "removed": np.zeros((H, 0)), "removed_ge": np.zeros((H, 0)),
                **counted}
    M["ge"] = spectral.center(M["ge"], valid, inplace=True)
    for k in ("act", "ge"):
        heads[k] = spectral.head_eigs(M[k], Ks, lengths, ch, lb.site.d_out)
    heads = {k: heads[k] for k in HEAD_SPECTRA}
    c_layer = float(ch.sum())
    layer, removed = {}, {}
    # the layer spectra, each context dropped once done: the equivalent's, then the free rotation of the head's
    # (its own draws, so the order changes no number), then the head's: at most three contexts' worth at a time
    for k in ("ge", "free", "act"):
        if k == "free":
            X = spectral.free_rotation(M["act"], valid, TextNoise(reference_seed, Draw.FREE_ROTATION, i, order.tolist(),
                                                                             valid))
            Y = spectral.layer_output(X, Wh)
            del X
            layer[k] = spectral.layer_eigs(Y, lengths, c_layer)
        else:                                           # the layer and the layer without each head
            Y = spectral.layer_output(M[k], Wh)
            if removal_spectra == "exact":
                layer[k] = spectral.layer_eigs(Y, lengths, c_layer)
                removed[k] = spectral.layer_eigs_without_each(M[k], Wh, lengths, c_layer, K=K, Y=Y)
            else:
                layer[k], removed[k] = spectral.layer_eigs_ritz(M[k], Wh, lengths, c_layer, K=K, Y=Y)
            del M[k]
        del Y
    return {"heads": heads, "layer": {k: layer[k] for k in LAYER_SPECTRA}, "order": order, "lengths": lengths,
            "removed": removed["act"], "removed_ge": removed["ge"], **counted}


@dataclass
class LayerSpectra:
    """Mergeable pooled spectra and Gram sums of one layer (see module docstring). Eigenvalues are kept in
    ``store_dtype`` (float32 for float32 models: the eigensolver's precision, half the memory). ``gram``
    stays 0.0 when the batches were given step 2's Gram sum (:func:`layer_batch_spectra`): the same
    numbers are then :attr:`.fit.LayerFitSums.gram`.

    Examples
    --------
    The spectra of the tiny GPT-2's layer 0 on its batch of 2 texts, pooled once and twice:

    >>> import numpy as np
    >>> from attnspec.diagnostics.pipeline import collect, fit
    >>> from attnspec.diagnostics.pipeline.collect import tiny_layer
    >>> ad, batch, lb = tiny_layer(); W = ad.sites[0].w_out()
    >>> sums = fit.LayerFitSums().update(lb, W); f = sums.fit()
    >>> f0 = fit.NullFitSums().update(lb.allowed, lb.valid, lb.order, 0, 2, 16, f["score_scale"], 0, 6).fit()
    >>> spectra = lambda b: LayerSpectra(2, head_dim=16, d_out=32).update(
    ...     layer_batch_spectra(b, W, f, f0, sums.head_power(), reference_seed=0))
    >>> whole = spectra(lb)
    >>> sp = whole.merge(whole)                                          # the batch twice
    >>> sp.head("act", 0).shape, sp.of_layer("ge").shape, sp.without(1).shape
    ((20,), (20,), (20,))
    >>> bool(np.all(np.diff(sp.head("null", 1)) >= 0))          # pooled spectra come sorted
    True

    Text by text, merged in either order, every pooled spectrum is the batch's:

    >>> one = lambda i: collect.collect(ad, {k: v[i:i + 1] for k, v in batch.items()})[0]
    >>> split = spectra(one(1)).merge(spectra(one(0)))
    >>> all(np.allclose(split.head(k, h), whole.head(k, h)) for k in HEAD_SPECTRA for h in (0, 1))
    True
    >>> all(np.allclose(split.of_layer(k), whole.of_layer(k)) for k in LAYER_SPECTRA)
    True
    """

    n_heads: int
    store_dtype: str = "float64"
    heads: dict = field(default_factory=dict)       # key -> [per head: list of arrays]
    layer: dict = field(default_factory=dict)       # key -> list of arrays
    removed: list = field(default_factory=list)     # per head: list of arrays
    removed_ge: list = field(default_factory=list)
    gram: np.ndarray | float = 0.0
    order: list = field(default_factory=list)      # per batch: positions of its spectra texts (b,)
    lengths: list = field(default_factory=list)    # per batch: real tokens of its spectra texts (b,)
    corpus_order: list = field(default_factory=list)     # per batch: positions of all its texts (B,)
    corpus_lengths: list = field(default_factory=list)   # per batch: real tokens of all its texts (B,)
    head_dim: int = 0
    d_out: int = 0
    boot_cka: np.ndarray | float = 0.0             # (n_boot, H, H): sum_b w_rb IF[b] (cka_influence)
    _departures: dict = field(default_factory=dict, repr=False, compare=False)   # departure_replicates by key

    def __post_init__(self):
        H = self.n_heads
        self.heads = self.heads or {k: [[] for _ in range(H)] for k in HEAD_SPECTRA}
        self.layer = self.layer or {k: [] for k in LAYER_SPECTRA}
        self.removed = self.removed or [[] for _ in range(H)]
        self.removed_ge = self.removed_ge or [[] for _ in range(H)]

    def update(self, r: dict) -> "LayerSpectra":
        """Add the result of :func:`layer_batch_spectra`."""
        keep = lambda e: np.asarray(e, dtype=self.store_dtype)  # noqa: E731
        for k in HEAD_SPECTRA:
            for h, e in enumerate(r["heads"][k]):
                self.heads[k][h].append(keep(e))
        for k in LAYER_SPECTRA:
            self.layer[k].append(keep(r["layer"][k]))
        for h in range(self.n_heads):
            self.removed[h].append(keep(r["removed"][h]))
            self.removed_ge[h].append(keep(r["removed_ge"][h]))
        self.gram = self.gram + r["gram"]
        self.boot_cka = self.boot_cka + r["boot_cka"]
        self._departures.clear()
        self.order.append(np.asarray(r["order"], dtype=np.int64))
        self.lengths.append(np.asarray(r["lengths"], dtype=np.int64))
        self.corpus_order.append(np.asarray(r.get("corpus_order", r["order"]), dtype=np.int64))
        self.corpus_lengths.append(np.asarray(r.get("corpus_lengths", r["lengths"]), dtype=np.int64))
        return self

    @property
    def n_texts(self) -> int:
        """The spectra texts pooled (:func:`layer_batch_spectra`)."""
        return int(sum(len(o) for o in self.order))

    def corpus_texts(self) -> tuple[np.ndarray, np.ndarray]:
        """Positions and real tokens of every text the step saw (spectra texts or not), in pooling order."""
        cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.int64)  # noqa: E731
        return cat(self.corpus_order), cat(self.corpus_lengths)

    def merge(self, other: "LayerSpectra") -> "LayerSpectra":
        out = LayerSpectra(self.n_heads, self.store_dtype, head_dim=self.head_dim or other.head_dim,
                           d_out=self.d_out or other.d_out)
        for k in HEAD_SPECTRA:
            out.heads[k] = [a + b for a, b in zip(self.heads[k], other.heads[k])]
        for k in LAYER_SPECTRA:
            out.layer[k] = self.layer[k] + other.layer[k]
        out.removed = [a + b for a, b in zip(self.removed, other.removed)]
        out.removed_ge = [a + b for a, b in zip(self.removed_ge, other.removed_ge)]
        out.gram = self.gram + other.gram
        out.order, out.lengths = self.order + other.order, self.lengths + other.lengths
        out.corpus_order = self.corpus_order + other.corpus_order
        out.corpus_lengths = self.corpus_lengths + other.corpus_lengths
        out.boot_cka = self.boot_cka + other.boot_cka
        return out

    def text_index(self, column_of, layer: bool = False) -> np.ndarray:
        """The text of every pooled eigenvalue (in pooling order, i.e. before the sort of :meth:`head`), as
        ``column_of(order) -> (B,)`` columns (e.g. of a bootstrap weight matrix): each text's column is
        repeated over its ``min(l_b - 1, width)`` eigenvalues (``width``: ``d_out`` for a layer spectrum,
        the head width otherwise)."""
        width = self.d_out if layer else self.head_dim
        cols = [np.repeat(column_of(o), np.minimum(n - 1, width).clip(min=0))
                for o, n in zip(self.order, self.lengths)]
        return np.concatenate(cols) if cols else np.zeros(0, np.int64)

    def departures(self, h: int) -> tuple[dict, dict]:
        """Head ``h``'s departure from its Gaussian equivalent and its null head's from theirs
        (:func:`..statistics.selection.spectral_departure` of the pooled spectra: ``w1_rel``, ``ks``, ...)."""
        return (sel.spectral_departure(self.head("act", h), self.head("ge", h)),
                sel.spectral_departure(self.head("null", h), self.head("nullge", h)))

    def departure_replicates(self, column_of, w: np.ndarray, key=None, heads=None) -> tuple[np.ndarray, np.ndarray]:
        """Bootstrap replicates ``(n_boot, H)`` of each head's departure from its Gaussian equivalent
        (``spec_w1_rel``: W1 over the equivalent's mean eigenvalue) and of its null head's, each pooled
        eigenvalue weighted by its text's weight ``w[:, column_of(order)]``
        (:func:`..statistics.bootstrap.weighted_relative_w1`). ``key``: what identifies the texts' weights
        (``(seed, n_boot)`` of :func:`..statistics.bootstrap.weights`, drawn per text): a second call with the
        same key returns the first's arrays (the spectra plan's prediction and the tables ask for the same).
        ``heads``: only these heads, ``(n_boot, len(heads))`` (not cached)."""
        if key is not None and heads is None and key in self._departures:
            return self._departures[key]
        ih = self.text_index(column_of)
        rel = lambda a, b, h: weighted_relative_w1(self.pooled(self.heads[a][h]), self.pooled(self.heads[b][h]),  # noqa: E731
                                                   ih, w)
        which = range(self.n_heads) if heads is None else [int(h) for h in heads]
        out = (np.stack([rel("act", "ge", h) for h in which], 1),
               np.stack([rel("null", "nullge", h) for h in which], 1))
        if heads is not None:
            return out
        if key is not None:
            self._departures[key] = out
        return out

    @staticmethod
    def pooled(arrays: list) -> np.ndarray:
        """Concatenation of per-batch arrays in pooling order (unsorted), float64."""
        return np.concatenate(arrays).astype(np.float64) if arrays else np.zeros(0)

    @staticmethod
    def _cat(arrays: list) -> np.ndarray:
        return np.sort(np.concatenate(arrays).astype(np.float64)) if arrays else np.zeros(0)

    def head(self, key: str, h: int) -> np.ndarray:
        """Pooled eigenvalues of head ``h`` for ``key`` (sorted)."""
        return self._cat(self.heads[key][h])

    def of_layer(self, key: str) -> np.ndarray:
        return self._cat(self.layer[key])

    def without(self, h: int, ge: bool = False) -> np.ndarray:
        """The layer's pooled spectrum without head ``h`` (its Gaussian equivalent's when ``ge``)."""
        return self._cat((self.removed_ge if ge else self.removed)[h])
