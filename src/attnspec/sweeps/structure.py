"""The sweep points behind the structure figures (``attnspec figures --set structure``).

Convention A, ``beta = 1``, ``l = d``; one panel per question, each a grid of :class:`SweepPoint` tagged with
its panel name:

* ``heads``: ``H = 1..16`` at fixed total width ``H d_head = d`` (base ``H = 4``);
* ``d_qk`` / ``d_v``: the per-head query/key or value width from ``d/16`` to ``d`` at ``H = 4``;
* ``gqa``, ``keys_only``, ``values_only``: 8, 4, 2, 1 shared groups of keys and values, keys only, values only,
  at ``H = 8``;
* ``tied``: ``W_V = W_K`` at ``H = 8``; ``key_dependent``: ``V = K M``, ``M ~ N(0, s^2/d_qk)``, ``s = 1/4..4``.
"""
from __future__ import annotations

from ..config import MHSAConfig
from .spec import SweepPoint, expand_grid

__all__ = ["structure_points"]


def structure_points(quick: bool = False) -> dict[str, list[SweepPoint]]:
    """The sweep points of each panel: ``d = 256`` and 2 draws per point (``quick``: ``d = 64``, one draw, fewer
    values per axis).

    Examples
    --------
    >>> panels = structure_points(quick=True)
    >>> sorted(panels)[:3], [p.config.n_heads for p in panels["heads"]]
    (['d_qk', 'd_v', 'gqa'], [1, 2, 4, 8])
    """
    d = 64 if quick else 256
    kw = dict(draws=1 if quick else 2, seeds=[0])
    base4 = MHSAConfig.uniform(d, d, heads=4, beta=1.0)
    base8 = MHSAConfig.uniform(d, d, heads=8, beta=1.0)
    hs = [1, 2, 4, 8] if quick else [1, 2, 4, 8, 16]
    widths = [d // 8, d // 4, d // 2, d] if quick else [d // 16, d // 8, d // 4, d // 2, d]
    groups = [8, 4, 2, 1]
    scales = [0.5, 1.0, 2.0] if quick else [0.25, 0.5, 1.0, 2.0, 4.0]
    return {
        "heads": expand_grid(base4, {"heads": hs}, tags={"panel": "heads"}, **kw),
        "d_qk": expand_grid(base4, {"d_qk_per_head": widths}, tags={"panel": "d_qk"}, **kw),
        "d_v": expand_grid(base4, {"d_v_per_head": widths}, tags={"panel": "d_v"}, **kw),
        "gqa": expand_grid(base8, {"kv_groups": groups}, tags={"panel": "gqa"}, **kw),
        "keys_only": expand_grid(base8, {"key_groups": groups}, tags={"panel": "keys_only"}, **kw),
        "values_only": expand_grid(base8, {"value_groups": groups}, tags={"panel": "values_only"}, **kw),
        "tied": expand_grid(base8, {"values": ["tied-to-keys"]}, tags={"panel": "tied"}, **kw),
        "key_dependent": expand_grid(base8, {"value_key_scale": scales}, tags={"panel": "key_dependent"}, **kw),
    }
