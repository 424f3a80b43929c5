"""Seeds from integer parts, shared by every layer that draws per item (text, head, layer)."""
from __future__ import annotations

__all__ = ["seed_of", "MAX_SEED"]

#: Largest seed: :func:`seed_of` works modulo ``2**63 - 1``, so seeds are the exact integers ``0 .. 2**63 - 2``
#: (``2**63 - 1`` would be seed 0 again).
MAX_SEED = 2 ** 63 - 2


def seed_of(*parts: int) -> int:
    """One 63-bit seed from integer parts (a polynomial hash; distinct tuples give distinct streams).

    Examples
    --------
    >>> seed_of(1, 2), seed_of(2, 1)                      # order matters
    (1000005, 2000007)
    """
    s = 0
    for p in parts:
        s = (s * 1000003 + int(p)) % (2 ** 63 - 1)
    return s
