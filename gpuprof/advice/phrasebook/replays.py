"""Phrases of the savings every family shares: a what-if's replay, and the estimates that
stand where no replay exists."""

from __future__ import annotations

from gpuprof.advice.phrasebook.book import phrase, templates
from gpuprof.advice.phrasebook.unit import PER_STEP, UnitWords
from gpuprof.job.whatifs import WHATIFS
from gpuprof.util import phrases
from gpuprof.util.phrases import duration


@phrase("replay.saved")
def replay_saved(
    whatif: str,
    step_us: float,
    after_us: float,
    pct: float,
    rough_error_pct: float | None,
    copy_floor_us: float | None,
    unit: UnitWords = PER_STEP,
) -> str:
    """How the saving was found: the pipeline schedule's model, else the replay of the job's
    graph (rough where the model misses the measured step), floored by the copies' time;
    the step before and after in the report's ``unit``."""
    rough = "" if rough_error_pct is None else f", rough: the model misses the measured step by {phrases.signed_pct(rough_error_pct)}"
    how = (
        "a model of the pipeline schedule with the measured stage times"
        if whatif == "double_microbatches"
        else f"a replay of the job's dependency graph{rough}"
    )
    if copy_floor_us is not None:
        how += f"; no shorter than the {duration(copy_floor_us)} {unit.per} its busiest copy direction keeps the copy engine busy"
    return (
        f"The job replayed with this fix ({WHATIFS[whatif]}): {unit.its} {duration(step_us)} -> {duration(after_us)}, "
        f"{pct:.1f}% saved ({how})."
    )


_TOO_SHORT = "analysed window is under {min_window_ms:.0f} ms: too little to estimate a saving (profile a few full steps)"
templates({
    "replay.none": (
        "No replay of this job was possible (launches not in the trace): the estimate assumes this idle "
        "time vanishes on those ranks, with the job's step set by its slowest rank."
    ),
    # a window too short to estimate from: a sentence of a local finding, a clause of the general advice
    "window.too_short": "The " + _TOO_SHORT + ".",
    "window.too_short_clause": "the " + _TOO_SHORT,
})
