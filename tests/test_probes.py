"""The previous-token and induction probes on tiny models."""
import numpy as np
import pytest
import torch

from attnspec.validation.probes import attention_weights, eager_attention, induction_scores, previous_token_scores, \
    top_decile


@pytest.fixture(scope="module")
def tiny():
    import transformers
    from attnspec.validation.planted import minilm_tokenizer_dir
    tok = transformers.AutoTokenizer.from_pretrained(minilm_tokenizer_dir(), local_files_only=True)
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=tok.vocab_size, n_embd=32, n_layer=2, n_head=4, pad_token_id=0,
                                  attn_implementation="sdpa")
    return transformers.GPT2LMHeadModel(cfg).eval(), tok


def test_probes_shapes_and_range(tiny):
    model, tok = tiny
    p = previous_token_scores(model, tok, ["The cat sat on the mat.", "A dog ran home."])
    i = induction_scores(model, tok, n_sequences=2, length=10, seed=1)
    assert p.shape == i.shape == (2, 4)
    assert ((p > 0) & (p < 1)).all() and ((i > 0) & (i < 1)).all()
    np.testing.assert_array_equal(i, induction_scores(model, tok, n_sequences=2, length=10, seed=1))   # seeded
    assert model.config._attn_implementation == "sdpa"                       # restored after the call


def test_probes_read_planted_weights(tiny):
    """A head forced to attend to the previous token scores 1 (uniform causal heads score the mean 1/n)."""
    model, tok = tiny
    ids = torch.tensor([[101, 2000, 2001, 2002, 2003, 102]])
    with eager_attention(model):
        A = attention_weights(model, ids)
    assert len(A) == 2 and A[0].shape == (1, 4, 6, 6)
    assert torch.allclose(A[0].triu(1), torch.zeros(())) and torch.allclose(A[0].sum(-1), torch.ones(()))


def test_top_decile():
    s = np.arange(30.0).reshape(3, 10)
    assert top_decile(s).sum() == 3 and top_decile(s)[2, 9]
