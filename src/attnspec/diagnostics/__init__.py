"""Diagnosis of trained models: per layer and per head (docs/theory.md, section *From theory to diagnosis*).

``diagnose(model, tokenizer_or_inputs, texts)`` returns a :class:`Diagnosis` whose ``heads`` table has
one row per layer x head:

identification (:mod:`.identification`)
    ``score_scale`` (std of row-centered logits, the inverse temperature used), ``beta_hat``,
    ``alpha_hat`` (fit of ``l A - 1`` on standardized scores), ``alpha_null`` (Gaussian-score
    value ``sqrt(e^{s^2} - 1 - s^2)``), ``r2``; ``spec_w1``, ``spec_w1_rel``, ``spec_ks``,
    ``spec_outliers_per_text``, ``spec_m1``, ``spec_m1_ge``: centered output spectrum vs the fitted
    Gaussian equivalent's (:mod:`.spectral` gives the normalization);
selection (:mod:`.selection`)
    ``selection_score`` = log(departure / null departure), ``null_w1_rel``, ``diffuse``/``selection``;
    baselines ``entropy``, ``entropy_uniform``, ``entropy_ratio`` (Clark et al. 2019) and
    ``confidence`` (Voita et al. 2019);
dependence (:mod:`.dependence`)
    ``cka_mean``, ``cka_max``, ``cka_partner``, ``cka_null_mean``, ``cka_excess``, ``energy_share``;
    the ``pairs`` table; per layer ``free_defect_w1_rel``, ``interference``, GQA sharing columns;
removal (:mod:`.removal`)
    ``removal_spec_shift`` (a) and ``removal_spec_shift_ge`` (its Gaussian-equivalent, ``H - 1``-head
    prediction), ``removal_effect`` = ``loss_increase`` or ``embedding_shift`` (b),
    ``michel_importance`` / ``michel_importance_raw`` (c); Spearman correlations in ``summary``.
"""
from .entry import diagnose
from .result import Diagnosis

__all__ = ["diagnose", "Diagnosis"]
