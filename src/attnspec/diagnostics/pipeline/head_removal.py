"""Step 4, removal and importance: exact head removal, first-order effects and Michel et al. importance, as sums.

Every removal column is a ratio estimate ``R_h = sum_b e_{b,h} / sum_b n_b`` over texts ``b`` (``e`` the
text's effect: change of its summed NLL over ``n_b`` scored positions, or ``1 - cos`` with ``n_b = 1``).
:class:`RatioSums` keeps ``sum e, sum n, sum e^2, sum e n, sum n^2`` and the number of texts ``m`` per head,
so it merges by addition, and the standard error is the texts-as-clusters (delta-method) one

    SE(R_h)^2 = sum_b (e_{b,h} - R_h n_b)^2 / (m (m - 1) nbar^2),   nbar = sum_b n_b / m,

which accounts for the spread over texts and, within a text, over its (sampled) positions. Beside
them it keeps ``sum w e`` and ``sum w n`` for the Poisson bootstrap weights ``w`` of the texts
(:mod:`..statistics.bootstrap`, ``(n_boot, n_layers, H_max)``), whose ratios are the replicates of ``R_h``.
:class:`RemovalSums` holds the exact effects (zero and mean ablation), the first-order effects and the
Michel importance of every head.
"""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field, fields, replace
from typing import Callable, Sequence

import numpy as np
import torch

from ...models import ModelAdapter
from ...models.ablation import first_order, iter_removal_effects
from ..statistics.bootstrap import N_BOOT, interval, weighted, weights
from .removal_agreement import PerTextEffects, texts_needed
from ..options import MODES
from .removal_plan import EXACT_MODES, SAMPLE_ABOVE_PARAMS, RemovalPlan

__all__ = ["RatioSums", "RemovalSums", "removal_step", "resolve_mode", "screen_heads"]


@dataclass
class RatioSums:
    """Mergeable sums of a per-head ratio estimate (arrays ``(n_layers, H_max)``; 0 until updated).

    :meth:`mean` is ``R_h``, :meth:`se` its texts-as-clusters standard error and :meth:`interval` its
    bootstrap percentile interval (module docstring).

    Examples
    --------
    One head, three texts of one scored position each, effects 0.2, 0.4, 0.6:

    >>> import numpy as np
    >>> from attnspec.diagnostics.statistics.bootstrap import weights
    >>> e, n = np.array([[[0.2, 0.4, 0.6]]]), np.ones(3)          # (n_layers, H, B), (B,)
    >>> r = RatioSums().update(e, n, weights(0, [0, 1, 2], 50))
    >>> r.mean(), r.se().round(4)                                 # SE = std / sqrt(3)
    (array([[0.4]]), array([[0.1155]]))
    >>> RatioSums().update(e[..., :1], n[:1]).merge(RatioSums().update(e[..., 1:], n[1:])).mean()
    array([[0.4]])
    """

    e: np.ndarray | float = 0.0
    n: np.ndarray | float = 0.0
    e2: np.ndarray | float = 0.0
    en: np.ndarray | float = 0.0
    n2: np.ndarray | float = 0.0
    m: np.ndarray | float = 0.0
    be: np.ndarray | float = 0.0
    bn: np.ndarray | float = 0.0

    def update(self, e: np.ndarray, n: np.ndarray, w: np.ndarray | None = None) -> "RatioSums":
        """Add per-text effects ``e`` ``(n_layers, H, B)`` (NaN: head not measured) with normalizers ``n``
        ``(B,)``; ``w`` ``(n_boot, B)``: the texts' bootstrap weights."""
        ok = np.isfinite(e)
        e0, nb = np.where(ok, e, 0.0), ok * n
        self.e, self.n = self.e + e0.sum(-1), self.n + nb.sum(-1)
        self.e2, self.en, self.n2 = self.e2 + (e0 ** 2).sum(-1), self.en + (e0 * nb).sum(-1), self.n2 + (nb ** 2).sum(-1)
        self.m = self.m + ok.sum(-1)
        self.be = self.be + weighted(w, np.moveaxis(e0, -1, 0))
        self.bn = self.bn + weighted(w, np.moveaxis(nb, -1, 0))
        return self

    def merge(self, other: "RatioSums") -> "RatioSums":
        return RatioSums(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    @property
    def measured(self) -> np.ndarray:
        """Heads with at least one measured text."""
        return np.asarray(self.m) > 0

    def mean(self) -> np.ndarray:
        """``R_h`` (NaN where not measured)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.measured, np.asarray(self.e, float) / np.asarray(self.n, float), np.nan)

    def se(self) -> np.ndarray:
        """Standard error of ``R_h`` (NaN with fewer than two texts)."""
        R, m = self.mean(), np.asarray(self.m, float)
        with np.errstate(invalid="ignore", divide="ignore"):
            ss = np.maximum(self.e2 - 2 * R * self.en + R ** 2 * self.n2, 0.0)
            nbar = np.asarray(self.n, float) / m
            return np.where(m >= 2, np.sqrt(ss / (m * (m - 1))) / nbar, np.nan)

    def interval(self) -> tuple[np.ndarray, np.ndarray]:
        """Bootstrap percentile interval of ``R_h`` (:func:`..statistics.bootstrap.interval`; NaN with fewer than two
        measured texts or no replicates)."""
        if np.ndim(self.be) == 0:
            shape = np.shape(self.mean())
            return np.full(shape, np.nan), np.full(shape, np.nan)
        with np.errstate(invalid="ignore", divide="ignore"):
            reps = np.where(np.asarray(self.bn) > 0, self.be / np.where(np.asarray(self.bn) > 0, self.bn, 1.0), np.nan)
        lo, hi = interval(reps)
        ok = np.asarray(self.m) >= 2
        return np.where(ok, lo, np.nan), np.where(ok, hi, np.nan)


@dataclass
class RemovalSums:
    """Mergeable sums of step 4: exact (zero / mean ablation) and first-order effects, Michel importance.

    Examples
    --------
    Exact removal of each head of the tiny GPT-2 (change of the mean NLL per scored token), and its
    first-order prediction from one backward pass:

    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> ad, batch = tiny_causal_lm()
    >>> exact = RemovalSums().add_removal(ad, [batch], mean_ablation=False, means=None, max_tokens=10_000, n_boot=5)
    >>> exact.mean_effect().round(4)                              # (n_layers, H)
    array([[ 0.0079, -0.0033],
           [ 0.0024,  0.0064]])
    >>> fo = RemovalSums().add_first_order(ad, batch, seed=0, n_boot=5)
    >>> fo.first_order.mean().round(4), fo.importance().shape
    (array([[ 0.008 , -0.0029],
           [ 0.0029,  0.0068]]), (2, 2))
    """

    exact: RatioSums = field(default_factory=RatioSums)
    exact_mean: RatioSums = field(default_factory=RatioSums)
    first_order: RatioSums = field(default_factory=RatioSums)
    michel: np.ndarray | float = 0.0
    michel_texts: int = 0
    per_text: PerTextEffects | None = None
    model_nll: float = 0.0         # causal LMs: the unmodified model's summed NLL over the scored positions
    model_positions: float = 0.0   # ... and how many positions (:meth:`model_loss`)

    def add_removal(self, adapter: ModelAdapter, batches: Sequence[dict], mean_ablation: bool,
                    means: Sequence[torch.Tensor] | None, max_tokens: int, progress: Callable | None = None,
                    positions: int | None = None, seed: int = 0, heads_of: dict | None = None,
                    n_boot: int = N_BOOT, vocab_top: int | None = None, per_text: bool = False,
                    first_order: bool = False) -> "RemovalSums":
        """Exact removal (zero, and mean ablation when asked) of ``heads_of`` (default all) over ``batches``
        (LM loss on ``vocab_top`` words per position when given: :class:`attnspec.models.lm_head.TruncatedVocab`);
        ``per_text``: also keep each text's zero-ablation effects (:attr:`per_text`, for ``removal_texts='auto'``);
        ``first_order``: also :meth:`add_first_order` on the same batches, from the reference passes of the removal
        (one backward pass each; :func:`attnspec.models.ablation.reference_pass`)."""
        kw = dict(max_tokens=max_tokens, progress=progress, positions=positions, seed=seed, heads_of=heads_of,
                  vocab_top=vocab_top)
        ws = [weights(seed, b["order"], n_boot) for b in batches]
        if per_text and self.per_text is None:
            self.per_text = PerTextEffects()
        refs: list = []
        for (e, n), w, b in zip(iter_removal_effects(adapter, batches, on_reference=refs.append,
                                                     with_first_order=first_order, **kw), ws, batches):
            metric = refs.pop()
            self._add_reference(metric)
            if first_order:
                self._add_first_order(*metric.first_order, b, w)
            self.exact.update(e, n, w)
            if per_text:
                self.per_text.update(e, n, b["order"])
        if mean_ablation:
            for (e, n), w in zip(iter_removal_effects(adapter, batches, mode="mean", means=means, **kw), ws):
                self.exact_mean.update(e, n, w)
        return self

    def _add_reference(self, metric) -> None:
        if metric.kind == "causal-lm":
            self.model_nll += float(metric.ref.sum())
            self.model_positions += float(metric.counts().sum())

    def model_loss(self) -> float | None:
        """The unmodified model's mean NLL per scored position on the removal texts (nats; None when no causal-LM
        removal ran): a model that predicts its texts worse than a uniform guess (``log V``) is mis-loaded."""
        return self.model_nll / self.model_positions if self.model_positions else None

    def add_first_order(self, adapter: ModelAdapter, batch: dict, seed: int, n_boot: int = N_BOOT) -> "RemovalSums":
        """Michel importance and first-order effects of one batch."""
        return self._add_first_order(*first_order(adapter, batch, seed=seed), batch, weights(seed, batch["order"], n_boot))

    def _add_first_order(self, michel: np.ndarray, fo: np.ndarray, n: np.ndarray, batch: dict,
                         w: np.ndarray) -> "RemovalSums":
        self.michel = self.michel + np.nan_to_num(michel)
        self.michel_texts += int(batch["attention_mask"].shape[0])
        self.first_order.update(fo, n, w)
        return self

    def merge(self, other: "RemovalSums") -> "RemovalSums":
        pt = [p for p in (self.per_text, other.per_text) if p is not None]
        return RemovalSums(self.exact.merge(other.exact), self.exact_mean.merge(other.exact_mean),
                           self.first_order.merge(other.first_order), self.michel + other.michel,
                           self.michel_texts + other.michel_texts,
                           pt[0].merge(pt[1]) if len(pt) == 2 else (pt[0] if pt else None),
                           self.model_nll + other.model_nll, self.model_positions + other.model_positions)

    def mean_effect(self, mean_ablation: bool = False) -> np.ndarray:
        return (self.exact_mean if mean_ablation else self.exact).mean()

    def importance(self) -> np.ndarray:
        """Mean ``|dL/dxi_h|`` per text."""
        return np.asarray(self.michel, dtype=float) / max(self.michel_texts, 1)


def resolve_mode(removal: str | bool, adapter: ModelAdapter) -> str:
    """``removal`` as one of :data:`MODES`: True -> 'exact', False -> 'none', 'auto' -> 'sampled' for
    models above :data:`SAMPLE_ABOVE_PARAMS` parameters, else 'exact'.

    Parameters
    ----------
    removal : str or bool
        One of :data:`MODES`, ``'auto'``, or a bool.
    adapter : ModelAdapter
        The model (its parameter count decides ``'auto'``).

    Returns
    -------
    str

    Raises
    ------
    ValueError
        For any other value, naming the allowed ones.

    Examples
    --------
    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> ad, _ = tiny_causal_lm()
    >>> resolve_mode(True, ad), resolve_mode(False, ad), resolve_mode("auto", ad)   # a small model: exact
    ('exact', 'none', 'exact')
    >>> resolve_mode("all", ad)
    Traceback (most recent call last):
    ...
    ValueError: removal must be one of exact, sampled, screened, first-order, none, auto, got 'all'
    """
    if removal is True or removal is False:
        return "exact" if removal else "none"
    if removal == "auto":
        n = sum(p.numel() for p in adapter.model.parameters())
        return "sampled" if n > SAMPLE_ABOVE_PARAMS else "exact"
    if removal not in MODES:
        raise ValueError(f"removal must be one of {', '.join(MODES + ('auto',))}, got {removal!r}")
    return removal


def screen_heads(first_order_effect: np.ndarray, n_heads: Sequence[int], top: int | None, sample: int | None,
                 seed: int) -> tuple[dict[int, list[int]], np.ndarray]:
    """Heads to remove exactly in 'screened' mode: the ``top`` heads of largest ``|first-order effect|``
    and a seeded random ``sample`` of the others (so that the first-order ranking's agreement with exact
    removal is measured on heads it did not pick). Defaults: ``max(8, 5 %)`` of the heads each.

    Parameters
    ----------
    first_order_effect : numpy.ndarray, shape (n_layers, H_max)
        First-order effect of each head (NaN: not measured, ranked last).
    n_heads : sequence of int
        Heads per layer (entries beyond are padding).
    top, sample : int, optional
        Heads taken by rank and by a random draw among the rest.
    seed : int
        Seed of the draw.

    Returns
    -------
    heads_of : dict of int to list of int
        ``layer -> heads`` to remove exactly.
    code : numpy.ndarray of int, shape (n_layers, H_max)
        2 top, 1 sampled, 0 not removed.

    Examples
    --------
    >>> import numpy as np
    >>> fo = np.array([[0.5, -2.0, 0.1], [0.3, 0.05, np.nan]])   # layer 1 has 2 heads
    >>> heads_of, code = screen_heads(fo, [3, 2], top=2, sample=1, seed=0)
    >>> heads_of, code.tolist()                                  # the 2 largest |effects|, one drawn at random
    ({0: [0, 1, 2]}, [[2, 2, 1], [0, 0, 0]])
    """
    from ...seeding import seed_of
    valid = np.arange(first_order_effect.shape[1])[None] < np.asarray(n_heads)[:, None]
    flat = np.flatnonzero(valid.ravel())
    N = flat.size
    default = min(N, max(8, int(np.ceil(0.05 * N))))
    top = default if top is None else min(top, N)
    sample = default if sample is None else sample
    score = np.abs(np.nan_to_num(first_order_effect.ravel()[flat], nan=-np.inf))
    order = flat[np.argsort(-score, kind="stable")]
    rest = order[top:]
    rng = np.random.default_rng(seed_of(seed, 12))
    picked = rng.choice(rest, size=min(sample, rest.size), replace=False) if rest.size else rest
    code = np.zeros(first_order_effect.shape, int)
    code.ravel()[order[:top]] = 2
    code.ravel()[picked] = 1
    heads_of: dict[int, list[int]] = {}
    for i, h in zip(*np.nonzero(code)):
        heads_of.setdefault(int(i), []).append(int(h))
    return heads_of, code


def removal_step(plan: RemovalPlan, n_heads: Sequence[int],
                 start_first_order: Callable[[frozenset | None], Callable[[], RemovalSums]],
                 start_exact: Callable[[dict | None, frozenset | None], Callable[[], RemovalSums]], timings: dict, *,
                 gradient: bool, screen_top: int | None, screen_sample: int | None, seed: int, fuse: bool = False
                 ) -> tuple[RemovalSums, np.ndarray | None, RemovalPlan]:
    """Step 4 in any runner: first-order effects (when ``gradient`` or the mode needs them), then, in
    'screened' mode, the heads to remove chosen from the merged first-order effects of the whole corpus,
    and exact removal ('exact', 'sampled', 'screened'), as ``plan`` says (its texts, positions, words).
    An adaptive plan (``plan.target``: ``removal_texts='auto'``) then grows its sample of texts, stage by
    stage, until the heads' ranking is predicted to agree with the whole corpus' at ``plan.target``
    (:func:`.removal_agreement.texts_needed` on the per-text effects measured so far): each stage removes every
    head on the added texts only (the next texts of the seeded order) and merges them in.

    ``start_first_order(texts)`` and ``start_exact(heads_of, texts)`` start the work on the corpus positions
    ``texts`` (``None``: all) (one process: nothing yet; a cluster: submit the tasks) and return a function
    that waits for it and returns the merged :class:`RemovalSums` (with its per-text effects when the plan is
    adaptive); exact removal is started before first order is awaited, except in 'screened' mode, which needs
    it. ``fuse``: ``start_exact`` takes ``first_order=True`` (first order from the removal's reference passes,
    :meth:`RemovalSums.add_removal`), used by 'exact' and 'sampled' removal of every position. Returns
    ``(sums, screen code or None, plan)``, the plan with the texts used and the predicted agreement.

    Parameters
    ----------
    plan : RemovalPlan
    n_heads : sequence of int
        Heads per layer.
    start_first_order, start_exact : callable
        Start the work and return its waiting function (see above).
    timings : dict
        Gets ``'first_order'`` (seconds) when first order runs on its own.
    gradient : bool
        Compute first-order effects and Michel importance even when the mode does not need them.
    screen_top, screen_sample : int, optional
        :func:`screen_heads`' ``top`` and ``sample``.
    seed : int

    Returns
    -------
    tuple of (RemovalSums, numpy.ndarray or None, RemovalPlan)

    Examples
    --------
    Screening the tiny GPT-2: first order for every head, then exact removal of the top one and one drawn:

    >>> from attnspec.models.tiny import tiny_causal_lm
    >>> ad, batch = tiny_causal_lm()
    >>> plan = RemovalPlan.of("screened", n_texts=2, seed=0)
    >>> first = lambda texts: (lambda: RemovalSums().add_first_order(ad, batch, seed=0, n_boot=5))
    >>> exact = lambda heads_of, texts: (lambda: RemovalSums().add_removal(
    ...     ad, [batch], False, None, 10_000, positions=plan.positions, heads_of=heads_of, n_boot=5))
    >>> timings = {}
    >>> sums, code, _ = removal_step(plan, [2, 2], first, exact, timings, gradient=True, screen_top=1,
    ...                              screen_sample=1, seed=0)
    >>> code.tolist(), plan.positions, list(timings)
    ([[2, 1], [0, 0]], 32, ['first_order'])
    >>> np.isfinite(sums.mean_effect()).tolist()                 # measured exactly: the screened heads only
    [[True, True], [False, False]]
    """
    mode = plan.mode
    t0 = time.perf_counter()
    need_fo = gradient or mode in ("screened", "first-order")
    fused = fuse and need_fo and mode in ("exact", "sampled") and plan.positions is None
    exact = functools.partial(start_exact, first_order=True) if fused else start_exact
    fo = start_first_order(plan.texts) if need_fo and not fused else None
    rem, code, heads_of, ex = RemovalSums(), None, None, None
    if mode == "screened":
        rem = fo()
        timings["first_order"] = time.perf_counter() - t0
        heads_of, code = screen_heads(rem.first_order.mean(), n_heads, screen_top, screen_sample, seed)
    if mode in EXACT_MODES:
        ex = exact(heads_of, plan.texts)
    if mode != "screened" and fo is not None:
        rem = fo()
        timings["first_order"] = time.perf_counter() - t0
    if ex is not None:
        rem = rem.merge(ex())
    if plan.target is not None and mode in EXACT_MODES and heads_of is None:
        rem, plan = _grow(plan, rem, start_first_order if need_fo and not fused else None, exact, seed)
    return rem, code, plan


def _grow(plan: RemovalPlan, rem: RemovalSums, start_first_order: Callable | None, start_exact: Callable,
          seed: int) -> tuple[RemovalSums, RemovalPlan]:
    """The stages of an adaptive plan after the first (see :func:`removal_step`)."""
    def every(p: RemovalPlan) -> frozenset:
        return frozenset(range(p.n_corpus)) if p.texts is None else p.texts
    while True:
        x, n = rem.per_text.matrix()
        k_need, now = texts_needed(x, n, plan.n_corpus, plan.target, seed)
        if k_need <= plan.n_texts or plan.n_texts >= plan.n_corpus:
            return rem, replace(plan, predicted=now)
        new = plan.grown(k_need)
        extra = every(new) - every(plan)
        waits = [start_exact(None, extra)] + ([start_first_order(extra)] if start_first_order is not None else [])
        for wait in waits:
            rem = rem.merge(wait())
        plan = new
