"""The text policy shared by ``attnspec diagnose`` and :func:`attnspec.diagnose`.

* ``texts='builtin'`` (or ``None``) takes ``n_texts`` texts of the built-in corpus (sentences of
  CPython standard-library docstrings, :mod:`attnspec.data`); causal LMs get them packed into texts of
  ``max_length`` tokens (``pack=None`` means: pack for causal LMs only);
* a list of strings is used as given (its first ``n_texts`` when ``n_texts`` is set);
* a file (:func:`read_texts`) holds one UTF-8 text per line; blank lines are skipped.

``n_texts=None`` means :data:`DEFAULT_N_TEXTS` for the model kind. Every count must be >= 1.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

__all__ = ["DEFAULT_N_TEXTS", "resolve_texts", "read_texts"]

#: Default number of texts per model kind.
DEFAULT_N_TEXTS = {"encoder": 64, "causal-lm": 16, "generic": 32}


def read_texts(path: str | Path) -> list[str]:
    """Non-blank lines of a UTF-8 file; ``ValueError`` naming the file when it has none or is not UTF-8."""
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise ValueError(f"texts file {str(p)!r} is not UTF-8 text ({e.reason} at byte {e.start})") from None
    texts = [t for t in lines if t.strip()]
    if not texts:
        raise ValueError(f"texts file {str(p)!r} has no non-blank line")
    return texts


def resolve_texts(texts: Sequence[str] | str | None, tokenizer: Any, kind: str, n_texts: int | None = None,
                  max_length: int = 128, pack: bool | None = None) -> tuple[list[str], str]:
    """``(texts, source)`` with ``source`` ``'builtin'`` or ``'user'`` (see module docstring)."""
    if n_texts is not None and (not isinstance(n_texts, int) or isinstance(n_texts, bool) or n_texts < 1):
        raise ValueError(f"n_texts must be an integer >= 1 (or None for the default), got {n_texts!r}")
    if texts is None or (isinstance(texts, str) and texts == "builtin"):
        from ..data import builtin_texts, packed_texts
        n = n_texts or DEFAULT_N_TEXTS.get(kind, 32)
        if pack if pack is not None else kind == "causal-lm":
            return packed_texts(tokenizer, n, max_length), "builtin"
        return builtin_texts(n), "builtin"
    if isinstance(texts, (str, Path)):
        raise ValueError("texts must be a list of strings or 'builtin' (read a file with attnspec.diagnostics.read_texts)")
    out = [str(t) for t in texts]
    if not out:
        raise ValueError("texts is empty")
    return (out[:n_texts] if n_texts else out), "user"
