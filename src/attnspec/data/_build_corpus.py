"""Rebuild ``stdlib_docstrings.txt`` from the running interpreter's standard library.

``python -m attnspec.data._build_corpus [N]`` (default N = 2048). See :mod:`attnspec.data`.
"""
from __future__ import annotations

import ast
import random
import re
import sys
import sysconfig
from pathlib import Path


def paragraphs(source: str):
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=True)
            if doc:
                yield from re.split(r"\n\s*\n", doc)


def sentences(p: str):
    """Sentences of a clean paragraph (split after ``.``, ``?``, ``!`` followed by a capital)."""
    if ">>>" in p or "::" in p or re.search(r"^\s{2,}\S", p, re.M) or re.search(r"^\s*[-*+]\s", p, re.M):
        return
    t = " ".join(p.split())
    for s in re.split(r"(?<=[.?!])\s+(?=[A-Z])", t):
        c = clean(s)
        if c:
            yield c


def clean(t: str) -> str | None:
    if not 60 <= len(t) <= 300 or not t[0].isupper() or not t.endswith("."):
        return None
    letters = sum(c.isalpha() or c == " " for c in t) / len(t)
    if letters < 0.88 or re.search(r"[{}\[\]=<>|`$]", t):
        return None
    return t


def build(n: int = 2048) -> list[str]:
    lib = Path(sysconfig.get_paths()["stdlib"])
    seen, out = set(), []
    for f in sorted(lib.glob("*.py")):
        for p in paragraphs(f.read_text(encoding="utf-8", errors="ignore")):
            for t in sentences(p):
                if t not in seen:
                    seen.add(t)
                    out.append(t)
    random.Random(20260101).shuffle(out)
    return out[:n]


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
    texts = build(n)
    (Path(__file__).parent / "stdlib_docstrings.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    print(f"{len(texts)} sentences")
