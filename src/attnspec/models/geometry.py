"""The :class:`~attnspec.config.MHSAConfig` that describes a real attention layer's geometry."""
from __future__ import annotations

from ..config import BETA_MAX, MHSAConfig
from .protocol import AttentionSite

__all__ = ["config_of"]


def config_of(site: AttentionSite, seq_len: int, d_model: int | None = None, beta: float = 1.0) -> MHSAConfig:
    """``MHSAConfig`` with the site's head count, widths and key/value sharing.

    Grouped-query attention maps to ``key_groups = value_groups = n_kv_heads`` (Gemma 3 270M: 1).
    The width of the queries/keys is taken equal to the value width ``head_dim``; ``d_model``
    defaults to ``d_out``. Inputs use convention B (Gaussian rows), the closer of the two to a real
    model's normalized hidden states when ``seq_len`` may exceed ``d_model``.

    Parameters
    ----------
    site : AttentionSite
        A layer of an adapted model (:func:`attnspec.models.adapt`).
    seq_len : int
        Tokens per input ``l``.
    d_model : int, optional
        Input width ``d`` (default: the site's output width).
    beta : float
        Inverse temperature, clamped to ``[0, BETA_MAX]``.

    Examples
    --------
    >>> from torch import nn
    >>> from attnspec.models import adapt
    >>> layer = nn.TransformerEncoderLayer(d_model=16, nhead=4, dim_feedforward=32, batch_first=True)
    >>> cfg = config_of(adapt(layer).sites[0], seq_len=10)           # its self_attn: 4 heads of width 4
    >>> cfg.seq_len, cfg.d_model, cfg.d_qk, cfg.key_groups, cfg.inputs
    (10, 16, (4, 4, 4, 4), 4, 'gaussian')
    """
    d_model = site.d_out if d_model is None else d_model
    H = site.n_heads
    return MHSAConfig(seq_len=seq_len, d_model=d_model, d_qk=(site.head_dim,) * H, d_v=(site.head_dim,) * H,
                      d_out=site.d_out, beta=min(max(beta, 0.0), BETA_MAX), inputs="gaussian",
                      key_groups=site.n_kv_heads, value_groups=site.n_kv_heads)
