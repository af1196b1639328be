"""Findings: what an advisor measured, as data. The phrasebook words them.

An advisor computes; it writes no sentence. What it returns is a :class:`Finding`: the
recommendation's id, cause, ranks, what-if and saving with its bounds, the measured facts
as named numbers (``facts``: units in the names, ``_us``, ``_bytes``, ``_pct``; they reach
the JSON report beside the prose), and the title, evidence and actions as :class:`Said`
records, each naming a phrase of :mod:`gpuprof.advice.phrasebook` and the values it is
written from. The phrasebook is the one place those become sentences
(:func:`gpuprof.advice.phrasebook.recommendation`), so the same fact reads the same in
every recommendation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuprof.model.report import Cause

# A measured fact as the JSON report carries it: a number, a name, or unknown.
Fact = float | int | str | None


@dataclass(frozen=True)
class Said:
    """One sentence (or a few, for a group of actions) as data: the phrase that words it and
    the values it is written from."""

    phrase: str
    values: Mapping[str, Any] = field(default_factory=dict)


def said(phrase: str, **values: Any) -> Said:
    """``Said(phrase, values)``, the values given by name."""
    return Said(phrase, values)


def fact(value: Any) -> Fact:
    """``value`` as a JSON fact: numpy scalars as Python numbers, a non-finite number as
    unknown (``None``). A truth value is no fact of a report: say it as a number or a name."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (bool, np.bool_)):
        raise TypeError("a fact is a number or a name, not a truth value")
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        v = float(value)
        return v if math.isfinite(v) else None
    raise TypeError(f"a fact is a number or a name, not {type(value).__name__}")


@dataclass(frozen=True)
class Finding:
    """What an advisor found, before it is worded.

    ``saving_pct`` becomes the recommendation's ``estimated_savings_pct``; ``title`` is one
    phrase, ``evidence`` and ``actions`` are said in order (a phrase may give no line, one,
    or a group); ``facts`` are the measured numbers behind them (None: not measured).
    """

    id: str
    cause: Cause
    saving_pct: float
    title: Said
    evidence: tuple[Said, ...] = ()
    actions: tuple[Said, ...] = ()
    ranks: tuple[int, ...] = ()
    whatif: str | None = None
    savings_low_pct: float | None = None
    savings_high_pct: float | None = None
    facts: Mapping[str, Fact] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "facts", {k: fact(v) for k, v in self.facts.items()})


__all__ = ["Fact", "Finding", "Said", "fact", "said"]
