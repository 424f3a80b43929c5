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
    """The texts of a file: its non-blank lines.

    Parameters
    ----------
    path : str or pathlib.Path
        A UTF-8 text file, one text per line.

    Returns
    -------
    list of str
        The lines that are not blank, in order.

    Raises
    ------
    ValueError
        Naming the file, when it is not UTF-8 or has no non-blank line.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "texts.txt"
    >>> _ = f.write_text("The cat sat.\\n\\n   \\nA second text.\\n", encoding="utf-8")
    >>> read_texts(f)
    ['The cat sat.', 'A second text.']
    """
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
    """The texts of a diagnosis and where they come from (policy in the module docstring).

    Parameters
    ----------
    texts : list of str, 'builtin' or None
        The user's texts, or the built-in corpus (``'builtin'`` or ``None``). A file name is refused
        (read it with :func:`read_texts`).
    tokenizer : tokenizer
        The model's tokenizer (used to pack built-in texts for causal LMs).
    kind : str
        The adapter's kind (``'encoder'``, ``'causal-lm'``, ``'generic'``): the default count and packing.
    n_texts : int, optional
        How many texts (>= 1); default :data:`DEFAULT_N_TEXTS` of the kind for the built-in corpus, all of
        the user's texts otherwise.
    max_length : int
        Tokens per packed text.
    pack : bool, optional
        Pack built-in texts into ``max_length``-token texts (default: for causal LMs only).

    Returns
    -------
    texts : list of str
    source : str
        ``'builtin'`` or ``'user'``.

    Examples
    --------
    >>> from attnspec.models import load_model
    >>> tok = load_model("minilm")[1]
    >>> texts, source = resolve_texts("builtin", tok, "encoder", n_texts=3)
    >>> len(texts), source
    (3, 'builtin')
    >>> resolve_texts(["one text", "two", "three"], tok, "encoder", n_texts=2)
    (['one text', 'two'], 'user')
    >>> resolve_texts(["x"], tok, "encoder", n_texts=0)
    Traceback (most recent call last):
    ...
    ValueError: n_texts must be an integer >= 1 (or None for the default), got 0
    """
    if n_texts is not None and (not isinstance(n_texts, int) or isinstance(n_texts, bool) or n_texts < 1):
        raise ValueError(f"n_texts must be an integer >= 1 (or None for the default), got {n_texts!r}")
    if texts is None or (isinstance(texts, str) and texts == "builtin"):
        from ...data import builtin_texts, packed_texts
        n = n_texts or DEFAULT_N_TEXTS.get(kind, 32)
        if pack if pack is not None else kind == "causal-lm":
            return packed_texts(tokenizer, n, max_length), "builtin"
        return builtin_texts(n), "builtin"
    if isinstance(texts, (str, Path)):
        raise ValueError("texts must be a list of strings or 'builtin' (read a file with attnspec.diagnostics.read_texts)")
    from ..checks import check_texts
    out = check_texts(texts)          # strings only: None, bytes or numbers refused, not turned into 'None'
    return (out[:n_texts] if n_texts else out), "user"
