"""Closed-form law summaries for a sweep point: the fallback when the operator-valued solver fails.

Delegates to :mod:`attnspec.theory.closed_forms` (docs/theory.md, section "Closed forms"): ``m1`` for every
configuration, ``m2`` where known (convention A, no within-head dependence), and for the single-head
attention matrix in convention A all of ``m1..m4`` and the right edge. Missing entries are ``None``.
"""
from __future__ import annotations

from ..config import MHSAConfig
from ..theory.closed_forms import attention_edge, attention_moments, first_moment, second_moment

__all__ = ["closed_form_moments"]


def closed_form_moments(config: MHSAConfig) -> dict:
    """``{'m1', 'm2', 'm3', 'm4', 'right_edge'}``; ``None`` where no closed form exists.

    Examples
    --------
    >>> from attnspec.config import MHSAConfig
    >>> cf = closed_form_moments(MHSAConfig.uniform(64, 64, target="attention"))
    >>> round(cf["m1"], 4), round(cf["right_edge"], 4)
    (1.7183, 9.0095)
    >>> closed_form_moments(MHSAConfig.uniform(64, 64, inputs="gaussian"))["m2"] is None
    True
    """
    out: dict = {"m1": first_moment(config), "m2": second_moment(config), "m3": None, "m4": None, "right_edge": None}
    if config.target == "attention" and config.inputs == "orthonormal" and config.beta > 0:
        m = attention_moments(config.beta, config.gamma, config.psi[0])
        out.update(m1=float(m[0]), m2=float(m[1]), m3=float(m[2]), m4=float(m[3]),
                   right_edge=attention_edge(config.beta, config.gamma, config.psi[0]))
    return out
