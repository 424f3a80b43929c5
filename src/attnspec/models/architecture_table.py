"""The architecture table for people: supported and refused families as a DataFrame and as text
(``attnspec diagnose --list-architectures``), read from :data:`attnspec.models.architectures.ARCHITECTURES`
and :data:`~attnspec.models.architectures.REFUSED`.
"""
from __future__ import annotations

from dataclasses import fields

from .architectures import ARCHITECTURES, REFUSED, _cross_paths

__all__ = ["architectures_table", "format_architectures"]

_COLUMNS = ("family", "examples", "model_types", "attention", "q", "k", "v", "o", "kv_sharing", "cross_attention",
            "position", "scaling", "softcap", "mask", "capture", "status")


def architectures_table():
    """The architecture table as a ``pandas.DataFrame``: supported families, then refused ones with the reason
    in ``status``.

    Examples
    --------
    >>> df = architectures_table()
    >>> df.columns[:4].tolist(), df.loc[0, "family"], df.loc[0, "status"]
    (['family', 'examples', 'model_types', 'attention'], 'bert', 'supported')
    >>> bool(df["status"].str.startswith("refused").any())
    True
    """
    import pandas as pd
    rows = []
    for a in ARCHITECTURES:
        r = {f.name: getattr(a, f.name) for f in fields(a)}
        r["model_types"] = ", ".join(a.model_types)
        r["kv_sharing"] = f"grouped ({'/'.join(a.kv_heads)})" if a.kv_heads else "none"
        if a.family == "falcon":
            r["kv_sharing"] = "multi-query or grouped (multi_query, num_kv_heads)"
        r["cross_attention"] = "none"
        if a.cross:
            c = _cross_paths(a)
            r["cross_attention"] = (f"decoder layers: {c.q} / {c.k} / {c.v} / {c.o} (queries from the decoder, keys "
                                    "and values from the encoder's output)")
        r["status"] = "supported"
        rows.append({c: r.get(c, "") for c in _COLUMNS})
    for x in REFUSED:
        rows.append({c: "" for c in _COLUMNS} | {"family": x.family, "examples": x.examples,
                                                 "model_types": ", ".join(x.model_types),
                                                 "status": f"refused: {x.reason}"})
    return pd.DataFrame(rows, columns=list(_COLUMNS))


def format_architectures(width: int = 100) -> str:
    """The table as text, one block per family (for ``attnspec diagnose --list-architectures``).

    Examples
    --------
    >>> print(format_architectures(width=100).splitlines()[0])
    bert: BERT, RoBERTa, XLM-R, ELECTRA, CamemBERT  [supported]
    """
    import textwrap
    df = architectures_table()
    out = []
    for _, r in df.iterrows():
        lines = [f"{r['family']}: {r['examples']}  [{r['status'].split(':')[0]}]",
                 f"  model_type: {r['model_types']}"]
        if r["status"] == "supported":
            lines += [f"  q/k/v/o: {r['q']} / {r['k']} / {r['v']} / {r['o']}", f"  key/value sharing: {r['kv_sharing']}",
                      *([f"  cross-attention: {r['cross_attention']}"] if r["cross_attention"] != "none" else []),
                      f"  position: {r['position']}", f"  scaling: {r['scaling']}; softcap: {r['softcap']}",
                      f"  mask: {r['mask']}; capture: {r['capture']}"]
        else:
            lines.append(f"  reason: {r['status'].split(': ', 1)[1]}")
        out += [textwrap.fill(x, width, subsequent_indent="    ") for x in lines]
    return "\n".join(out)
