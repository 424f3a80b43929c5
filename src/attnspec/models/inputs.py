"""Turning texts (or tensors) into length-bucketed batches.

Texts are tokenized once, sorted by length and cut into buckets of ``bucket_size`` texts, each padded
(right side) only to its own longest text, so that short texts do not pay for long ones. Every batch
is a dict with ``input_ids``, ``attention_mask`` (1 = real token) and ``special`` (True for special
tokens such as [CLS], [SEP], <bos>; excluded as queries from the confidence baseline), plus
``order``: the positions of its texts in the caller's list.

For models without a tokenizer (``nn.MultiheadAttention``, custom modules) pass a dict
``{"args": (x,), "kwargs": {...}, "attention_mask": mask}`` or a tensor ``x`` of shape ``(B, L, D)``;
it becomes a single batch.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

__all__ = ["make_batches", "image_inputs", "generated_images"]


def make_batches(tokenizer_or_inputs: Any, texts: Sequence[str] | None = None, max_length: int = 128,
                 bucket_size: int = 16, first_id: int = 0) -> list[dict[str, Any]]:
    """Length-bucketed batches (see module docstring); ``first_id`` is the position of ``texts[0]`` in the
    caller's whole corpus (a shard of a larger corpus keeps its texts' global positions in ``order``).

    ``tokenizer_or_inputs``: a tokenizer (``texts`` are then tokenized up to ``max_length``, sorted by length
    and cut into buckets of ``bucket_size``), a ``(B, L, ...)`` tensor or ``{"args", "kwargs",
    "attention_mask"}`` for a generic model, image inputs (:func:`image_inputs`) or tokenized ids. Each
    batch has ``attention_mask`` (1 = real token), ``special`` and ``order`` besides the model inputs. Token ids
    and masks are kept on the CPU whatever device they come on (each run moves them to the model's device).

    Examples
    --------
    >>> from attnspec.models import load_model
    >>> _, tok = load_model("minilm")
    >>> texts = ["a short text", "a somewhat longer text than the first one", "mid text here"]
    >>> batches = make_batches(tok, texts, bucket_size=2)
    >>> [b["order"] for b in batches], [tuple(b["input_ids"].shape) for b in batches]
    ([[0, 2], [1]], [(2, 5), (1, 10)])
    >>> batches[0]["special"][0].tolist()                  # [CLS] ... [SEP]
    [True, False, False, False, True]
    >>> import torch
    >>> make_batches(torch.zeros(2, 5, 4))[0]["attention_mask"].shape       # a generic model's input tensor
    torch.Size([2, 5])
    """
    if not isinstance(bucket_size, int) or bucket_size < 1:
        raise ValueError(f"bucket_size must be an integer >= 1, got {bucket_size!r}")
    obj = tokenizer_or_inputs
    if isinstance(obj, torch.Tensor):
        return [{"args": (obj,), "kwargs": {}, "attention_mask": torch.ones(obj.shape[:2], dtype=torch.long),
                 "special": torch.zeros(obj.shape[:2], dtype=torch.bool), "order": list(range(obj.shape[0]))}]
    if isinstance(obj, dict) and "args" in obj:
        x = obj["args"][0]
        mask = obj.get("attention_mask")
        mask = torch.ones(x.shape[:2], dtype=torch.long) if mask is None else mask.long().cpu()
        return [{"args": tuple(obj["args"]), "kwargs": dict(obj.get("kwargs", {})), "attention_mask": mask,
                 "special": torch.zeros(mask.shape, dtype=torch.bool), "order": list(range(mask.shape[0]))}]
    if isinstance(obj, dict) and "pixel_values" in obj:   # images (vision transformers): see image_inputs
        x = obj["pixel_values"]
        if "attention_mask" not in obj:
            raise ValueError("image inputs need an attention_mask over the model's tokens: build them with "
                             "attnspec.models.image_inputs(model, pixel_values)")
        mask = torch.as_tensor(obj["attention_mask"]).long().cpu()
        special = torch.as_tensor(obj.get("special_tokens_mask", torch.zeros_like(mask))).bool().cpu()
        return [{"pixel_values": x[s:s + bucket_size], "attention_mask": mask[s:s + bucket_size],
                 "special": special[s:s + bucket_size], "order": list(range(s, min(len(x), s + bucket_size)))}
                for s in range(0, len(x), bucket_size)]
    if hasattr(obj, "keys") and "input_ids" in obj:  # a BatchEncoding / dict of token ids
        ids = torch.as_tensor(obj["input_ids"]).cpu()     # token tensors live on the CPU; runs move them
        mask = torch.as_tensor(obj.get("attention_mask", torch.ones_like(ids))).cpu()
        special = torch.as_tensor(obj["special_tokens_mask"]).bool().cpu() if "special_tokens_mask" in obj \
            else torch.zeros_like(ids, dtype=torch.bool)
        return [{"input_ids": ids, "attention_mask": mask.long(), "special": special,
                 "order": list(range(ids.shape[0]))}]
    if obj is None:
        raise ValueError("tokenizer_or_inputs is None: pass the model's tokenizer (with texts) or its inputs")
    if not callable(obj):
        raise TypeError("tokenizer_or_inputs must be a tokenizer, a dict of input_ids (or args / pixel_values) or a "
                        f"tensor, got {type(obj).__name__}")
    if texts is None:
        raise ValueError("texts are required when a tokenizer is given")
    if isinstance(texts, str):
        raise TypeError("texts must be a list of strings, got one str (wrap it in a list: [text])")
    texts = list(texts)
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"texts[{i}] is {'None' if t is None else type(t).__name__}, not a string: every text "
                            "must be a non-blank string")
    if not texts:
        raise ValueError("texts is empty")
    tok = obj
    enc = tok(texts, truncation=True, max_length=max_length, return_special_tokens_mask=True)
    lengths = [len(x) for x in enc["input_ids"]]
    order = sorted(range(len(texts)), key=lambda i: lengths[i])
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    batches = []
    for start in range(0, len(order), bucket_size):
        idx = order[start:start + bucket_size]
        L = max(lengths[i] for i in idx)
        ids = torch.full((len(idx), L), pad, dtype=torch.long)
        mask = torch.zeros((len(idx), L), dtype=torch.long)
        special = torch.zeros((len(idx), L), dtype=torch.bool)
        for r, i in enumerate(idx):
            n = lengths[i]
            ids[r, :n] = torch.tensor(enc["input_ids"][i])
            mask[r, :n] = 1
            special[r, :n] = torch.tensor(enc["special_tokens_mask"][i], dtype=torch.bool)
        batches.append({"input_ids": ids, "attention_mask": mask, "special": special,
                        "order": [first_id + i for i in idx]})
    return batches


def image_inputs(model: Any, pixel_values: torch.Tensor) -> dict[str, torch.Tensor]:
    """Inputs for :func:`attnspec.diagnose` from images ``(N, C, H, W)`` for a vision transformer.

    The token count comes from one call of the model's own embeddings on the first image (class token,
    distillation or register tokens, then patches); those leading tokens are marked special (excluded as
    queries from the confidence baseline, like [CLS] in texts). Every token is real: ``attention_mask`` is
    all ones.

    Examples
    --------
    >>> import transformers
    >>> vit = transformers.ViTModel(transformers.ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
    ...                             intermediate_size=64, image_size=32, patch_size=16)).eval()
    >>> inputs = image_inputs(vit, generated_images(2, size=32))
    >>> inputs["attention_mask"].shape, inputs["special_tokens_mask"][0].tolist()      # [CLS] + 2 x 2 patches
    (torch.Size([2, 5]), [True, False, False, False, False])
    """
    m = getattr(model, "model", model)
    emb = None
    for cand in (m, getattr(m, "vit", None), getattr(m, "deit", None), getattr(m, "dinov2", None)):
        emb = getattr(cand, "embeddings", None) if cand is not None else None
        if emb is not None:
            break
    if emb is None:
        raise ValueError(f"{type(m).__name__}: no embeddings module to count image tokens with")
    x = torch.as_tensor(pixel_values)
    p = next(m.parameters())
    with torch.no_grad():
        L = emb(x[:1].to(device=p.device, dtype=p.dtype)).shape[1]
    cfg = getattr(m, "config", None)
    patch = getattr(cfg, "patch_size", None)
    n_patches = (x.shape[-2] // patch) * (x.shape[-1] // patch) if patch else L - 1
    special = torch.zeros(x.shape[0], L, dtype=torch.bool)
    special[:, :max(0, L - n_patches)] = True
    return {"pixel_values": x, "attention_mask": torch.ones(x.shape[0], L, dtype=torch.long),
            "special_tokens_mask": special}


def generated_images(n: int, size: int = 224, channels: int = 3, seed: int = 0) -> torch.Tensor:
    """``n`` deterministic synthetic images ``(n, channels, size, size)``, roughly standardized.

    Each image is a sum of a few oriented sinusoidal gratings, a soft disc and a colour gradient with
    seeded random parameters (``torch.Generator``): structured enough for attention to have something to
    select, reproducible without any downloaded data set.

    Examples
    --------
    >>> import torch
    >>> imgs = generated_images(2, size=32)
    >>> imgs.shape, round(float(imgs[0].std()), 3)
    (torch.Size([2, 3, 32, 32]), 1.0)
    >>> bool(torch.equal(imgs, generated_images(2, size=32, seed=0)))
    True
    """
    g = torch.Generator().manual_seed(seed)
    t = torch.linspace(-1, 1, size)
    yy, xx = torch.meshgrid(t, t, indexing="ij")
    out = torch.empty(n, channels, size, size)
    for k in range(n):
        img = torch.zeros(channels, size, size)
        for _ in range(3):
            theta, freq, phase = torch.rand(3, generator=g) * torch.tensor([3.1416, 12.0, 6.2832])
            amp = torch.rand(channels, 1, 1, generator=g)
            img += amp * torch.sin(freq * (xx * torch.cos(theta) + yy * torch.sin(theta)) + phase)
        cx, cy, r = torch.rand(3, generator=g) * torch.tensor([1.6, 1.6, 0.5]) - torch.tensor([0.8, 0.8, -0.1])
        disc = torch.sigmoid((r - ((xx - cx) ** 2 + (yy - cy) ** 2).sqrt()) * 20)
        img += disc * (torch.rand(channels, 1, 1, generator=g) * 2 - 1) + (torch.rand(channels, 1, 1, generator=g)
                                                                             * xx + yy * 0.3)
        out[k] = (img - img.mean()) / img.std().clamp_min(1e-6)
    return out
