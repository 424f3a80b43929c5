"""The one configuration type every layer of attnspec passes around.

An :class:`MHSAConfig` describes a multi-head self-attention layer in the random-matrix
model of docs/theory.md (section "Model and normalization"):

* inputs ``X`` (``seq_len x d_model``): orthonormal rows (convention A, ``X X^T = I_l``) or
  iid ``N(0, 1/d)`` entries (convention B);
* per head ``h``: ``W_Q^h, W_K^h`` (``d x d_qk[h]``), ``W_V^h`` (``d x d_v[h]``) iid ``N(0, 1)``,
  ``W_O^h`` (``d_v[h] x d_out``) iid ``N(0, 1/D_v)`` with ``D_v = sum_h d_v[h]``;
* scores ``S_h = X W_Q^h (W_K^h)^T X^T / sqrt(d_qk[h])``, attention
  ``A_h = rowsoftmax(beta S_h)``, output ``O = sum_h A_h X W_V^h W_O^h``;
* key/value sharing in contiguous groups (``key_groups = H``: ordinary MHA, ``1``: multi-query,
  in between: grouped-query), and within-head key-value dependence: ``values='tied-to-keys'``
  (``W_V^h = W_K^h``) or ``values='key-dependent'`` (``V_h = K_h M_h``, ``M_h`` iid
  ``N(0, value_key_scale^2 / d_qk[h])`` so that ``V_h`` has unit-variance entries when the scale is 1).

The proportional-limit ratios are ``gamma = l/d``, ``psi_h = d_qk[h]/d``, ``phi_h = d_v[h]/d`` and
``omega = d_out/d``. The configuration validates itself on construction; every violated rule raises
:class:`ConfigError` naming the parameter, the offending value and the allowed range.
"""
from __future__ import annotations

import json
import math
import tomllib
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal

import tomli_w

__all__ = ["ConfigError", "MHSAConfig", "INPUTS", "VALUES", "TARGETS", "CENTERINGS", "BETA_MAX", "sigma2_of_beta",
           "alpha2_of_beta", "alpha_of_beta"]

INPUTS = ("orthonormal", "gaussian")
VALUES = ("independent", "tied-to-keys", "key-dependent")
TARGETS = ("output", "attention")
CENTERINGS = ("tokens", "values")
#: Largest inverse temperature accepted: ``alpha^2 = e^{beta^2} - 1 - beta^2`` must stay finite.
BETA_MAX = 25.0


class ConfigError(ValueError):
    """An invalid MHSA configuration. ``parameter``, ``value`` and ``allowed`` say what and why.

    Examples
    --------
    >>> err = ConfigError("beta", -1.0, "must lie in [0, 25]")
    >>> str(err), err.parameter
    ('invalid beta=-1.0: must lie in [0, 25]', 'beta')
    """

    def __init__(self, parameter: str, value: Any, allowed: str):
        self.parameter, self.value, self.allowed = parameter, value, allowed
        super().__init__(f"invalid {parameter}={value!r}: {allowed}")


def sigma2_of_beta(beta: float) -> float:
    """Total variance ``sigma^2 = e^{beta^2} - 1`` of ``l A_ij`` for softmax attention with ``N(0, 1)`` scores.

    The one definition in the package (:attr:`MHSAConfig.sigma2`, the closed forms, the simulator and the
    identification laws call it, or :func:`alpha2_of_beta`). ``|beta|`` must not exceed :data:`BETA_MAX`.

    Examples
    --------
    >>> round(sigma2_of_beta(1.0), 6)
    1.718282
    """
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not abs(beta) <= BETA_MAX:
        raise ConfigError("beta", beta, f"must be a finite number with |beta| <= {BETA_MAX:g} (e^(beta^2) must stay finite)")
    return math.expm1(beta * beta)


def alpha2_of_beta(beta: float) -> float:
    """Nonlinear-remainder variance ``alpha^2 = e^{beta^2} - 1 - beta^2`` of the Gaussian equivalent.

    The surrogate attention is ``(1 1^T + beta S + alpha Z)/l``: ``beta^2`` is the variance of the linear
    part, ``alpha^2 >= 0`` the rest of :func:`sigma2_of_beta` (``beta^4/2`` near 0).

    Examples
    --------
    >>> round(alpha2_of_beta(1.0), 6), alpha2_of_beta(0.0)
    (0.718282, 0.0)
    """
    return max(sigma2_of_beta(beta) - beta * beta, 0.0)


def alpha_of_beta(beta: float) -> float:
    """``alpha = sqrt(e^{beta^2} - 1 - beta^2)``, the scale of the surrogate's independent noise.

    Examples
    --------
    >>> round(alpha_of_beta(1.0), 6)
    0.847515
    """
    return math.sqrt(alpha2_of_beta(beta))


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _check_positive_int(name: str, value: Any, minimum: int = 1) -> None:
    if not _is_int(value) or value < minimum:
        raise ConfigError(name, value, f"must be an integer >= {minimum}")


def _per_head(name: str, value: Any) -> tuple[int, ...]:
    if _is_int(value):
        value = (value,)
    try:
        widths = tuple(value)
    except TypeError:
        raise ConfigError(name, value, "must be a positive integer or a sequence of them, one per head") from None
    if not widths:
        raise ConfigError(name, value, "must list at least one head")
    for w in widths:
        if not _is_int(w) or w < 1:
            raise ConfigError(name, value, "every per-head width must be an integer >= 1")
    return widths


@dataclass(frozen=True)
class MHSAConfig:
    """An MHSA layer in the random-matrix model (see module docstring for the math).

    Parameters
    ----------
    seq_len : int
        Sequence length ``l`` (>= 2). With ``inputs='orthonormal'``, ``l <= d_model``.
    d_model : int
        Model width ``d``.
    d_qk, d_v : tuple of int
        Per-head query/key and value widths (one entry per head; a single int means one head).
        Use :meth:`uniform` to give a head count and one width for all heads.
    d_out : int
        Output width of the concatenated output projection.
    beta : float
        Inverse temperature, ``0 <= beta <= 25``.
    inputs : {'orthonormal', 'gaussian'}
        Convention A (orthonormal rows) or convention B (iid ``N(0, 1/d)``).
    key_groups, value_groups : int or None
        Number of distinct ``W_K`` (``W_V``) matrices; heads are grouped contiguously
        (head ``h`` belongs to group ``h // (H // groups)``). ``None`` means ``H`` (no sharing).
    values : {'independent', 'tied-to-keys', 'key-dependent'}
        How values relate to keys inside a head.
    value_key_scale : float
        Scale of ``M_h`` for ``values='key-dependent'`` (``V_h = K_h M_h``); must be 1 otherwise.
    target : {'output', 'attention'}
        Spectrum of the centered output ``Y`` or of the single-head attention matrix ``Y_att``.
    centering : {'tokens', 'values'}
        ``'tokens'``: ``Y = sqrt(l/d_out) P O`` with ``P = I - 11^T/l``. ``'values'``: subtract
        ``(1/l) 1 1^T sum_h X W_V^h W_O^h`` instead. Both have the same limiting law.

    Examples
    --------
    >>> cfg = MHSAConfig.uniform(seq_len=128, d_model=256, heads=4, beta=0.5)
    >>> cfg.d_qk, cfg.gamma, round(cfg.sigma2, 4)
    ((64, 64, 64, 64), 0.5, 0.284)
    >>> MHSAConfig.from_json(cfg.to_json()) == cfg
    True
    """

    seq_len: int
    d_model: int
    d_qk: tuple[int, ...]
    d_v: tuple[int, ...]
    d_out: int
    beta: float = 1.0
    inputs: Literal["orthonormal", "gaussian"] = "orthonormal"
    key_groups: int | None = None
    value_groups: int | None = None
    values: Literal["independent", "tied-to-keys", "key-dependent"] = "independent"
    value_key_scale: float = 1.0
    target: Literal["output", "attention"] = "output"
    centering: Literal["tokens", "values"] = "tokens"

    # ------------------------------------------------------------------ construction
    def __post_init__(self) -> None:
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731 (frozen dataclass)
        set_("d_qk", _per_head("d_qk", self.d_qk))
        set_("d_v", _per_head("d_v", self.d_v))
        H = len(self.d_qk)
        if len(self.d_v) != H:
            raise ConfigError("d_v", self.d_v, f"must have one width per head ({H} heads from d_qk)")
        _check_positive_int("seq_len", self.seq_len, minimum=2)
        _check_positive_int("d_model", self.d_model)
        _check_positive_int("d_out", self.d_out)
        for name, allowed in (("inputs", INPUTS), ("values", VALUES), ("target", TARGETS), ("centering", CENTERINGS)):
            if getattr(self, name) not in allowed:
                raise ConfigError(name, getattr(self, name), f"must be one of {', '.join(allowed)}")
        if self.inputs == "orthonormal" and self.seq_len > self.d_model:
            raise ConfigError("seq_len", self.seq_len,
                              f"must be <= d_model={self.d_model} with orthonormal inputs (X X^T = I_l); "
                              "use inputs='gaussian' for l > d")
        if isinstance(self.beta, bool) or not isinstance(self.beta, (int, float)) or not 0.0 <= self.beta <= BETA_MAX:
            raise ConfigError("beta", self.beta, f"must be a finite number in [0, {BETA_MAX:g}] (e^(beta^2) must stay finite)")
        set_("beta", float(self.beta))
        for name in ("key_groups", "value_groups"):
            g = H if getattr(self, name) is None else getattr(self, name)
            if not _is_int(g) or not 1 <= g <= H or H % g:
                raise ConfigError(name, g, f"must be an integer in [1, {H}] that divides the number of heads H={H}")
            set_(name, g)
        self._check_shared_widths("key_groups", self.key_groups, self.d_qk, "d_qk")
        self._check_shared_widths("value_groups", self.value_groups, self.d_v, "d_v")
        self._check_values()
        if self.target == "attention" and H != 1:
            raise ConfigError("target", self.target, f"'attention' is the single-head attention matrix: needs 1 head, got {H}")

    def _check_shared_widths(self, name: str, groups: int, widths: tuple[int, ...], wname: str) -> None:
        size = len(widths) // groups
        for g in range(groups):
            block = set(widths[g * size:(g + 1) * size])
            if len(block) > 1:
                raise ConfigError(wname, widths, f"heads sharing one matrix ({name}={groups}) need equal {wname}; "
                                                 f"group {g} has {sorted(block)}")

    def _check_values(self) -> None:
        if self.values == "tied-to-keys":
            if self.d_v != self.d_qk:
                raise ConfigError("d_v", self.d_v, f"must equal d_qk={self.d_qk} when values='tied-to-keys' (W_V = W_K)")
            if self.value_groups != self.key_groups:
                raise ConfigError("value_groups", self.value_groups,
                                  f"must equal key_groups={self.key_groups} when values='tied-to-keys'")
        if self.values == "key-dependent" and self.value_groups % self.key_groups:
            raise ConfigError("value_groups", self.value_groups,
                              f"must be a multiple of key_groups={self.key_groups} when values='key-dependent' "
                              "(a shared V = K M needs a shared K)")
        scale = self.value_key_scale
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
            raise ConfigError("value_key_scale", scale, "must be a finite number > 0")
        if self.values != "key-dependent" and scale != 1.0:
            raise ConfigError("value_key_scale", scale, "only applies to values='key-dependent'; must be 1 otherwise")
        object.__setattr__(self, "value_key_scale", float(scale))

    @classmethod
    def uniform(cls, seq_len: int, d_model: int, heads: int = 1, d_qk: int | None = None,
                d_v: int | None = None, d_out: int | None = None, **kwargs: Any) -> "MHSAConfig":
        """``heads`` identical heads. Widths default to ``d_model // heads``; ``d_out`` to ``d_model``."""
        _check_positive_int("heads", heads)
        d_qk = d_model // heads if d_qk is None else d_qk
        d_v = d_qk if d_v is None else d_v
        _check_positive_int("d_qk", d_qk)
        _check_positive_int("d_v", d_v)
        return cls(seq_len=seq_len, d_model=d_model, d_qk=(d_qk,) * heads, d_v=(d_v,) * heads,
                   d_out=d_model if d_out is None else d_out, **kwargs)

    @classmethod
    def from_ratios(cls, d_model: int, gamma: float, psi: float | tuple[float, ...], phi: float | tuple[float, ...],
                    omega: float = 1.0, **kwargs: Any) -> "MHSAConfig":
        """Build from proportional-limit ratios: ``l = gamma d``, ``d_qk = psi d``, ``d_v = phi d``, ``d_out = omega d``.

        Widths are rounded to the nearest integer; ``psi``/``phi`` tuples give per-head ratios.
        """
        width = lambda r: max(1, int(round(r * d_model)))  # noqa: E731
        psi_t = psi if isinstance(psi, tuple) else (psi,)
        phi_t = phi if isinstance(phi, tuple) else (phi,) * len(psi_t)
        return cls(seq_len=width(gamma), d_model=d_model, d_qk=tuple(map(width, psi_t)),
                   d_v=tuple(map(width, phi_t)), d_out=width(omega), **kwargs)

    def replace(self, **changes: Any) -> "MHSAConfig":
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)

    def with_heads(self, heads: int) -> "MHSAConfig":
        """The same layer split into ``heads`` heads at fixed *total* widths ``sum_h d_qk^h`` and ``sum_h d_v^h``.

        Widths are split evenly (``heads`` must divide both totals). Sharing that divides the new head
        count is kept; ordinary multi-head attention (``key_groups = H``) stays ordinary.

        Examples
        --------
        >>> MHSAConfig.uniform(64, 64, heads=2).with_heads(4).d_v
        (16, 16, 16, 16)
        """
        _check_positive_int("heads", heads)
        tq, tv = sum(self.d_qk), sum(self.d_v)
        if tq % heads or tv % heads:
            raise ConfigError("heads", heads, f"must divide the total widths d_qk={tq} and d_v={tv} (fixed total width)")
        kg, vg = (heads if g == self.n_heads or heads % g else g for g in (self.key_groups, self.value_groups))
        return self.replace(d_qk=(tq // heads,) * heads, d_v=(tv // heads,) * heads, key_groups=kg, value_groups=vg)

    # ------------------------------------------------------------------ derived quantities
    @property
    def n_heads(self) -> int:
        return len(self.d_qk)

    @property
    def gamma(self) -> float:
        return self.seq_len / self.d_model

    @property
    def psi(self) -> tuple[float, ...]:
        return tuple(w / self.d_model for w in self.d_qk)

    @property
    def phi(self) -> tuple[float, ...]:
        return tuple(w / self.d_model for w in self.d_v)

    @property
    def omega(self) -> float:
        return self.d_out / self.d_model

    @property
    def sigma2(self) -> float:
        """Total variance ``e^{beta^2} - 1`` of ``l A_ij`` (linear plus nonlinear part): :func:`sigma2_of_beta`."""
        return sigma2_of_beta(self.beta)

    @property
    def alpha2(self) -> float:
        """Nonlinear-remainder variance ``alpha^2 = e^{beta^2} - 1 - beta^2``: :func:`alpha2_of_beta`."""
        return alpha2_of_beta(self.beta)

    def key_group(self, h: int) -> int:
        """Index of the ``W_K`` matrix head ``h`` uses."""
        return h // (self.n_heads // self.key_groups)

    def value_group(self, h: int) -> int:
        """Index of the ``W_V`` (or ``M``) matrix head ``h`` uses."""
        return h // (self.n_heads // self.value_groups)

    # ------------------------------------------------------------------ serialization
    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["d_qk"], d["d_v"] = list(self.d_qk), list(self.d_v)
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "MHSAConfig":
        known = {f.name for f in fields(cls)}
        if not isinstance(data, dict):
            raise ConfigError("configuration", type(data).__name__,
                              "must be a table/object of MHSAConfig fields (or hold an [mhsa] table)")
        data = data.get("mhsa", data)  # accept a [mhsa] table
        if not isinstance(data, dict):
            raise ConfigError("mhsa", type(data).__name__, "must be a table/object of MHSAConfig fields")
        data = dict(data)
        for key in data:
            if key not in known:
                raise ConfigError(key, data[key], f"unknown configuration key; known keys: {', '.join(sorted(known))}")
        for key in ("d_qk", "d_v"):
            if isinstance(data.get(key), list):
                data[key] = tuple(data[key])
        missing = [k for k in ("seq_len", "d_model", "d_qk", "d_v", "d_out") if k not in data]
        if missing:
            raise ConfigError(missing[0], None, "is required")
        return cls(**data)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_json(cls, text: str) -> "MHSAConfig":
        return cls.from_dict(json.loads(text))

    def to_toml(self) -> str:
        return tomli_w.dumps({"mhsa": {k: v for k, v in self.to_dict().items() if v is not None}})

    @classmethod
    def from_toml(cls, text: str) -> "MHSAConfig":
        return cls.from_dict(tomllib.loads(text))

    def save(self, path: str | Path) -> Path:
        """Write TOML (``.toml``) or JSON (anything else)."""
        path = Path(path)
        path.write_text(self.to_toml() if path.suffix == ".toml" else self.to_json())
        return path

    @classmethod
    def load(cls, path: str | Path) -> "MHSAConfig":
        """Read TOML (``.toml``) or JSON (anything else). A missing file raises ``FileNotFoundError``;
        an unreadable, non-UTF-8 or malformed file, or one whose content is not a configuration, raises
        :class:`ConfigError` naming the file."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"configuration file not found: {path}")
        kind = "TOML" if path.suffix == ".toml" else "JSON"
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise ConfigError("configuration file", str(path), f"must be UTF-8 text ({e.reason} at byte {e.start})") from None
        except OSError as e:
            raise ConfigError("configuration file", str(path), f"cannot be read: {e.strerror or e}") from None
        try:
            data = tomllib.loads(text) if kind == "TOML" else json.loads(text)
        except ValueError as e:  # TOMLDecodeError, JSONDecodeError
            raise ConfigError("configuration file", str(path), f"is not valid {kind}: {e}") from None
        return cls.from_dict(data)

    def describe(self) -> str:
        """One line for figure titles and logs."""
        H = self.n_heads
        heads = f"H={H}, d_qk={self.d_qk[0]}, d_v={self.d_v[0]}" if len(set(self.d_qk)) == len(set(self.d_v)) == 1 \
            else f"H={H}, d_qk={list(self.d_qk)}, d_v={list(self.d_v)}"
        share = "" if self.key_groups == self.value_groups == H else f", kv-groups=({self.key_groups},{self.value_groups})"
        vals = "" if self.values == "independent" else f", values={self.values}"
        if self.target == "attention":
            return f"attention l={self.seq_len}, d={self.d_model}, d_qk={self.d_qk[0]}, beta={self.beta:g}, {self.inputs}"
        return f"output l={self.seq_len}, d={self.d_model}, {heads}, d_out={self.d_out}, beta={self.beta:g}{share}{vals}, {self.inputs}"
