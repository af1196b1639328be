"""The unit of time the recommendations measure in, as the phrasebook words it.

A report measures per step; without step markers (no rank has a step) the analysis window
is the unit. The phrasebook is told the unit when it words a finding's title and evidence
(:func:`gpuprof.advice.phrasebook.recommendation`, :func:`~gpuprof.advice.phrasebook.book.words`),
so each line is written once, in its unit, when it is said: "per step", "of the step" and
"job step" read "in the window", "of the window" and "the window". Actions say what to do
in a training step, whatever the report measures in, and keep the step.
"""

from __future__ import annotations

import re
from enum import Enum


class Unit(Enum):
    """What a saving or a time is measured per: a step, or the whole analysis window."""

    STEP = "step"
    WINDOW = "window"


# The step-unit wording of the phrases, and the window's in its place. The phrases are
# written per step; these are the places they name it.
_WINDOW_WORDS = (
    (re.compile(r"\bjob step\b"), "the window"),
    (re.compile(r"\bits step (?=[\d.,]+ (?:µs|ms|s) ->)"), "the window "),
    (re.compile(r"\bper step\b"), "in the window"),
    (re.compile(r"/step\b"), " in the window"),
    (re.compile(r"\bof (?:its|their|the|a) step\b"), "of the window"),
    (re.compile(r"\bof step time\b"), "of the window"),
)


def window_words(text: str) -> str:
    """``text``, a phrase written per step, with the window as the unit instead."""
    for pattern, words in _WINDOW_WORDS:
        text = pattern.sub(words, text)
    return text


def in_unit(text: str, unit: Unit) -> str:
    """``text`` (written per step) as said in ``unit``."""
    return window_words(text) if unit is Unit.WINDOW else text


__all__ = ["Unit", "in_unit", "window_words"]
