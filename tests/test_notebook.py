"""Notebooks: the example a TransformerLens user follows (examples/transformer_lens_quickstart.ipynb) runs from top to
bottom in a fresh kernel, and a diagnosis and a comparison of the packaged MiniLM display as HTML."""
import os
from pathlib import Path

import nbformat
import pytest
import torch
from nbclient import NotebookClient

import attnspec
from attnspec.models import load_model

EXAMPLE = Path(__file__).parents[1] / "examples" / "transformer_lens_quickstart.ipynb"


def _outputs(nb, kind: str) -> list[str]:
    out = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            if kind == "stream" and o.output_type == "stream":
                out.append(o.text)
            elif kind != "stream" and o.output_type in ("execute_result", "display_data") and kind in o.data:
                out.append(o.data[kind])
    return out


@pytest.mark.slow
def test_the_transformer_lens_notebook_runs(tmp_path):
    nb = nbformat.read(EXAMPLE, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")     # stored without outputs
    env = dict(os.environ, HF_HUB_OFFLINE="1", MPLBACKEND="Agg")
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute(env=env)
    html = "".join(_outputs(nb, "text/html"))
    assert "attnspec diagnosis of LlamaForCausalLM" in html and "selection_score [95 %]" in html
    printed = "".join(_outputs(nb, "stream"))
    rho = float(printed.split("offset -1 excess: ")[1].split()[0])
    assert rho > 0.5                                   # the detector and the excess rank previous-token heads alike
    assert "'compatibility_mode': True" in "".join(_outputs(nb, "text/plain"))


def test_diagnosis_and_comparison_display_as_html():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model, tok = load_model("minilm")
        d = attnspec.diagnose(model, tok, None, n_texts=8, n_boot=20, removal="none", progress=False)
    finally:
        torch.set_num_threads(n)
    page = d._repr_html_()
    top = d.heads.sort_values("selection_score", ascending=False).iloc[0]
    assert f"{top['selection_score']:.3g} [{top['selection_score_lo']:.3g}, {top['selection_score_hi']:.3g}]" in page
    assert page.count("<tr>") >= 1 + 8 + 6 + 1                  # header, 8 top heads, the 6-layer map and its heads
    comparison = attnspec.compare(d, d)
    page = comparison._repr_html_()
    assert "changed (any): <b>0</b>" in page and "selection_score_diff (b - a)" in page
