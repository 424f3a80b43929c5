"""The structure figure set in quick mode (real sweeps: law + Monte-Carlo, 2 Dask workers)."""
import json

import pytest

from attnspec.figures.structure import structure_figures
from attnspec.sweeps import structure_points


def test_structure_points_cover_the_panels():
    panels = structure_points(quick=True)
    assert set(panels) == {"heads", "d_qk", "d_v", "gqa", "keys_only", "values_only", "tied", "key_dependent"}
    for p in panels["heads"]:
        assert sum(p.config.d_qk) == p.config.d_model          # fixed total width
    assert {p.config.key_groups for p in panels["keys_only"]} == {8, 4, 2, 1}
    assert all(p.config.value_groups == 8 for p in panels["keys_only"])
    assert all(p.config.values == "key-dependent" for p in panels["key_dependent"])


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_structure_figures_quick(tmp_path):
    from attnspec.cli import main

    assert main(["figures", "--set", "structure", "--quick", "--no-progress", "--out", str(tmp_path)]) == 0
    paths = structure_figures(tmp_path, quick=True, progress=False)  # a re-run reads the stored sweep
    assert [p.name for p in paths] == ["structure_heads_widths.png", "structure_sharing.png", "structure_numbers.json"]
    assert all(p.stat().st_size > 1000 for p in paths)
    nums = json.loads(paths[2].read_text())
    e = 1.718281828459045
    assert all(abs(m - e) < 1e-3 for m in nums["heads"]["law_m1"])          # m1 = e - 1 throughout
    assert nums["heads"]["law_m2"][0] > nums["heads"]["law_m2"][-1]          # more heads, smaller m2
    assert max(nums["gqa"]["law_m2"]) - min(nums["gqa"]["law_m2"]) < 1e-3 * nums["gqa"]["law_m2"][0]   # sharing
    assert nums["tied"]["law_m1"][0] > 2 * e                                  # tying moves m1
