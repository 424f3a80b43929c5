"""SPD-manifold attention: attention over tangent-space covariance tokens.

Architecture (input x [B, C, T] volts; nb frequency bands, S time segments, N = nb * S tokens)::

    filter bank     fixed FIR band-pass filters (scipy ``firwin``, zero-phase by symmetric kernel),
                    one per band in ``bands`` (default mu 8-13, low beta 13-20, high beta 20-30 Hz)
                                                              -> [B, nb, C, T]
    segments        S equal segments of each band-passed trial -> [B, nb, S, C, T/S]
    covariances     Sigma = X X^T / n + shrinkage * tr(Sigma)/C * I    (SPD)  [B, nb, S, C, C]
    tangent space   at a reference point P_b per band, fitted on the training set by ``prepare``:
                      metric "riemann":  T = log(P_b^-1/2 Sigma P_b^-1/2), P_b = Riemannian mean
                      metric "logeuclid": T = log(Sigma) - log(P_b),       P_b = log-Euclidean mean
                    vectorized as pyriemann's ``upper`` (diagonal, sqrt(2) x off-diagonal)
                                                              -> [B, N, C(C+1)/2]
    tokens          Linear(C(C+1)/2, D) + band embedding + segment embedding      [B, N, D]
    attention       n_layers x pre-norm transformer layer; MHA over the N covariance tokens
                    (block ``layers.{i}.attn``, path "spd")
    head            LN -> mean over tokens -> Linear(D, n_classes)

Everything before the token embedding has no learned parameter (filter bank, covariance,
log-map), so it runs without gradient; pyriemann computes the reference means, and its
``tangent_space`` is the cross-check of :meth:`SPDAttentionNet.tangent_vectors`.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .base import ZooModel
from .staged import TransformerLayer

__all__ = ["SPDAttentionNet", "fir_bank", "covariances", "upper"]


def fir_bank(bands, sfreq: float, numtaps: int) -> np.ndarray:
    """[nb, numtaps] linear-phase band-pass FIR filters (``scipy.signal.firwin``, Hamming window).

    Examples
    --------
    >>> import numpy as np
    >>> h = fir_bank([(8.0, 13.0), (13.0, 20.0)], sfreq=128.0, numtaps=17)
    >>> h.shape, bool(np.allclose(h, h[:, ::-1]))                  # symmetric taps: linear phase
    ((2, 17), True)
    """
    from scipy.signal import firwin

    return np.stack([firwin(numtaps, list(b), pass_zero=False, fs=sfreq) for b in bands])


def covariances(x: torch.Tensor, shrinkage: float) -> torch.Tensor:
    """x [..., C, n] -> shrunk sample covariance [..., C, C] (x assumed zero-mean band-passed).

    ``(1 - s) x x^T / n + s (tr / C) I`` with ``s = shrinkage`` in [0, 1].

    Examples
    --------
    >>> import torch
    >>> x = torch.tensor([[1.0, -1.0], [2.0, -2.0]])             # C = 2 channels, n = 2 samples
    >>> covariances(x, 0.5)
    tensor([[1.7500, 1.0000],
            [1.0000, 3.2500]])
    """
    C, n = x.shape[-2:]
    S = x @ x.transpose(-1, -2) / n
    tr = torch.diagonal(S, dim1=-2, dim2=-1).sum(-1)[..., None, None] / C
    return (1 - shrinkage) * S + shrinkage * tr * torch.eye(C, dtype=x.dtype, device=x.device)


def _sym_fn(M: torch.Tensor, fn) -> torch.Tensor:
    w, U = torch.linalg.eigh(M)
    return (U * fn(w)[..., None, :]) @ U.transpose(-1, -2)


def upper(M: torch.Tensor) -> torch.Tensor:
    """[..., C, C] symmetric -> [..., C(C+1)/2] (diagonal, sqrt(2) x upper off-diagonal; pyriemann order).

    The sqrt(2) weight makes the Euclidean norm of the vector the Frobenius norm of the matrix.

    Examples
    --------
    >>> import torch
    >>> M = torch.tensor([[2.0, 1.0], [1.0, 3.0]])
    >>> upper(M), bool(torch.isclose(upper(M).norm(), M.norm()))
    (tensor([2.0000, 1.4142, 3.0000]), True)
    """
    C = M.shape[-1]
    i, j = torch.triu_indices(C, C)
    coef = torch.where(i == j, 1.0, 2.0 ** 0.5).to(M.dtype)
    return M[..., i, j] * coef


class SPDAttentionNet(ZooModel):
    """SPD-manifold attention network (see module docstring for the architecture).

    Examples
    --------
    >>> import torch
    >>> m = SPDAttentionNet(3, 128, 2, n_segments=2, numtaps=17, d_model=8, n_heads=2)
    >>> m.n_tokens, m(torch.randn(2, 3, 128)).shape                    # 3 bands x 2 segments
    (6, torch.Size([2, 2]))
    """

    arch = "spd"

    def __init__(self, n_channels: int, n_times: int, n_classes: int, sfreq: float = 128.0,
                 bands: tuple = ((8.0, 13.0), (13.0, 20.0), (20.0, 30.0)), n_segments: int = 4,
                 numtaps: int = 65, shrinkage: float = 0.1, metric: str = "riemann", d_model: int = 32,
                 n_heads: int = 4, n_layers: int = 1, dropout: float = 0.2):
        bands = [list(map(float, b)) for b in bands]
        if metric not in ("riemann", "logeuclid"):
            raise ValueError("metric must be 'riemann' or 'logeuclid'")
        super().__init__(n_channels, n_times, n_classes, sfreq=sfreq, bands=bands, n_segments=n_segments,
                         numtaps=numtaps, shrinkage=shrinkage, metric=metric, d_model=d_model, n_heads=n_heads,
                         n_layers=n_layers, dropout=dropout)
        nb, C = len(bands), n_channels
        self.register_buffer("fir", torch.tensor(fir_bank(bands, sfreq, numtaps), dtype=torch.float32))
        self.register_buffer("ref_isqrt", torch.eye(C).repeat(nb, 1, 1))   # P_b^-1/2 (riemann)
        self.register_buffer("ref_log", torch.zeros(nb, C, C))             # log P_b (logeuclid)
        self.n_tokens = nb * n_segments
        self.embed = nn.Linear(C * (C + 1) // 2, d_model)
        self.band_emb = nn.Parameter(0.02 * torch.randn(nb, 1, d_model))
        self.seg_emb = nn.Parameter(0.02 * torch.randn(1, n_segments, d_model))
        self.layers = nn.ModuleList([TransformerLayer(d_model, n_heads, dropout, path="spd") for _ in range(n_layers)])
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, n_classes)

    # -- fixed SPD front end ---------------------------------------------------------------------
    @torch.no_grad()
    def segment_covariances(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, C, T] volts -> SPD matrices [B, nb, S, C, C] (float64)."""
        B, C, T = x.shape
        z = self.normalize(x).reshape(B * C, 1, T)
        K = self.fir.shape[-1]
        zf = torch.nn.functional.conv1d(z, self.fir[:, None], padding=K // 2)      # [B*C, nb, T]
        zf = zf.reshape(B, C, -1, T).transpose(1, 2)                               # [B, nb, C, T]
        S = self.config["n_segments"]
        n = T // S
        seg = zf[..., : S * n].reshape(B, zf.shape[1], C, S, n).transpose(2, 3)    # [B, nb, S, C, n]
        return covariances(seg.double(), self.config["shrinkage"])

    @torch.no_grad()
    def tangent_vectors(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, C, T] -> tangent vectors [B, nb*S, C(C+1)/2] at the reference points."""
        covs = self.segment_covariances(x)
        if self.config["metric"] == "riemann":
            W = self.ref_isqrt.double()[None, :, None]
            T = _sym_fn(W @ covs @ W, torch.log)
        else:
            T = _sym_fn(covs, torch.log) - self.ref_log.double()[None, :, None]
        B = x.shape[0]
        return upper(T).reshape(B, -1, T.shape[-1] * (T.shape[-1] + 1) // 2).float()

    @torch.no_grad()
    def prepare(self, X) -> None:
        """Input normalization, then per-band reference points from the training covariances."""
        super().prepare(X)
        from pyriemann.geometry.base import invsqrtm, logm
        from pyriemann.geometry.mean import mean_logeuclid, mean_riemann

        X = torch.as_tensor(np.asarray(X), dtype=torch.float32)
        covs = torch.cat([self.segment_covariances(X[i:i + 64]) for i in range(0, len(X), 64)]).numpy()
        for b in range(covs.shape[1]):
            cb = covs[:, b].reshape(-1, *covs.shape[-2:])
            if self.config["metric"] == "riemann":
                self.ref_isqrt[b] = torch.as_tensor(invsqrtm(mean_riemann(cb)), dtype=torch.float32)
            else:
                self.ref_log[b] = torch.as_tensor(logm(mean_logeuclid(cb)), dtype=torch.float32)

    # -- attention part --------------------------------------------------------------------------
    def tokens(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, C, T] -> covariance tokens [B, nb*S, D] (band-major: token = b * S + s)."""
        t = self.embed(self.tangent_vectors(x))
        B, N, D = t.shape
        t = t.reshape(B, -1, self.config["n_segments"], D) + self.band_emb + self.seg_emb
        return t.reshape(B, N, D)
