"""Parameter sweeps: grids of MHSA configurations evaluated by law and Monte-Carlo on Dask, with a
resumable SQLite results store, export to pandas/Parquet, and the points of the structure figure set.

* :mod:`.spec` — :class:`SweepPoint`, grids (:func:`expand_grid`), specification files;
* :mod:`.store` — :class:`ResultStore` (one row per finished point, WAL, atomic, unique key);
* :mod:`.evaluate` — what is computed per point (runs on the workers);
* :mod:`.runner` — :func:`run_sweep` (LocalCluster or ``--scheduler``; resumable);
* :mod:`.export` — :func:`to_frame`, :func:`to_parquet`;
* :mod:`.structure` — :func:`structure_points`, the points behind ``attnspec figures --set structure``
  (drawn by :mod:`attnspec.figures.structure`).
"""
from .export import points_frame, to_frame, to_parquet
from .runner import SweepReport, pending_points, run_sweep
from .spec import EVALUATIONS, SweepPoint, apply_axis, expand_grid, points_from_spec
from .store import ResultStore, code_version
from .structure import structure_points

__all__ = ["EVALUATIONS", "SweepPoint", "apply_axis", "expand_grid", "points_from_spec", "ResultStore", "code_version",
           "SweepReport", "pending_points", "run_sweep", "points_frame", "to_frame", "to_parquet",
           "structure_points"]
