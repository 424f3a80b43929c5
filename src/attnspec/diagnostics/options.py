"""``DiagnoseOptions``: every option of a diagnosis in one frozen object, each constraint declared once as data.

A constraint is an object that says whether a value satisfies it and how to describe the allowed values
(after scikit-learn's parameter validation): :class:`Interval` (integers or real numbers in a range),
:class:`OneOf` (a set of strings), :class:`Boolean` and ``None`` (the option may be left unset). A field's
constraints are the ``allowed`` entry of its metadata; the object checks every field once, at
construction, and raises :class:`OptionError` naming the option, the allowed values and the value given.
The constraints are introspectable (:meth:`DiagnoseOptions.constraints`), so that the command line derives
its flags' checks from them (:func:`parse_flag`) and tests generate invalid values from them
(:func:`invalid_values`).

The options that describe *where* a diagnosis runs (a Dask client, workers, threads, shards) are not here:
they change no number of the result (:func:`attnspec.diagnose`'s ``client``, ``n_workers``, ``n_shards``,
``torch_threads``).
"""
from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass, field
from typing import Any

from ..seeding import MAX_SEED
from .statistics.bootstrap import MIN_TEXTS_FOR_INTERVALS, N_BOOT
from .statistics.devices import STATISTICS_DEVICES
from .statistics.selection import DIFFUSE_THRESHOLD, MIN_TOKENS_FOR_LABEL
from .statistics.spectral import REMOVAL_SPECTRA

__all__ = ["DiagnoseOptions", "OptionError", "Interval", "OneOf", "Boolean", "invalid_values", "parse_flag"]

#: Default budget of one tile of attention weights (bytes, float32).
DEFAULT_TILE_BYTES = 4 * 2 ** 20
#: Most bootstrap replicates (each keeps about 1 kB per head: 10,000 replicates of a 144-head model hold 1.5 GB).
MAX_N_BOOT = 10_000
#: Removal modes (``--removal``, :mod:`.pipeline.head_removal`).
MODES = ("exact", "sampled", "screened", "first-order", "none")
#: The modes in which ``removal_texts='auto'`` grows the sample until the heads' ranking is predicted to agree
#: with the whole corpus' (every head removed exactly on every text of the sample).
ADAPTIVE_MODES = ("exact", "sampled")
#: Removal modes accepted by ``removal``: :data:`.pipeline.removal_plan.MODES` and ``'auto'``.
REMOVAL_CHOICES = MODES + ("auto",)


class OptionError(ValueError):
    """An option outside its allowed values; ``option`` names it (the message: ``NAME must be ALLOWED, got V``).

    Examples
    --------
    >>> err = OptionError("n_boot", "an integer >= 0", -1)
    >>> str(err), err.option, isinstance(err, ValueError)
    ('n_boot must be an integer >= 0, got -1', 'n_boot', True)
    """

    def __init__(self, option: str, allowed: str, value: Any):
        self.option, self.allowed, self.value = option, allowed, value
        super().__init__(f"{option} must be {allowed}, got {value!r}")


@dataclass(frozen=True)
class Interval:
    """Numbers of ``kind`` (``int`` or ``float``; a float interval takes integers too, never bools) between
    ``low`` and ``high`` (``None``: unbounded), each end closed unless named in ``open``.

    Examples
    --------
    >>> str(Interval(int, 2)), str(Interval(float, 0, 1, open="low"))
    ('an integer >= 2', 'a number in (0, 1]')
    >>> Interval(int, 2).allows(3), Interval(int, 2).allows(2.0), Interval(float, 0, 1, open="low").allows(0)
    (True, False, False)
    """

    kind: type
    low: float | None = None
    high: float | None = None
    open: str = ""          # "", "low", "high" or "both"

    def allows(self, v: Any) -> bool:
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            return False
        if self.kind is int and not isinstance(v, numbers.Integral):
            return False
        if isinstance(v, float) and not math.isfinite(v):
            return False
        lo_open, hi_open = self.open in ("low", "both"), self.open in ("high", "both")
        if self.low is not None and (v < self.low or (lo_open and v == self.low)):
            return False
        return not (self.high is not None and (v > self.high or (hi_open and v == self.high)))

    def __str__(self) -> str:
        what = "an integer" if self.kind is int else "a number"
        lo_open, hi_open = self.open in ("low", "both"), self.open in ("high", "both")
        num = lambda v: str(v) if self.kind is int else f"{v:g}"  # noqa: E731  (integers exactly: 2**63 - 2)
        if self.low is not None and self.high is not None:
            return f"{what} in {'(' if lo_open else '['}{num(self.low)}, {num(self.high)}{')' if hi_open else ']'}"
        if self.low is not None:
            return f"{what} {'>' if lo_open else '>='} {num(self.low)}"
        if self.high is not None:
            return f"{what} {'<' if hi_open else '<='} {num(self.high)}"
        return f"a finite {'integer' if self.kind is int else 'number'}"

    def invalid(self) -> list:
        """Values just outside the interval, and values of the wrong kind."""
        out: list = ["1", True, float("nan")]
        step = 1 if self.kind is int else 1e-9
        if self.low is not None:
            out.append(self.low if self.open in ("low", "both") else self.low - step)
        if self.high is not None:
            out.append(self.high if self.open in ("high", "both") else self.high + step)
        if self.kind is int:
            out.append(2.5)
        return out


@dataclass(frozen=True)
class OneOf:
    """One of the strings ``options``.

    Examples
    --------
    >>> c = OneOf(("exact", "none")); str(c), c.allows("none"), c.allows("None")
    ("one of 'exact', 'none'", True, False)
    """

    options: tuple

    def allows(self, v: Any) -> bool:
        return isinstance(v, str) and v in self.options

    def __str__(self) -> str:
        return repr(self.options[0]) if len(self.options) == 1 else "one of " + ", ".join(map(repr, self.options))

    def invalid(self) -> list:
        return ["not-an-option", 1]


@dataclass(frozen=True)
class Boolean:
    """``True`` or ``False`` (not 0 or 1).

    Examples
    --------
    >>> Boolean().allows(False), Boolean().allows(0)
    (True, False)
    """

    def allows(self, v: Any) -> bool:
        return isinstance(v, bool)

    def __str__(self) -> str:
        return "True or False"

    def invalid(self) -> list:
        return [1, "yes"]


@dataclass(frozen=True)
class Text:
    """Any string."""

    def allows(self, v: Any) -> bool:
        return isinstance(v, str)

    def __str__(self) -> str:
        return "a string"

    def invalid(self) -> list:
        return [1]


def _option(default: Any, *allowed: Any, doc: str) -> Any:
    """A dataclass field with its constraints (``None`` among them: may be left unset) and its one-line doc."""
    return field(default=default, metadata={"allowed": allowed, "doc": doc})


def describe(allowed: tuple) -> str:
    """The allowed values of a field in words, e.g. ``"an integer >= 1 or 'auto' or None"``."""
    return " or ".join("None" if c is None else str(c) for c in allowed)


def _allows(allowed: tuple, v: Any) -> bool:
    return any((v is None) if c is None else c.allows(v) for c in allowed)


@dataclass(frozen=True)
class DiagnoseOptions:
    """The options of a diagnosis (:func:`attnspec.diagnose`), checked once at construction.

    Every field states its allowed values (:meth:`constraints`); an invalid value raises
    :class:`OptionError` (a ``ValueError``) naming the field. ``DiagnoseOptions(...)`` and the keyword
    arguments of :func:`attnspec.diagnose` are the same thing: ``diagnose(m, tok, texts, n_boot=50)`` builds
    ``DiagnoseOptions(n_boot=50)``. :meth:`replace` returns a checked copy with some fields changed.

    Examples
    --------
    >>> o = DiagnoseOptions(n_texts=8, removal="none")
    >>> o.n_texts, o.removal, o.n_boot
    (8, 'none', 200)
    >>> o.replace(n_boot=50).n_boot
    50
    >>> DiagnoseOptions(max_length=1)
    Traceback (most recent call last):
    ...
    attnspec.diagnostics.options.OptionError: max_length must be an integer >= 2, got 1
    >>> DiagnoseOptions.constraints()["removal_texts"]
    "an integer >= 1 or 'auto' or None"
    """

    # --- texts
    n_texts: int | None = _option(None, Interval(int, 1), None, doc="texts to diagnose, the first of those given "
                                  "or of the built-in corpus (default: all given; built-in: 64 for encoders, 16 "
                                  "for causal LMs; attnspec.diagnostics.pipeline.texts)")
    max_length: int = _option(128, Interval(int, 2), doc="tokens per text at most (longer texts are truncated)")
    bucket_size: int = _option(16, Interval(int, 1), doc="texts per length bucket of the statistics' passes")
    pack: bool | None = _option(None, Boolean(), None, doc="join built-in sentences into texts of max_length "
                                "tokens (default: for causal LMs)")
    spectra_texts: int | str = _option("auto", Interval(int, MIN_TEXTS_FOR_INTERVALS), OneOf(("auto", "all")),
                                       doc="texts whose output spectra are taken (spectral and selection columns; "
                                           "the fits and dependence statistics use every text): a seeded sample of "
                                           "this many, 'all', or 'auto': at least 32 texts and 2,048 eigenvalues a "
                                           "head spectrum, doubled until the selection verdicts are predicted to "
                                           "agree with all texts' on 95 % of heads")
    removal_spectra: str = _option(REMOVAL_SPECTRA[0], OneOf(REMOVAL_SPECTRA), doc="the layer's spectrum without each head "
                                   "(removal_spec_shift): 'ritz' (Rayleigh-Ritz values on blocks of 32 of the "
                                   "layer's eigenvectors: one eigendecomposition a text, exact to first order and in "
                                   "the mean, exact for texts of at most 32 tokens) or 'exact' (one a head and text)")
    # --- labels and intervals
    threshold: float = _option(DIFFUSE_THRESHOLD, Interval(float, 0), doc="selection-score threshold of the "
                               "labels (default log 2)")
    min_tokens: int = _option(MIN_TOKENS_FOR_LABEL, Interval(int, 0), doc="fewest real tokens for a label")
    n_boot: int = _option(N_BOOT, Interval(int, 0, MAX_N_BOOT), doc="Poisson-bootstrap replicates over texts (0 to 9: "
                          "no intervals, every verdict undetermined; each replicate keeps about 1 kB per head)")
    seed: int = _option(0, Interval(int, 0, MAX_SEED), doc="seed of the resampling: the bootstrap weights and "
                        "the seeded samples (spectra texts, removal texts and positions, screened heads)")
    reference_seed: int = _option(0, Interval(int, 0, MAX_SEED), doc="seed of the reference draws that define the "
                                  "spectral statistics (the Gaussian equivalents' noise, the null heads, the free "
                                  "rotation, the key null), fixed apart from seed so that a rerun with another seed "
                                  "gives the same scores; their sampling variance is inside every interval")
    # --- head removal
    removal: str | bool = _option("auto", OneOf(REMOVAL_CHOICES), Boolean(), doc="head removal mode "
                                  "(attnspec.diagnostics.pipeline.head_removal); True/False: 'exact'/'none'")
    mean_ablation: bool = _option(False, Boolean(), doc="also remove heads by mean ablation")
    gradient: bool = _option(True, Boolean(), doc="Michel et al. gradient importance")
    removal_positions: int | None = _option(None, Interval(int, 1), None, doc="positions per text scored by "
                                            "exact removal (default all; 32 screened)")
    removal_texts: int | str | None = _option(None, Interval(int, 1), OneOf(("auto",)), None,
                                              doc="texts of every removal column (default all; 'auto' in "
                                                  "sampled mode)")
    removal_vocab: int | None = _option(None, Interval(int, 1), None, doc="words per position of the LM loss "
                                        "(default the whole vocabulary; 1,024 sampled)")
    removal_target: float | None = _option(None, Interval(float, 0, 1, open="low"), None,
                                           doc="removal_texts='auto': predicted rank agreement to reach "
                                               "(default 0.92)")
    screen_top: int | None = _option(None, Interval(int, 0), None, doc="screened removal: heads of largest "
                                     "first-order effect removed exactly")
    screen_sample: int | None = _option(None, Interval(int, 0), None, doc="screened removal: other heads drawn "
                                        "and removed exactly")
    removal_bucket_size: int = _option(4, Interval(int, 1), doc="texts per length bucket in exact removal")
    max_tokens: int = _option(16384, Interval(int, 1), doc="tokens per ablation pass (heads removed per pass "
                              "= max_tokens / (B L))")
    # --- resources and reporting (no number of the result depends on them)
    tile_bytes: int = _option(DEFAULT_TILE_BYTES, Interval(int, 1), doc="bytes of one tile of recomputed "
                              "attention weights")
    reuse_forward: bool | None = _option(None, Boolean(), None, doc="keep the first forward pass' records on "
                                         "disk for the spectra (default: when the model is on the CPU)")
    statistics_device: str = _option("cpu", OneOf(STATISTICS_DEVICES), doc="where the tile statistics, Grams and "
                                     "sums run: 'cpu', or 'model' (the model's device: CUDA; MPS has no float64, "
                                     "so the CPU there); equal up to floating-point rounding")
    progress: bool = _option(False, Boolean(), doc="progress bars")
    model_name: str | None = _option(None, Text(), None, doc="the model's name in the summary")

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if not _allows(f.metadata["allowed"], v):
                raise OptionError(f.name, describe(f.metadata["allowed"]), v)
        explicit = {True: "exact", False: "none"}.get(self.removal, self.removal)
        if self.removal_texts == "auto" and explicit not in ADAPTIVE_MODES + ("auto",):
            raise OptionError("removal_texts", f"an integer >= 1 or None with removal {explicit!r} ('auto' "
                              f"applies to removal {' or '.join(map(repr, ADAPTIVE_MODES))})", "auto")

    @classmethod
    def constraints(cls) -> dict[str, str]:
        """``field -> allowed values in words``."""
        return {f.name: describe(f.metadata["allowed"]) for f in dataclasses.fields(cls)}

    @classmethod
    def allowed(cls, name: str) -> tuple:
        """The constraints of field ``name`` (``None`` among them: the field may be unset)."""
        return {f.name: f.metadata["allowed"] for f in dataclasses.fields(cls)}[name]

    @classmethod
    def of(cls, options: "DiagnoseOptions | None" = None, **kwargs) -> "DiagnoseOptions":
        """``options`` with ``kwargs`` changed, or ``DiagnoseOptions(**kwargs)``; an unknown keyword raises
        ``TypeError`` naming it and the known ones."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise TypeError(f"unknown diagnosis options {unknown} (known: {sorted(known)})")
        if options is None:
            return cls(**kwargs)
        if not isinstance(options, cls):
            raise TypeError(f"options must be a DiagnoseOptions, got {type(options).__name__}")
        return options.replace(**kwargs) if kwargs else options

    def replace(self, **changes) -> "DiagnoseOptions":
        """A checked copy with ``changes``."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def invalid_values(name: str) -> list:
    """Values that option ``name`` must refuse, generated from its constraints (for tests).

    Examples
    --------
    >>> invalid_values("removal_target")
    ['1', True, nan, 0, 1.000000001]
    """
    allowed = DiagnoseOptions.allowed(name)
    out = []
    for c in allowed:
        if c is not None:
            out += [v for v in c.invalid() if not _allows(allowed, v)]
    if None not in allowed:
        out.append(None)
    return out


def parse_flag(name: str, text: str) -> Any:
    """The command line's value ``text`` of option ``name``, read by its constraints (an integer, a number,
    a string choice, in the order declared); ``ValueError`` with the allowed values when none reads it.

    Examples
    --------
    >>> parse_flag("removal_texts", "auto"), parse_flag("removal_texts", "1.2e1"), parse_flag("removal_target", ".9")
    ('auto', 12, 0.9)
    >>> parse_flag("seed", "9007199254740993")          # exactly, not through a float
    9007199254740993
    >>> parse_flag("max_length", "1")
    Traceback (most recent call last):
    ...
    ValueError: must be an integer >= 2
    """
    allowed = DiagnoseOptions.allowed(name)
    for c in allowed:
        v: Any = text
        if isinstance(c, Interval):
            try:                         # integers exactly (a seed of 2**53 + 1 is not read through a float)
                v = int(text.strip().replace("_", "")) if c.kind is int else float(text)
            except ValueError:
                try:
                    v = float(text)
                except ValueError:
                    continue
            if c.kind is int and isinstance(v, float):     # '12.0' and '1.2e1' read as 12
                if not v.is_integer():
                    continue
                v = int(v)
        if c is not None and c.allows(v):
            return v
    raise ValueError(f"must be {describe(tuple(c for c in allowed if c is not None))}")
