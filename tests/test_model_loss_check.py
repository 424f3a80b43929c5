"""The summary's model loss: a causal LM's own NLL on the removal texts, and the note for a mis-loaded model."""
import warnings

import numpy as np
import pytest
import torch

from attnspec import diagnose
from attnspec.diagnostics.result.summary import LOSS_MARGIN
from attnspec.models.tiny import tiny_causal_lm

torch.set_num_threads(1)


def test_model_loss_is_the_models_own_nll():
    """Exact removal on every position with the full vocabulary: the mean NLL per predicted token equals the loss
    transformers computes from the labels, and a random-init model is not flagged."""
    ad, batch = tiny_causal_lm()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        d = diagnose(ad, batch, removal="exact", min_tokens=0, n_boot=0)
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    with torch.no_grad():
        hf = ad.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels).loss
    assert d.summary["model_loss_per_token"] == pytest.approx(float(hf), abs=1e-4)
    assert not any(n.startswith("model loss") for n in d.summary["notes"])


def test_mis_loaded_model_is_flagged():
    """An LM head scaled 300x predicts far worse than a uniform guess: note and RuntimeWarning; no removal, no loss."""
    ad, batch = tiny_causal_lm()
    with torch.no_grad():
        ad.model.lm_head.weight.mul_(300)
    with pytest.warns(RuntimeWarning, match="mis-loaded"):
        d = diagnose(ad, batch, removal="exact", min_tokens=0, n_boot=0)
    assert d.summary["model_loss_per_token"] > np.log(ad.model.config.vocab_size) + LOSS_MARGIN
    assert any(n.startswith("model loss") for n in d.summary["notes"])
    assert "model_loss_per_token" not in diagnose(ad, batch, removal="none", min_tokens=0, n_boot=0).summary
