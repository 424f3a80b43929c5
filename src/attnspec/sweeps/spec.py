"""Sweep specifications: points, grids and the store key of a point.

A *sweep point* is an :class:`~attnspec.config.MHSAConfig` plus the Monte-Carlo settings that
determine its result: ``seed``, ``draws`` and which ``evaluations`` run (``'law'``, ``'softmax'``,
``'surrogate'``). Its store key is the SHA-256 of the canonical JSON of exactly these fields
(sorted keys, no whitespace), so the same point always maps to the same row, whatever sweep it
belongs to. ``tags`` (free-form labels such as the panel or the x-coordinate of a figure) are
carried along for export but are *not* part of the key.

A *grid* is a base configuration and named axes; :func:`expand_grid` takes the Cartesian product
of the axes (in the given order) and applies each combination with :func:`apply_axis`.
Besides every :class:`MHSAConfig` field (``beta``, ``seq_len``, ``d_model``, ``d_out``,
``key_groups``, ``value_groups``, ``values``, ``value_key_scale``, ...), the derived axes are

* ``heads``: the number of heads at fixed *total* widths ``sum_h d_qk^h`` and ``sum_h d_v^h``
  (head allocation; widths are split evenly and must divide);
* ``d_qk_per_head`` / ``d_v_per_head``: one width for every head (projection widths);
* ``kv_groups``: ``key_groups = value_groups``;
* ``seed``, ``draws``: Monte-Carlo settings of the point.
"""
from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from ..config import MHSAConfig

__all__ = ["EVALUATIONS", "SweepPoint", "apply_axis", "expand_grid", "points_from_spec", "KEY_SCHEMA", "MAX_POINTS",
           "grid_size", "spec_size"]

#: Most points one sweep may hold: each point costs about 0.6 kB of memory and 0.1 ms to build and key before
#: anything runs (measured: 10^5 points, ~60 MB and ~15 s of checks) and one row in the store; a larger grid is
#: refused before it is built (split it into several sweeps).
MAX_POINTS = 100_000

EVALUATIONS = ("law", "softmax", "surrogate")
#: Version of the key format; bump it if the meaning of a stored result changes incompatibly.
KEY_SCHEMA = 1


@dataclass(frozen=True)
class SweepPoint:
    """One configuration to evaluate, with its Monte-Carlo settings.

    Parameters
    ----------
    config : MHSAConfig
    seed : int
        Seed passed to :func:`attnspec.simulation.simulate`.
    draws : int
        Independent draws pooled into one spectrum.
    evaluations : tuple of str
        Subset of ``('law', 'softmax', 'surrogate')``.
    tags : dict
        Free-form JSON-able labels (not part of the key).

    Examples
    --------
    >>> from attnspec.config import MHSAConfig
    >>> p = SweepPoint(MHSAConfig.uniform(16, 16), seed=1, tags={"panel": "a"})
    >>> p.key == SweepPoint(MHSAConfig.uniform(16, 16), seed=1).key    # tags are not part of the key
    True
    >>> SweepPoint.from_dict(p.to_dict()) == p
    True
    """

    config: MHSAConfig
    seed: int = 0
    draws: int = 1
    evaluations: tuple[str, ...] = EVALUATIONS
    tags: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.config, MHSAConfig):
            raise TypeError(f"config must be an MHSAConfig, got {type(self.config).__name__}")
        ev = tuple(sorted(set(self.evaluations), key=EVALUATIONS.index)) if all(
            e in EVALUATIONS for e in self.evaluations) else None
        if not ev:
            raise ValueError(f"evaluations must be a non-empty subset of {EVALUATIONS}, got {self.evaluations!r}")
        object.__setattr__(self, "evaluations", ev)
        for name, minimum in (("seed", 0), ("draws", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
                raise ValueError(f"{name} must be an integer >= {minimum}, got {v!r}")
        object.__setattr__(self, "tags", dict(self.tags))

    def identity(self) -> dict[str, Any]:
        """The fields that determine the result (what the key hashes)."""
        return {"schema": KEY_SCHEMA, "config": self.config.to_dict(), "seed": self.seed, "draws": self.draws,
                "evaluations": list(self.evaluations)}

    def canonical_json(self) -> str:
        return json.dumps(self.identity(), sort_keys=True, separators=(",", ":"))

    @property
    def key(self) -> str:
        """SHA-256 (hex) of :meth:`canonical_json`."""
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        return dict(self.identity(), tags=dict(self.tags))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SweepPoint":
        return cls(config=MHSAConfig.from_dict(data["config"]), seed=int(data.get("seed", 0)),
                   draws=int(data.get("draws", 1)), evaluations=tuple(data.get("evaluations", EVALUATIONS)),
                   tags=data.get("tags", {}))


def apply_axis(config: MHSAConfig, name: str, value: Any) -> MHSAConfig:
    """``config`` with one axis set (see the module docstring for the derived axes).

    Examples
    --------
    >>> from attnspec.config import MHSAConfig
    >>> apply_axis(MHSAConfig.uniform(64, 64, heads=2), "heads", 4).d_qk
    (16, 16, 16, 16)
    >>> apply_axis(MHSAConfig.uniform(64, 64), "beta", 0.5).beta
    0.5
    """
    H = config.n_heads
    if name == "heads":
        return config.with_heads(int(value))
    if name == "d_qk_per_head":
        changes: dict[str, Any] = {"d_qk": (int(value),) * H}
        if config.values == "tied-to-keys":
            changes["d_v"] = (int(value),) * H
        return config.replace(**changes)
    if name == "d_v_per_head":
        return config.replace(d_v=(int(value),) * H)
    if name == "kv_groups":
        return config.replace(key_groups=int(value), value_groups=int(value))
    if name in ("d_qk", "d_v"):
        return config.replace(**{name: (int(value),) * H if isinstance(value, int) else tuple(value)})
    if name == "values" and value != "key-dependent":
        return config.replace(values=value, value_key_scale=1.0)
    if name == "value_key_scale":
        return config.replace(values="key-dependent", value_key_scale=float(value))
    return config.replace(**{name: value})


def grid_size(axes: Mapping[str, Sequence[Any]] | None, seeds: Iterable[int] = (0,)) -> int:
    """Points of the grid ``axes`` times ``seeds`` (a ``seed`` axis replaces ``seeds``), counted without building it.

    Examples
    --------
    >>> grid_size({"heads": [1, 2], "beta": [0.5, 1.0]}, seeds=(0, 1)), grid_size({"seed": [0, 1, 2]}, seeds=(0, 1))
    (8, 3)
    """
    axes = dict(axes or {})
    n = 1 if "seed" in axes else len(list(seeds))
    for values in axes.values():
        n *= len(values) if isinstance(values, (list, tuple)) else 1
    return n


def spec_size(spec: Mapping[str, Any]) -> int:
    """Points of a sweep specification (:func:`points_from_spec`), counted without building them.

    Examples
    --------
    >>> spec_size({"sweep": {"seeds": [0, 1]}, "grid": {"beta": [0.5, 1.0, 2.0]}, "points": [{"beta": 3.0}]})
    8
    """
    sweep = spec.get("sweep", {}) if isinstance(spec.get("sweep", {}), Mapping) else {}
    seeds = sweep.get("seeds", [0])
    seeds = seeds if isinstance(seeds, (list, tuple)) else [seeds]
    grid = spec.get("grid", {}) if isinstance(spec.get("grid", {}), Mapping) else {}
    points = spec.get("points", []) if isinstance(spec.get("points", []), list) else []
    n = grid_size(grid, seeds) if (grid or not points) else 0
    return n + sum(grid_size({k: [v] for k, v in c.items()} if isinstance(c, Mapping) else {}, seeds)
                   for c in points)


def _check_size(n: int) -> None:
    if n > MAX_POINTS:
        raise ValueError(f"the sweep has {n:,} points, more than the {MAX_POINTS:,} one sweep may hold (each is built, "
                         "keyed and checked before anything runs); split the grid into several sweeps (the same store "
                         "takes them all)")


def expand_grid(base: MHSAConfig, axes: Mapping[str, Sequence[Any]] | None = None, *, seeds: Iterable[int] = (0,),
                draws: int = 1, evaluations: Sequence[str] = EVALUATIONS,
                tags: Mapping[str, Any] | None = None) -> list[SweepPoint]:
    """Cartesian product of ``axes`` (dict order; the last axis varies fastest) times ``seeds``.

    Every point's tags hold the axis values it was built from (plus ``tags``).

    Examples
    --------
    >>> from attnspec.config import MHSAConfig
    >>> pts = expand_grid(MHSAConfig.uniform(64, 64, heads=4), {"heads": [1, 2], "beta": [0.5, 1.0]}, seeds=(0, 1))
    >>> len(pts), [(p.config.n_heads, p.config.beta) for p in pts[::2]]
    (8, [(1, 0.5), (1, 1.0), (2, 0.5), (2, 1.0)])
    """
    axes = dict(axes or {})
    seeds = list(seeds)
    _check_size(grid_size(axes, seeds))
    names = list(axes)
    points = []
    for combo in itertools.product(*(list(axes[n]) for n in names)):
        cfg, seed_list, nd = base, list(seeds), draws
        for n, v in zip(names, combo):
            if n == "seed":
                seed_list = [int(v)]
            elif n == "draws":
                nd = int(v)
            else:
                cfg = apply_axis(cfg, n, v)
        for s in seed_list:
            t = dict(tags or {})
            t.update(zip(names, combo))
            points.append(SweepPoint(cfg, seed=int(s), draws=nd, evaluations=tuple(evaluations), tags=t))
    return points


def points_from_spec(spec: Mapping[str, Any]) -> tuple[str, list[SweepPoint]]:
    """Points of a sweep specification (a parsed TOML/JSON document).

    Format::

        [sweep]
        name = "heads"                # optional
        seeds = [0, 1]                # default [0]
        draws = 1
        evaluations = ["law", "softmax", "surrogate"]
        [base]                        # an MHSAConfig (fields as in MHSAConfig.from_dict)
        seq_len = 256
        d_model = 256
        d_qk = [64, 64, 64, 64]
        d_v = [64, 64, 64, 64]
        d_out = 256
        [grid]                        # Cartesian product; any field or derived axis
        heads = [1, 2, 4, 8]
        beta = [0.5, 1.0]
        [[points]]                    # optional explicit points: changes applied to base
        beta = 1.5
        kv_groups = 1

    Returns ``(name, points)``.

    Examples
    --------
    >>> spec = {"sweep": {"name": "demo", "seeds": [0]},
    ...         "base": {"seq_len": 32, "d_model": 32, "d_qk": [8] * 4, "d_v": [8] * 4, "d_out": 32},
    ...         "grid": {"heads": [1, 2, 4]}}
    >>> name, pts = points_from_spec(spec)
    >>> name, [p.config.d_qk for p in pts]
    ('demo', [(32,), (16, 16), (8, 8, 8, 8)])
    """
    sweep = dict(spec.get("sweep", {}))
    _check_size(spec_size(spec))
    if "base" not in spec:
        raise ValueError("a sweep specification needs a [base] table (an MHSA configuration)")
    base = MHSAConfig.from_dict(spec["base"])
    common = dict(seeds=sweep.get("seeds", [0]), draws=int(sweep.get("draws", 1)),
                  evaluations=tuple(sweep.get("evaluations", EVALUATIONS)))
    points: list[SweepPoint] = []
    if spec.get("grid") or not spec.get("points"):
        points += expand_grid(base, spec.get("grid", {}), **common)
    for change in spec.get("points", []):
        points += expand_grid(base, {k: [v] for k, v in change.items()}, **common)
    return str(sweep.get("name", "sweep")), points
