"""Sweep points, grids and the SQLite results store (no Dask)."""
import json
import sqlite3

import numpy as np
import pytest

from attnspec import ConfigError, MHSAConfig
from attnspec.sweeps import ResultStore, SweepPoint, expand_grid, points_from_spec, run_sweep, to_frame, to_parquet
from attnspec.sweeps.closed_form import closed_form_moments

BASE = MHSAConfig.uniform(32, 32, heads=4)


def test_key_is_canonical_and_ignores_tags():
    a = SweepPoint(BASE, seed=1, draws=2, evaluations=("surrogate", "softmax"), tags={"panel": "a"})
    b = SweepPoint(MHSAConfig.from_dict(BASE.to_dict()), seed=1, draws=2, evaluations=("softmax", "surrogate"))
    assert a.key == b.key and len(a.key) == 64
    assert SweepPoint(BASE, seed=2).key != SweepPoint(BASE, seed=1).key
    assert SweepPoint(BASE.replace(beta=0.5)).key != SweepPoint(BASE).key
    assert SweepPoint.from_dict(json.loads(json.dumps(a.to_dict()))).key == a.key
    with pytest.raises(ValueError):
        SweepPoint(BASE, evaluations=("exact",))


def test_grid_axes():
    pts = expand_grid(BASE, {"heads": [1, 2, 4, 8], "beta": [0.5, 1.0]}, seeds=[0, 1])
    assert len(pts) == 16
    for p in pts:
        assert sum(p.config.d_qk) == 32 and sum(p.config.d_v) == 32   # fixed total width
        assert p.config.n_heads == p.tags["heads"] and p.config.beta == p.tags["beta"]
    (p,) = expand_grid(BASE, {"kv_groups": [1]})
    assert p.config.key_groups == p.config.value_groups == 1
    (p,) = expand_grid(BASE, {"value_key_scale": [2.0]})
    assert p.config.values == "key-dependent" and p.config.value_key_scale == 2.0
    (p,) = expand_grid(BASE, {"d_v_per_head": [4]})
    assert p.config.d_v == (4,) * 4 and p.config.d_qk == (8,) * 4
    with pytest.raises(ConfigError):
        expand_grid(BASE, {"heads": [3]})   # 3 does not divide the total width 32


def test_spec_file_format():
    spec = {"sweep": {"name": "s", "seeds": [3], "draws": 2, "evaluations": ["surrogate"]},
            "base": BASE.to_dict(), "grid": {"beta": [0.5, 1.0]}, "points": [{"kv_groups": 1}]}
    name, pts = points_from_spec(spec)
    assert name == "s" and len(pts) == 3
    assert all(p.seed == 3 and p.draws == 2 and p.evaluations == ("surrogate",) for p in pts)


def test_store_writes_a_point_once(tmp_path):
    db = tmp_path / "r.sqlite"
    p = SweepPoint(BASE, seed=0)
    with ResultStore(db) as s:
        assert s.put(p, {"x": 1.0}, started_at=1.0, finished_at=2.5, worker="w")
        assert not s.put(p, {"x": 2.0}, started_at=3.0, finished_at=4.0)    # UNIQUE key: first write wins
        assert len(s) == 1 and p.key in s
        row = s.get(p.key)
        assert row.results == {"x": 1.0} and row.elapsed_s == 1.5 and row.config == BASE.to_dict()
        assert row.code_version.startswith("0.") and s.integrity_check() == "ok"
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("INSERT INTO points SELECT NULL, point_key, sweep, config_json, seed, draws, evaluations, "
                     "tags_json, code_version, results_json, started_at, finished_at, elapsed_s, worker, stored_at "
                     "FROM points")


def test_serial_sweep_resumes_and_exports(tmp_path):
    db = tmp_path / "r.sqlite"
    pts = expand_grid(BASE, {"beta": [0.5, 1.0], "heads": [1, 4]}, draws=2)
    r1 = run_sweep(pts, db, n_workers=0, progress=False)
    assert (r1.computed, r1.already_stored, r1.failed) == (4, 0, [])
    r2 = run_sweep(pts + pts, db, n_workers=0, progress=False)       # duplicates collapse, nothing recomputed
    assert (r2.total, r2.computed, r2.already_stored) == (4, 0, 4)
    df = to_frame(db)
    assert len(df) == 4
    for _, row in df.iterrows():   # closed-form law moments match the configuration
        cf = closed_form_moments(MHSAConfig.from_dict({k[4:]: (list(v) if isinstance(v, tuple) else v)
                                                       for k, v in row.items() if k.startswith("cfg.")}))
        assert row["law.m1"] == pytest.approx(cf["m1"])
        assert np.isfinite(row["softmax.m2"]) and row["dist.softmax~surrogate.w1"] >= 0
    assert (df["softmax.n"] == 64).all()
    out = to_parquet(db, tmp_path / "r.parquet")
    import pandas as pd
    assert len(pd.read_parquet(out)) == 4


def _flaky(point):
    if point.seed == 1:
        raise RuntimeError("boom")
    return {"seed": point.seed}


def test_failed_points_are_logged_and_retried(tmp_path):
    db = tmp_path / "r.sqlite"
    pts = expand_grid(BASE, {"seed": [0, 1, 2]})
    r = run_sweep(pts, db, n_workers=0, evaluator=_flaky, progress=False)
    assert r.computed == 2 and len(r.failed) == 1 and "boom" in r.failed[0][1]
    with ResultStore(db) as s:
        assert len(s) == 2 and len(s.failures()) == 1
    r = run_sweep(pts, db, n_workers=0, evaluator=lambda p: {"seed": p.seed}, progress=False)
    assert (r.computed, r.already_stored) == (1, 2)


def test_cli_sweep_serial_with_spec_file_and_exports(tmp_path, capsys):
    import tomli_w

    from attnspec.cli import main

    spec = {"sweep": {"name": "cli", "draws": 1, "evaluations": ["law", "surrogate"]},
            "base": BASE.to_dict(), "grid": {"heads": [1, 2, 4]}}
    (tmp_path / "s.toml").write_text(tomli_w.dumps(spec))
    db = tmp_path / "r.sqlite"
    argv = ["sweep", str(tmp_path / "s.toml"), "--db", str(db), "--workers", "0", "--no-progress"]
    assert main(argv + ["--dry-run"]) == 0
    assert "3 to compute" in capsys.readouterr().out
    assert main(argv + ["--parquet", str(tmp_path / "r.parquet"), "--plot", str(tmp_path / "m2.png"),
                        "--y", "law.m2,surrogate.m2"]) == 0
    assert "3 computed" in capsys.readouterr().out
    assert (tmp_path / "r.parquet").stat().st_size > 0 and (tmp_path / "m2.png").stat().st_size > 0
    assert main(argv) == 0
    assert "3 already stored, 0 computed" in capsys.readouterr().out
