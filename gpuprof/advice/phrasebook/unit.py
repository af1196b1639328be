"""The unit of time the recommendations measure in, as the phrasebook words it.

A report measures per step; without step markers (no rank has a step) the analysis window
is the unit. The phrasebook is told the unit when it words a finding's title and evidence
(:func:`gpuprof.advice.phrasebook.recommendation`, :func:`~gpuprof.advice.phrasebook.book.words`),
and each phrase says it where it names it: a template through the fields ``{unit.per}``,
``{unit.slash}``, ``{unit.of_its}``, ``{unit.of_the}``, ``{unit.of_a}`` and ``{unit.its}``
(:class:`UnitWords`), a phrase written as a function through its ``unit`` argument, a field
spec registered with :func:`~gpuprof.advice.phrasebook.book.unit_specs` through its second.
No sentence is rewritten once said. Actions say what to do in a training step, whatever
the report measures in, and keep the step.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Unit(Enum):
    """What a saving or a time is measured per: a step, or the whole analysis window."""

    STEP = "step"
    WINDOW = "window"


@dataclass(frozen=True)
class UnitWords:
    """The words a phrase names its unit with (step / window)."""

    is_step: bool  # the unit is a step (a phrase that names whose step asks)
    per: str  # "2.1 ms per step" / "2.1 ms in the window"
    slash: str  # after a duration: "2.1 ms/step" / "2.1 ms in the window"
    of_its: str  # "12% of its step" / "12% of the window"
    of_the: str  # "12% of the step" / "12% of the window"
    of_a: str  # "12% of a step" / "12% of the window"
    its: str  # before a duration: "its step 8.0 ms -> 6.0 ms" / "the window 8.0 ms -> 6.0 ms"


UNIT_WORDS: dict[Unit, UnitWords] = {
    Unit.STEP: UnitWords(
        is_step=True,
        per="per step", slash="/step", of_its="of its step", of_the="of the step", of_a="of a step", its="its step"
    ),
    Unit.WINDOW: UnitWords(
        is_step=False,
        per="in the window",
        slash=" in the window",
        of_its="of the window",
        of_the="of the window",
        of_a="of the window",
        its="the window",
    ),
}
# The step's words: what a phrase written as a function says when called without a unit.
PER_STEP = UNIT_WORDS[Unit.STEP]


__all__ = ["PER_STEP", "UNIT_WORDS", "Unit", "UnitWords"]
