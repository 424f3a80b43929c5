"""The column vocabulary of a diagnosis: one place that the tables, the report and ``docs/columns.md`` read.

``COLUMNS[table][name]`` is the meaning of column ``name`` of table ``table`` (``'heads'``,
``'layers'``, ``'pairs'``); :data:`HEATMAPS` lists the head columns the report draws as layer x head
heat maps. :func:`markdown` renders the vocabulary (``docs/columns.md`` is its output; a test keeps
them equal).
"""
from __future__ import annotations

__all__ = ["COLUMNS", "HEATMAPS", "describe", "markdown"]

_SELECTION = (
    "log of spec_w1_rel over the same quantity for a null head (same values, W_O, masks and temperature, "
    "random scores Q K^T/sqrt(d) of the theory's model), both floored at 1e-5, the smallest departure float32 "
    "spectra resolve (precision under last-bit differences of the inputs: about 1e-7 / min(D, D_null)). About 0 "
    "for noise-like heads; positive for "
    "heads whose attention is structured beyond their temperature.")

_LO = ("Lower end of the 95 % bootstrap interval of {} (Poisson bootstrap over texts, 200 replicates by "
       "default, percentile interval).")
_HI = "Upper end of the 95 % bootstrap interval of {}."
_SPEC_BOOT = (" Each eigenvalue of the pooled spectra carries its text's weight; the fitted Gaussian equivalents and "
              "null heads are held fixed.")

_STACK = ("The stack of the layer: encoder or decoder (an encoder-decoder's own; otherwise decoder for causal "
          "attention, encoder for bidirectional).")
_ROLE = ("self (queries, keys and values from one sequence) or cross (an encoder-decoder's decoder attending to the "
         "encoder output: keys and values from the encoder).")

_CKA_BOOT = (" Linearized: each text's first-order influence on the CKA numerators is re-weighted; the null "
             "(its expectation under free rotations) is held fixed.")

COLUMNS: dict[str, dict[str, str]] = {
    "heads": {
        "layer": "Layer index (0-based).",
        "head": "Query head index within the layer.",
        "stack": _STACK,
        "role": _ROLE,
        "kv_group": "Key/value head this query head reads (grouped-query attention; = head without sharing).",
        "attention": ("Mask of the layer: bidirectional or causal (cross (keys: encoder) for cross-attention), with "
                      "the sliding window if any."),
        "n_tokens": "Real tokens the head's statistics were computed from (all texts).",
        "score_scale": "Standard deviation of the head's row-centered logits: the inverse temperature it actually uses.",
        "score_scale_lo": _LO.format("score_scale") + (" The head's temperature as the RMS of its logits: on planted "
                                                        "heads it covers the planted temperature 97, 97, 94 and 92 "
                                                        "times in 100 at 0.5, 1, 2 and 3."),
        "score_scale_hi": _HI.format("score_scale"),
        "beta_hat": ("Least-squares slope of l*A_ij - 1 on the standardized scores; a random head on long texts has "
                     "beta_hat = score_scale (on short texts and hot heads less: see beta_null)."),
        "beta_hat_lo": _LO.format("beta_hat"),
        "beta_hat_hi": _HI.format("beta_hat"),
        "beta_null": ("beta_hat of the layer's null head at this head's score scale (random Gaussian scores, same masks "
                      "and text lengths): what the fit returns for a random head here. score_scale - beta_null is the "
                      "finite-size bias of beta_hat (25 % at score scale 2 on 8-64 built-in texts)."),
        "beta_null_keys": ("beta_hat of this head's key null: a random query against the head's own keys, each row "
                           "rescaled to the head's own row RMS, averaged with its reflection. It keeps repeated and "
                           "correlated keys, which lower beta_hat at score scale >= 2 on short texts (a row with "
                           "fewer distinct keys saturates sooner)."),
        "beta_corrected": ("The head's inverse temperature read from its linear response: (beta_hat + beta_hat of the "
                           "reflected head, logits -S) / 2 + score_scale - null, the slope without the skewness of the "
                           "head's logits and with the finite-row bias of a null head at the same row temperatures "
                           "removed (the key null, beta_null_keys, when the keys are recorded; else the Gaussian null "
                           "averaged the same way). Equal to score_scale for a head whose queries meet its keys at "
                           "random; on planted random heads 0.2-0.4 % below it (sd 0.3-0.7 %)."),
        "beta_corrected_lo": ("Lower end of the 95 % interval of the head's inverse temperature: the lower of the "
                              "percentile bootstrap lower ends of beta_corrected (its three terms re-weighted together) "
                              "and of score_scale. The hull of the two intervals holds both readings of the "
                              "temperature, which agree for random heads and differ by a structured head's departure "
                              "from its null. On planted heads it covers the planted temperature 97, 97, 94 and 95 "
                              "times in 100 at 0.5, 1, 2 and 3 (beta_corrected's own interval about 89, 87, 88 and 91: "
                              "the bootstrap over texts cannot see a head's fixed departure from its key null)."),
        "beta_corrected_hi": "Upper end of that interval: the higher of the two upper ends.",
        "alpha_hat": "Residual standard deviation of that fit: the size of the nonlinear remainder.",
        "alpha_null": "Gaussian-score value of alpha at this score scale, sqrt(e^{s^2} - 1 - s^2).",
        "r2": "Share of the variance of l*A - 1 explained by linear mixing of the scores.",
        "spec_w1": "W1 distance between the head's centered output spectrum and its fitted Gaussian equivalent's.",
        "spec_w1_rel": ("spec_w1 over the equivalent's mean eigenvalue (the equivalent: same inputs, values and W_O, "
                        "attention replaced by (11^T + beta_hat S + alpha_hat Z)/l)."),
        "spec_w1_rel_lo": _LO.format("spec_w1_rel") + _SPEC_BOOT,
        "spec_w1_rel_hi": _HI.format("spec_w1_rel"),
        "spec_ks": "Kolmogorov-Smirnov distance between the same two spectra.",
        "spec_outliers_per_text": "Eigenvalues above the equivalent's largest, per text.",
        "spec_m1": "Mean eigenvalue of the head's centered output spectrum.",
        "spec_m1_ge": "Mean eigenvalue of its Gaussian equivalent's spectrum.",
        "null_w1_rel": "spec_w1_rel of the null head (random scores at the head's temperature).",
        "selection_score": _SELECTION,
        "selection_score_lo": _LO.format("selection_score") + _SPEC_BOOT,
        "selection_score_hi": _HI.format("selection_score"),
        "selection": ("Shared-target selection (every query attending the same few keys: sinks, [CLS], punctuation), "
                      "a test against the 95 % interval of selection_score: selective (lower bound >= threshold, "
                      "log 2; nominal false-positive rate 2.5 % for a head at the threshold), diffuse (upper bound below "
                      "the threshold, score_scale <= 1.5), sparse (upper bound below, score_scale > 1.5: hot attention "
                      "without shared targets; a head whose every query picks its own key by a rule, such as a "
                      "previous-token head, is sparse here and selective in query_selection), or undetermined "
                      "(the interval contains the threshold, or fewer real tokens than min_tokens, 400 by default)."),
        "query_selection_score": (
            "Per-query selection: the excess fraction (O - E) / (N - E) of the head's best rule, where O is the attention "
            "mass on the rule's keys (offset d: key i + d, d in -8..8; same token; induction: the token after an "
            "earlier occurrence of the query's token), E its exact expectation under the Gaussian-equivalent null "
            "(the null's weights are exchangeable over the allowed keys at every temperature: E = sum_i m_i |S_i| / n_i) "
            "and N the most the head could put there, all among the real keys (special tokens and each text's first "
            "token are sinks, left to selection), queries weighted by their mass m_i on real keys. 1: every query on "
            "its rule's key; about 0 for a random head at any temperature. The best rule is chosen on the whole "
            "corpus among rules that apply to at least 100 queries (fewer queries: among the rules that apply, and the "
            "verdict is undetermined)."),
        "query_selection_score_lo": _LO.format("query_selection_score") + " The rule is held fixed.",
        "query_selection_score_hi": _HI.format("query_selection_score"),
        "query_selection_kind": "positional (an offset rule), content (same token or induction) or none (no rule applies).",
        "query_selection_rule": "The best rule: 'offset d', 'same token' or 'induction' ('none' when none applies).",
        "previous_token_excess": ("The excess fraction of the previous-token rule (offset -1), as query_selection_score "
                                  "but whatever the head's best rule: the null-calibrated previous-token score. 0 where "
                                  "the rule applies to no query."),
        "induction_excess": ("The excess fraction of the induction rule (key: the token after an earlier occurrence of "
                             "the query's token), whatever the head's best rule: the null-calibrated induction score. "
                             "0 where the rule applies to no query (inputs without tokens, texts without repeats)."),
        "query_selection": ("Verdict, a test against the 95 % interval of query_selection_score: selective (lower bound "
                            ">= 0.1, a tenth of the attention the rule could hold beyond chance), not selective (upper "
                            "bound below 0.1), or undetermined (the interval contains 0.1, fewer than min_tokens "
                            "counted queries, or no rule applies to 100 queries)."),
        "selection_replicates": ("Bootstrap replicates behind the selection_score interval: n_boot (200 by "
                                 "default), or 2,000 where an end of the n_boot replicates' interval lay within four "
                                 "Monte-Carlo errors of the threshold, recomputed so that the verdict does not hang on "
                                 "the bootstrap's draw (the first n_boot replicates are the same; replicates.npz keeps "
                                 "those)."),
        "roles": ("Every rule of roles.csv whose verdict is selective, in the rules' order, joined by '; ' (empty when "
                  "none): the head's roles, e.g. 'offset -1; sink'. Family-wise: the simultaneous intervals over a "
                  "head's rules give a head whose every rule is below the margin any role with probability about "
                  "2.5 %."),
        "diffuse": "selection == 'diffuse'.",
        "dead": ("The head's output is zero (a pruned head: its W_O or V slice is zero). Its spectral columns and "
                 "their intervals are 0, selection is undetermined, and its removal effect is 0."),
        "entropy": "Clark et al. (2019): mean over real query tokens of the attention entropy.",
        "entropy_uniform": "Mean of log(number of attended tokens): the entropy of uniform attention.",
        "entropy_ratio": "Mean of entropy / log(number of attended tokens) (1 = uniform).",
        "confidence": "Voita et al. (2019): mean over real, non-special query tokens of the largest attention weight.",
        "cka_mean": "Mean linear CKA (Kornblith et al. 2019) between this head's centered contexts and the other heads'.",
        "cka_max": "Largest CKA with another head of the layer.",
        "cka_partner": "The head with that largest CKA (-1 for a single-head layer).",
        "cka_null_mean": ("cka_mean expected after independent Haar rotations of every head (independent heads, same "
                          "size), in closed form (pairs table, cka_null)."),
        "cka_excess": "cka_mean - cka_null_mean.",
        "cka_excess_lo": _LO.format("cka_excess") + _CKA_BOOT,
        "cka_excess_hi": _HI.format("cka_excess"),
        "dependence": ("Verdict on the head's pairs (pairs table): dependent when one of its pairs is dependent, "
                       "independent when all are, else undetermined (also for a single-head layer)."),
        "dependence_partner": ("The partner of the head's dependent pair that clears the margin by most; -1 when the "
                               "head is not dependent."),
        "energy_share": "Share of the layer's output energy sum_h ||Y_h||^2 carried by this head.",
        "removal_spec_shift": ("(a) W1 between the layer's output spectrum with and without the head, over its mean "
                               "eigenvalue. By default (removal_spectra='ritz') each text's spectrum without the head "
                               "is taken as Rayleigh-Ritz values on blocks of 32 of the layer's eigenvectors: exact to "
                               "first order, in the mean eigenvalue and for texts of at most 32 tokens; 'exact' "
                               "diagonalizes it per head and text."),
        "removal_spec_shift_lo": _LO.format("removal_spec_shift") + _SPEC_BOOT,
        "removal_spec_shift_hi": _HI.format("removal_spec_shift"),
        "removal_spec_shift_ge": ("(a) The same shift for the layer's Gaussian equivalent losing the same head: the "
                                  "Gaussian-equivalent prediction for the H-1 remaining heads."),
        "removal_effect": ("(b) Exact ablation (head context set to 0): next-token loss increase in nats per token "
                           "(causal LM) or mean 1 - cos of mean-pooled final hidden states (encoder)."),
        "loss_increase": "removal_effect of a causal LM (nats per predicted token).",
        "embedding_shift": "removal_effect of an encoder (mean 1 - cos of the pooled embedding).",
        "removal_effect_mean": "(b) The same with the head's context replaced by its mean over real tokens (mean ablation).",
        "removal_effect_se": ("Standard error of removal_effect over texts (texts as clusters, so the spread over sampled "
                              "positions within a text is included); NaN for heads not removed exactly."),
        "removal_effect_mean_se": "Standard error of removal_effect_mean.",
        "removal_effect_lo": _LO.format("removal_effect") + " NaN for heads not removed exactly.",
        "removal_effect_hi": _HI.format("removal_effect"),
        "removal_effect_mean_lo": _LO.format("removal_effect_mean"),
        "removal_effect_mean_hi": _HI.format("removal_effect_mean"),
        "removal_first_order": ("(d) First-order removal effect from one backward pass: -dNLL/dxi_h per predicted token "
                                "(causal LM) or (1/2)(probe derivative)^2 per text (encoder), same units as removal_effect."),
        "removal_first_order_se": "Standard error of removal_first_order over texts.",
        "removal_first_order_lo": _LO.format("removal_first_order"),
        "removal_first_order_hi": _HI.format("removal_first_order"),
        "removal_estimate": ("Best available removal effect: removal_effect where the head was removed exactly, else "
                             "removal_first_order (modes 'screened' and 'first-order')."),
        "removal_estimate_lo": _LO.format("removal_estimate") + " From the source named in removal_source.",
        "removal_estimate_hi": _HI.format("removal_estimate"),
        "removal_source": "Where removal_estimate comes from: 'exact' or 'first-order'.",
        "michel_importance": ("(c) Michel et al. (2019) E_x |dL/dxi_h| from one backward pass, normalized per layer "
                              "(l2); for encoders L is a random projection of the pooled embedding."),
        "michel_importance_raw": "(c) michel_importance before the per-layer normalization (comparable across layers).",
    },
    "layers": {
        "layer": "Layer index (0-based).",
        "stack": _STACK,
        "role": _ROLE,
        "attention": ("Mask of the layer: bidirectional or causal (cross (keys: encoder) for cross-attention), with "
                      "the sliding window if any."),
        "n_heads": "Query heads.",
        "n_kv_heads": "Key/value heads (fewer than n_heads: grouped-query attention).",
        "head_dim": "Per-head value width.",
        "d_out": "Output width of the output projection.",
        "theory_applies": ("Bidirectional self-attention and no binding window: the full-attention theory applies as "
                           "stated."),
        "window_binds": "A sliding window shorter than the longest text.",
        "value_power": "Value-path power c of the layer (sum over heads of the mean squared entry of P V_h W_O^h).",
        "spec_m1": "Mean eigenvalue of the layer's centered output spectrum.",
        "ge_m1": "Mean eigenvalue of the layer's Gaussian equivalent's spectrum.",
        "ge_w1_rel": "W1 between the layer's spectrum and its Gaussian equivalent's, over the latter's mean eigenvalue.",
        "ge_ks": "KS distance between the same two spectra.",
        "free_defect_w1_rel": ("W1 between the layer's spectrum and the free sum of its heads (each head's context "
                               "Haar-rotated: same per-head spectra, no dependence), over the free sum's mean eigenvalue."),
        "free_defect_ks": "KS distance between the same two spectra.",
        "free_m1": "Mean eigenvalue of the free sum's spectrum.",
        "interference": "||sum_h Y_h||^2 / sum_h ||Y_h||^2 - 1: share of output energy in cross terms between heads.",
        "cka_mean": "Mean CKA over head pairs.",
        "cka_null_mean": "Mean null CKA over head pairs.",
        "cka_shared_kv_mean": "Mean CKA over pairs sharing a key/value head.",
        "cka_unshared_kv_mean": "Mean CKA over pairs not sharing a key/value head.",
        "beta_hat_mean": "Mean beta_hat of the layer's heads.",
        "score_scale_mean": "Mean score_scale of the layer's heads.",
        "n_diffuse": "Heads labelled diffuse.",
        "n_selective": "Heads labelled selective.",
        "n_sparse": "Heads labelled sparse.",
        "n_undetermined": "Heads left undetermined (too few tokens, or an interval that contains the threshold).",
        "dependence_margin": ("Margin tau of the dependence verdict: 0.1 (bidirectional or cross-attention) or 0.6 "
                              "(causal self-attention)."),
        "cka_excess_background": "Median cka_excess over the layer's pairs that do not share a key/value head.",
        "n_dependent_pairs": "Pairs labelled dependent.",
        "n_dependent_heads": "Heads in at least one dependent pair.",
    },
    "pairs": {
        "layer": "Layer index.",
        "stack": _STACK,
        "role": _ROLE,
        "head_a": "First head of the pair.",
        "head_b": "Second head of the pair.",
        "cka": "Linear CKA of the two heads' centered contexts (1: equal up to rotation and scale).",
        "cka_null": ("Its expectation after independent Haar rotations of each head's context in the text's centered "
                     "token space (the value of independent heads at this size), in closed form: the sum over texts "
                     "of norm(M_a)^2 norm(M_b)^2 / (n - 1), over the Frobenius norms of the two heads' own Gram sums."),
        "cka_excess": "cka - cka_null.",
        "cka_excess_lo": _LO.format("cka_excess") + _CKA_BOOT,
        "cka_excess_hi": _HI.format("cka_excess"),
        "cka_excess_background": ("Median cka_excess of the layer's other pairs that do not share a key/value head "
                                  "(all other pairs when every pair shares one; NaN for a layer with one pair): what "
                                  "heads of this layer share through their common inputs. Held fixed in the bootstrap."),
        "dependence": ("Verdict, a test against the interval of cka_excess: dependent when cka_excess_lo - "
                       "cka_excess_background >= tau (the layer's dependence_margin: 0.1 bidirectional, 0.6 causal), "
                       "independent when cka_excess_hi - cka_excess_background < tau, else undetermined (also under "
                       "min_tokens real tokens and without a background)."),
        "output_corr": "<Y_a, Y_b>_F / (||Y_a|| ||Y_b||) of the heads' outputs (positive: reinforce, negative: cancel).",
        "shared_kv": "The two heads read the same key/value head.",
    },
    "roles": {
        "layer": "Layer index.",
        "head": "Head index within the layer.",
        "rule": ("The rule: 'offset d' (the key d positions from the query, d in -8..8; 'offset -1' previous token, "
                 "'offset 0' the token itself), 'same token' (an earlier or later occurrence of the query's token: "
                 "duplicate-token heads), 'induction' (the token after an earlier occurrence of the query's token), "
                 "'sink' (the excluded keys: special tokens and each text's first token)."),
        "excess": ("The rule's excess fraction (O - E) / (N - E), as query_selection_score for the per-query rules; for "
                   "'sink' O is the weight on the excluded keys, E its exact expectation under the null, "
                   "sum_i |X_i| / |A_i| (the null's weights are exchangeable over all allowed keys at every "
                   "temperature), N the queries that can see an excluded key. 1: the rule takes all it can; about 0 "
                   "for a random head. NaN where the rule applies to no query."),
        "excess_lo": ("Lower end of the simultaneous 95 % interval over the head's rules (bootstrap max-t band: excess "
                      "- c se, c the 95 % quantile over replicates of the largest |replicate - excess| / se among the "
                      "rules that apply to at least 100 queries)."),
        "excess_hi": "Upper end of the simultaneous 95 % interval (at most 1).",
        "verdict": ("selective (excess_lo >= 0.1), not selective (excess_hi < 0.1) or undetermined (the interval "
                    "contains 0.1, the rule applies to fewer than 100 queries, fewer than min_tokens counted queries, "
                    "or no interval)."),
        "real_weight": ("The head's mean weight on the real keys (not the first token, not special tokens) over the "
                        "queries the rule applies to: what the excess is a share of. A head that parks nearly all its "
                        "weight on the first token can follow a rule with what is left (SmolLM2 L18H8: induction "
                        "excess 0.94 on a real-key weight of 3e-5, over 32 texts); read such a role with its sink row. NaN for "
                        "'sink'."),
    },
}

#: Heat-mapped head columns of the report: (column, colour map, title).
HEATMAPS = [
    ("selection_score", "RdBu_r", "shared-target selection: score log(D/D_null)"),
    ("query_selection_score", "magma", "per-query selection: excess mass on the best rule"),
    ("beta_hat", "viridis", "beta_hat (linear coefficient)"),
    ("r2", "viridis", "R^2 of the linear fit"),
    ("spec_w1_rel", "magma", "W1(head, Gaussian equiv.) / m1"),
    ("entropy_ratio", "viridis_r", "entropy / log n (Clark et al.)"),
    ("confidence", "magma", "confidence (Voita et al.)"),
    ("cka_excess", "RdBu_r", "CKA with other heads - null"),
    ("removal_spec_shift", "magma", "(a) spectral shift on removal"),
    ("removal_spec_shift_ge", "magma", "(a) shift predicted by the Gaussian equivalent (H-1 heads)"),
    ("removal_effect", "magma", "(b) exact removal effect"),
    ("michel_importance", "magma", "(c) Michel et al. importance"),
]


#: How the intervals are made and what each verdict's false-positive rate is (docs/columns.md, the report).
VERDICTS = (
    "Every `_lo` / `_hi` pair is a 95 % percentile interval from a Poisson bootstrap over texts "
    "(`attnspec.diagnostics.statistics.bootstrap`): each text gets 200 Poisson(1) weights (`n_boot`), seeded by the diagnosis "
    "seed and the text's position, and every per-text sum is accumulated once more per replicate, so the model runs "
    "once. Intervals describe the spread over texts of the corpus; they hold the fitted Gaussian equivalents and "
    "null heads fixed. What is random: the *reference draws* (the Gaussian equivalents' noise, the null heads' scores "
    "and their equivalents' noise, the free rotation, the key null's queries), drawn per layer and text and keyed by "
    "`reference_seed` (0 by default), are part of the spectral statistics' definition, so a rerun with another "
    "`seed` gives the same point values; their sampling variance is inside the intervals, since a text's bootstrap "
    "weight multiplies its draws' eigenvalues too (MiniLM's intervals at one reference seed held the mean score over "
    "three reference seeds for 97 % of the heads), and another `reference_seed` shows how far one draw moves a score "
    "(docs/validity.md). The bootstrap weights and the seeded samples of texts are keyed by `seed`: another seed "
    "moves the interval ends by their Monte-Carlo error. The spectral columns (`spec_*`, `null_w1_rel`, "
    "`selection_score`, `removal_spec_shift*`; "
    "in `layers.csv` `spec_m1`, `ge_*`, `free_*`, `free_defect_*`) and their intervals come from the spectra texts: "
    "a seeded sample (`spectra_texts`: by default at least 32 texts and 2,048 eigenvalues per head spectrum, doubled "
    "until the selection verdicts are predicted to agree with all texts' on 95 % of heads; a number; `'all'`; the "
    "summary's `spectra_texts` says what was used), "
    "each text's spectra as without a sample, the intervals from the bootstrap over those texts; every other column "
    "uses every text. "
    "The `selection` label is a test: `selective` only when the lower bound of `selection_score` "
    "reaches the threshold (log 2), i.e. a one-sided test at 2.5 % for a head whose score sits at the threshold; "
    "`diffuse` / `sparse` only when the upper bound lies below it; otherwise `undetermined`, as for every head "
    "when the corpus has fewer than `min_tokens` real tokens (400 by default; the summary states it as "
    "`min_tokens_for_label`). With fewer than 8 texts, or fewer than 10 replicates (`n_boot`), there is no interval "
    "and every verdict is `undetermined` (the summary's notes say why; one text gives zero-width intervals, and "
    "MiniLM's dependent heads fall from 57 at 1 text and 46 at 2 to 16-20 from 8 texts on). "
    "The `query_selection` verdict is the same kind of test on `query_selection_score` (the best rule chosen on the "
    "whole corpus, its replicates those of the same rule): `selective` when the lower bound reaches 0.1, `not "
    "selective` when the upper bound stays below it. On Gaussian-score heads (beta 0.5 to 8, 4 to 64 texts) and "
    "randomly initialized BERT, RoBERTa, GPT-2 and Llama, no head was selective (docs/validity.md). "
    "The `dependence` verdict of a pair is a test against its `cka_excess` interval (linearized: each text's "
    "first-order influence on the CKA numerators, computed against the Gram sum of the first pass, is re-weighted; "
    "accurate when no few texts dominate the Gram sums, too wide when they do). The null of `cka_excess` removes "
    "every alignment between heads, including what any two heads share because they read the same inputs, so almost "
    "every real pair has a positive excess (MiniLM, 64 texts: 94 % of pairs have a lower bound above 0; random "
    "GPT-2 and Llama: every pair, above 0.7). The verdict therefore compares a pair with its layer: "
    "`cka_excess_background` is the median excess of the layer's other pairs (those not sharing a key/value head), "
    "held fixed like the null, and a pair is `dependent` when `cka_excess_lo` exceeds it by the margin tau, "
    "`independent` when `cka_excess_hi` stays below background + tau, else `undetermined` (as below `min_tokens` "
    "or in a layer with a single pair). Nominal false-positive rate: 2.5 % for a pair exactly tau above its "
    "background. tau (`dependence_margin`) is 0.1 in bidirectional layers and 0.6 in causal ones, where the running "
    "mean gives pairs of cool heads a large shared part that the median does not remove. It was chosen on planted "
    "models (`benchmarks/bench_validity.py`: 2 layers x 12 heads, 2 pairs per layer whose Q/K/V copy a partner's "
    "with correlation rho) and on randomly initialized ones, at 64 texts: copies at rho = 1 are dependent in 12 of "
    "12 pairs (BERT, 3 seeds; lowest lower bound 0.92 above its background) and 16 of 16 (GPT-2, 4 seeds; lowest "
    "0.77), at rho = 0.75 in 6 of 12 and 3 of 16; no other pair is (BERT 0 of 1,920 at strengths 0 to 1, highest "
    "0.03 above its background; GPT-2 0 of 1,536, highest 0.53). On randomly initialized BERT, RoBERTa, GPT-2 and "
    "Llama (2 layers x 4 heads, 3 seeds each, 4 to 64 texts) no head is labelled selective or dependent (highest "
    "lower bound over background 0.07 bidirectional, 0.44 causal; `tests/test_calibration_random.py` allows at most "
    "5 % of heads with either verdict). A head is `dependent` when one of its pairs is (`dependence_partner` names "
    "the partner), `independent` when all are. Read the verdict as dependence beyond what the layer's heads "
    "typically share: it assumes that fewer than half of a layer's pairs are dependent. "
    "Removal effects also keep their texts-as-clusters standard errors (`_se`).")


def describe(name: str, table: str = "heads") -> str:
    """Meaning of column ``name`` of table ``table``.

    Parameters
    ----------
    name : str
        A column of the table.
    table : {'heads', 'layers', 'pairs'}, optional

    Returns
    -------
    str
        One or a few sentences, as in ``docs/columns.md``.

    Raises
    ------
    KeyError
        For a table or column outside the vocabulary.

    Examples
    --------
    >>> describe("interference", table="layers")
    '||sum_h Y_h||^2 / sum_h ||Y_h||^2 - 1: share of output energy in cross terms between heads.'
    >>> describe("beta_hat").split(";")[0]
    'Least-squares slope of l*A_ij - 1 on the standardized scores'
    """
    return COLUMNS[table][name]


def markdown() -> str:
    """The vocabulary as Markdown: the verdicts, then one table of column meanings per table.

    Returns
    -------
    str
        The content of ``docs/columns.md`` (without its final newline).

    Examples
    --------
    >>> md = markdown()
    >>> [line for line in md.splitlines() if line.startswith("## ")]
    ['## Intervals and verdicts', '## `heads.csv`', '## `layers.csv`', '## `pairs.csv`', '## `roles.csv`']
    >>> "| `beta_hat` | Least-squares slope" in md
    True
    """
    out = ["# Columns of a diagnosis", "",
           "Generated from `attnspec.diagnostics.result.columns` (the tables, the report and this page read the same "
           "vocabulary).", "", "## Intervals and verdicts", "", VERDICTS, ""]
    for table, cols in COLUMNS.items():
        out += [f"## `{table}.csv`", "", "| column | meaning |", "|---|---|"]
        out += [f"| `{k}` | {v.replace('|', '/')} |" for k, v in cols.items()]
        out.append("")
    return "\n".join(out)
