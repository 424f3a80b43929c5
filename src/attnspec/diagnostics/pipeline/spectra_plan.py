"""Which texts' output spectra step 3 takes (the *spectra texts*), from the option ``spectra_texts``.

The eigensolves of step 3, about ``4 H + 3`` per text and layer (``6 H + 3`` with ``removal_spectra='exact'``),
are most of a diagnosis' cost, while the spectral columns need far fewer texts than the fits and the dependence
statistics. The spectra texts are the
first ``n`` corpus positions in the corpus' seeded order (:func:`.removal_plan.sample_texts`: samples of one
seed are nested, and the removal samples are taken in the same order):

* an integer ``n``: those ``n`` texts;
* ``'all'``: every text;
* ``'auto'`` (the default): half the corpus (:data:`FIRST_SHARE`), at least :data:`START` texts, and enough
  that every pooled head spectrum holds :data:`MIN_EIGENVALUES` eigenvalues (a text of ``l`` tokens adds
  ``min(l - 1, d_head)``); then,
  when the heads' selection verdicts are not *predicted* to agree with those of the whole corpus on at least
  :data:`TARGET` of the heads, one more stage, up to the size predicted to reach it (the whole corpus beyond
  :data:`GROW_AT_MOST` of it).

**Why half, and one jump.** A text of a later stage costs about four times what it costs in the first (MiniLM,
256 texts: 28 against 7 ms): the first pass computes every text's attention rows and contexts for the
dependence statistics anyway, a later stage reads its batches again and recomputes them. Doubling from 92
texts took 8.5 s where every text took 8.0 s; half the corpus with a single jump keeps the saving of the first
stage and pays the recomputation once at most.

**The floor.** The verdict prediction alone lets the ranking of heads near the null move: on the planted
models of ``benchmarks/bench_validity.py`` (head width 16, texts of about 25 tokens: 32 texts give 512
eigenvalues) 32 of 64 texts changed the AUC of ``selection_score`` for per-query heads (a property it does not
rank, near chance) by up to 0.14 while the verdicts held; on MiniLM (32 texts, about 900 eigenvalues) the
selection score ranked heads at Spearman 0.96 against all 64 texts, on Gemma 3 270M (32 texts of 128 tokens,
about 4,000 eigenvalues) at 0.996.

**The prediction.** A head's ``selection`` verdict is open (``undetermined``) while the 95 % bootstrap interval
of its ``selection_score`` contains the threshold. A bootstrap interval over texts narrows like
``sqrt(n / N)`` from ``n`` to ``N`` texts, so a head open on ``n`` texts whose interval, shrunk about its
score by ``sqrt(n / N)``, excludes the threshold is predicted to be decided on the whole corpus, from
``n (w / delta)^2`` texts on (``w`` the interval's half-width on the threshold's side, ``delta`` the score's
distance to the threshold); the predicted agreement is one minus the share of heads open at ``n`` and decided on
the whole corpus (dead heads and layers under ``min_tokens`` stay undetermined whatever the texts). A decided
head is predicted to stay decided. On MiniLM's 256 built-in texts the
prediction at 32 / 64 / 128 texts was 0.81 / 0.90 / 0.96 against a realized agreement of 0.75 / 0.89 / 0.94
with the diagnosis of all 256 (every change one between a decided verdict and ``undetermined``).

Every stage after the first adds the spectra of its new texts only (the batches that hold them, read again
from the forward cache): a text's spectra do not depend on which other texts are taken (per-text draws).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..statistics import selection as sel
from ..statistics.bootstrap import LEVEL, interval, supports_intervals, weights
from .removal_plan import sample_texts, text_order

__all__: list[str] = []        # internal: the plan of step 3 (the option is DiagnoseOptions.spectra_texts)

#: ``spectra_texts='auto'``: texts of the first stage.
START = 32
#: ``spectra_texts='auto'``: predicted share of heads whose selection verdict agrees with the whole corpus'.
TARGET = 0.95
#: ``spectra_texts='auto'``: fewest eigenvalues of each pooled head spectrum in the first stage.
MIN_EIGENVALUES = 2048
#: ``spectra_texts='auto'``: the first stage's share of the corpus (at least :data:`START` texts).
FIRST_SHARE = 0.5
#: ``spectra_texts='auto'``: a second stage predicted to need more than this share of the corpus takes all of it.
GROW_AT_MOST = 0.75


@dataclass
class SpectraPlan:
    """The spectra texts of one diagnosis: ``rule`` (``'auto'``, ``'fixed'`` or ``'all'``), the sizes of the
    samples taken so far (``stages``, nested) and the last predicted agreement (``'auto'``).

    Examples
    --------
    >>> import numpy as np
    >>> from attnspec.diagnostics import DiagnoseOptions
    >>> plan = SpectraPlan.of(100, DiagnoseOptions(seed=3), eigenvalues=np.full(100, 64))    # 64 a text: half
    >>> plan.rule, plan.stages, len(plan.texts()), plan.texts() == sample_texts(100, 50, 3)
    ('auto', [50], 50, True)
    >>> SpectraPlan.of(100, DiagnoseOptions(seed=3), eigenvalues=np.full(100, 24)).stages   # 2,048 / 24: 86 texts
    [86]
    >>> SpectraPlan.of(20, DiagnoseOptions()).texts() is None          # fewer texts than the first stage: all
    True
    >>> SpectraPlan.of(100, DiagnoseOptions(spectra_texts=10)).summary()
    {'rule': 'fixed', 'texts_used': 10, 'stages': [10], 'predicted_agreement': None, 'target': None}
    """

    n_texts: int
    seed: int
    rule: str
    stages: list = field(default_factory=list)
    predicted: float | None = None

    @classmethod
    def of(cls, n_texts: int, opts, eigenvalues: np.ndarray | None = None) -> "SpectraPlan":
        """The first stage for ``n_texts`` corpus texts and the options ``opts`` (:class:`~attnspec.DiagnoseOptions`);
        ``eigenvalues[t]``: the eigenvalues the text at corpus position ``t`` adds to a head spectrum of the
        narrowest layer, ``min(l_t - 1, d_head)`` (``'auto'``'s floor; None: no floor)."""
        st = opts.spectra_texts
        auto = st == "auto" and supports_intervals(n_texts, opts.n_boot)
        if auto:
            n = max(START, math.ceil(FIRST_SHARE * n_texts))
            if eigenvalues is not None:
                pooled = np.cumsum(np.asarray(eigenvalues)[text_order(n_texts, opts.seed)])
                n = max(n, int(np.searchsorted(pooled, MIN_EIGENVALUES)) + 1)
        else:
            n = n_texts if st in ("all", "auto") else int(st)
        n = min(n, n_texts)
        return cls(n_texts, opts.seed, "all" if n >= n_texts else "auto" if auto else "fixed", [n])

    def texts(self) -> frozenset | None:
        """The spectra texts so far (corpus positions; None: every text)."""
        return sample_texts(self.n_texts, self.stages[-1], self.seed)

    def grow(self, spectra: list, fit_sums: list, opts) -> frozenset | None:
        """The texts of the second stage (None: stop), from the merged spectra and fit sums of the first."""
        n = self.stages[-1]
        if self.rule != "auto" or n >= self.n_texts or len(self.stages) > 1:
            return None
        heads, needs = closing_heads(spectra, fit_sums, opts.seed, opts.n_boot, opts.threshold, opts.min_tokens,
                                     n, self.n_texts)
        self.predicted = 1.0 - len(needs) / max(heads, 1)
        if self.predicted >= TARGET:
            return None
        allowed = int(math.floor((1.0 - TARGET) * heads + 1e-9))            # heads that may still change
        need = math.ceil(np.sort(needs)[::-1][allowed])                     # the (allowed + 1)-th largest need
        grown = self.n_texts if need > GROW_AT_MOST * self.n_texts else max(need, n + 1)
        self.predicted = 1.0 - int((np.asarray(needs) > grown).sum()) / max(heads, 1)
        before = self.texts()
        self.stages.append(min(grown, self.n_texts))
        after = self.texts()
        return (after if after is not None else frozenset(range(self.n_texts))) - before

    def summary(self) -> dict:
        """``rule``, ``texts_used``, ``stages``, ``predicted_agreement`` (``'auto'``: at the last stage, 1 with every
        text) and ``target``."""
        auto = self.rule == "auto"
        done = self.stages[-1] >= self.n_texts
        return {"rule": self.rule, "texts_used": int(self.stages[-1]), "stages": [int(s) for s in self.stages],
                "predicted_agreement": (1.0 if done else round(float(self.predicted), 4)) if auto else None,
                "target": TARGET if auto else None}


def closing_heads(spectra: list, fit_sums: list, seed: int, n_boot: int, threshold: float, min_tokens: int,
                  n_used: int, n_texts: int, level: float = LEVEL) -> tuple[int, list]:
    """The heads whose selection verdict is open on ``n_used`` spectra texts and predicted to be decided on all
    ``n_texts`` (module docstring): ``(heads in all, the texts each of them needs)``.

    Parameters
    ----------
    spectra, fit_sums : list
        Per layer the merged :class:`.spectra.LayerSpectra` of the spectra texts and :class:`.fit.LayerFitSums`.
    seed, n_boot : int
        The bootstrap's seed and replicates (the weights of the diagnosis' own intervals).
    threshold : float
        The selection threshold.
    min_tokens : int
        Fewest real tokens of a layer for a label.
    n_used, n_texts : int
        Spectra texts so far and texts of the corpus.
    level : float
        Interval level.

    Returns
    -------
    heads : int
    needs : list of float
        For each closing head, ``n_used (w / delta)^2``: the texts from which its interval is predicted to
        exclude the threshold (at most ``n_texts``).

    Examples
    --------
    On all texts nothing is open that more texts would close:

    >>> closing_heads([], [], 0, 200, 0.69, 400, n_used=64, n_texts=64)
    (0, [])
    """
    heads, needs = 0, []
    for sp, fs in zip(spectra, fit_sums):
        heads += sp.n_heads
        if n_used >= n_texts or fs.n_tokens < min_tokens or not sp.order:
            continue
        ids = np.unique(np.concatenate(sp.order))
        column = lambda order, ids=ids: np.searchsorted(ids, np.asarray(order, dtype=np.int64))  # noqa: E731
        d, d0 = sp.departure_replicates(column, weights(seed, ids, n_boot), key=(seed, n_boot))
        lo, hi = interval(sel.selection_score(d, d0), level)
        point = np.array([[d["w1_rel"] for d in sp.departures(h)] for h in range(sp.n_heads)])   # as the tables
        score = sel.selection_score(point[:, 0], point[:, 1])
        with np.errstate(invalid="ignore", divide="ignore"):
            open_now = np.isfinite(lo) & np.isfinite(hi) & (lo < threshold) & (hi >= threshold)
            half = np.where(score >= threshold, score - lo, hi - score)        # toward the threshold
            need = n_used * (half / np.abs(score - threshold)) ** 2
        closes = open_now & (need <= n_texts) & (fs.head_power() > 0)
        needs += [float(x) for x in need[closes]]
    return heads, needs
