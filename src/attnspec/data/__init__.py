"""Built-in text corpus: sentences of the Python standard library's docstrings.

``stdlib_docstrings.txt`` holds one sentence per line, taken from the docstrings of modules,
classes and functions of the CPython 3.11 standard library (``Lib/*.py``, Python Software
Foundation, PSF License Version 2; written by the CPython developers, not by the authors of
attnspec). It was produced by :mod:`attnspec.data._build_corpus`: docstrings parsed with ``ast``,
split at blank lines, paragraphs with code (``>>>``, indented blocks, ``::``) or lists dropped,
whitespace collapsed, split into sentences; sentences with markup or symbols, not starting with a
capital or ending with a period, or outside 60-300 characters are dropped; duplicates removed;
order shuffled with a fixed seed. Texts ship with the package and need no network.
"""
from __future__ import annotations

from importlib.resources import files

__all__ = ["builtin_texts", "packed_texts", "CORPUS_SOURCE", "CORPUS_FILE"]

CORPUS_FILE = "stdlib_docstrings.txt"
CORPUS_SOURCE = ("sentences of CPython 3.11 standard-library docstrings (Lib/*.py, PSF License 2.0), "
                 "cleaned by attnspec.data._build_corpus")


def builtin_texts(n: int | None = None) -> list[str]:
    """The first ``n`` paragraphs of the built-in corpus (all when ``n`` is None).

    Examples
    --------
    >>> len(builtin_texts()), builtin_texts(1)[0][:40]
    (2048, 'The repeat() method is a convenience to ')
    """
    lines = files(__name__).joinpath(CORPUS_FILE).read_text(encoding="utf-8").splitlines()
    texts = [t for t in lines if t.strip()]
    if n is not None:
        if n > len(texts):
            raise ValueError(f"the built-in corpus has {len(texts)} texts, {n} requested")
        texts = texts[:n]
    return texts


def packed_texts(tokenizer, n: int, n_tokens: int) -> list[str]:
    """``n`` texts of at least ``n_tokens`` tokens each: consecutive corpus sentences joined by spaces.

    Truncate to ``n_tokens`` when tokenizing (``max_length``) for texts of exactly that length.

    Examples
    --------
    >>> words = lambda text: {"input_ids": text.split()}     # any tokenizer returning input_ids
    >>> texts = packed_texts(words, n=2, n_tokens=50)
    >>> len(texts), all(len(t.split()) >= 50 for t in texts)
    (2, True)
    """
    out, cur = [], []
    for s in builtin_texts():
        cur.append(s)
        text = " ".join(cur)
        if len(tokenizer(text)["input_ids"]) >= n_tokens:
            out.append(text)
            cur = []
            if len(out) == n:
                return out
    raise ValueError(f"the built-in corpus gives only {len(out)} texts of {n_tokens} tokens")
