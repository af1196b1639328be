"""The renderers' own sentences: every template by name, and the one function that words one.

The advice has its phrasebook (:mod:`gpuprof.advice.phrasebook`); the sentences the
renderers write themselves (what the cross-rank findings mean, a recommendation's saving,
what a CPU-only run measured, ...) live here, so that
rewording one is an edit to this table alone and a test can check every template against
its callers. A template is ``str.format`` text; its fields are the values the caller gives,
already formatted where the format is a unit's (a duration says ``12.3 ms`` through
:mod:`gpuprof.util.phrases`) and raw where the template gives the digits (``{pct:.1f}``).
A fragment (a clause that continues a sentence) begins with its own punctuation
(``"; ..."``); :func:`sentence` joins a sentence's pieces and ends it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TEMPLATES: Mapping[str, str] = {
    # --- cross-rank findings (gpuprof.render.findings) ---
    "stragglers.arrived": "Rank {rank} arrived last at {last} of {collectives} collectives",
    "stragglers.waited": "; the other ranks waited {wait} per step for it",
    "stragglers.phase": "; its {phase} takes {ratio:.2f}× the others' median",
    "stragglers.none": "No rank is consistently the last to arrive at collectives.",
    "arrivals.matched": "{n} collective calls were matched across ranks.",
    "arrivals.clocks": "Rank clocks differed by up to {offset}; times were aligned before comparing.",
    "arrivals.rotating": "The last rank to arrive changes from call to call (no single straggler).",
    "critical.one_step": "Rank {rank} was the {role} in the step profiled.",
    "critical.steps": "Rank {rank} was the {role} in {count} of {steps} steps",
    "critical.spread": "; {ranks} different ranks were over the run",
    "imbalance.even": "Every rank computes about the same per step ({median}).",
    "imbalance.busiest": "The {role} rank ({rank}) computes {ratio:.2f}× the median rank per step ({busiest} against {median}).",
    "imbalance.stage": "The slowest pipeline stage ({stage}) computes {ratio:.2f}× the median of the other stages per microbatch.",
    # A report saved before the stage was compared with the other stages only.
    "imbalance.stage_saved": "The slowest pipeline stage ({stage}) computes {ratio:.2f}× the median stage per microbatch.",
    "pipeline.stages": "{n} stages",
    "pipeline.microbatches": "{n} microbatches",
    "pipeline.schedule": "{name} schedule",
    "pipeline.bubble": ": stages idle in the bubble up to {pct:.1f}% of the step (stage {stage})",
    "pipeline.theory": ", against {pct:.1f}% in theory for this schedule with free communication",
    # The note says why in full ("not measurable: the other members ..."): not twice.
    "bandwidth.note_full": "Bus bandwidth {note}.",
    "bandwidth.note": "Bus bandwidth not measurable: {note}.",
    "bandwidth.median": "Collectives moved data at {gbps:,.1f} GB/s bus bandwidth (median over {ranks} ranks)",
    "bandwidth.peak": ", {pct:.1f}% of the {peak:,.0f} GB/s link peak",
    "bandwidth.slow": "; {n} calls ran well below the link's speed",
    "bandwidth.exposed": "; up to {exposed} per step of it was exposed (nothing computing beside it)",
    "barriers.count": "{barriers} (ops that start at the same instant on every rank)",
    "barriers.waited": "; the other ranks wait at them for {ranks}, the last to arrive",
    "whatif.replay_same": "Replaying the job's dependencies gives its measured step, {was}",
    "whatif.replay": "Replaying the job's dependencies gives a step of {got} against {was} measured",
    "whatif.model_error": " (model error {err})",
    "whatif.recommended": "Replayed alone, the recommended fixes save: {fixes}.",
    "whatif.not_recommended": "Replayed but not recommended: {fixes}.",
    "whatif.none": "No single what-if in the replay saves 0.5% of the step or more.",
    "whatif.carried": "{name} {pct:.1f}% (recommendation {place})",
    "whatif.carried_said": "{name} {pct:.1f}% ({said})",
    "whatif.range_end": "the {end} end of recommendation {place}'s range",
    "whatif.builds_on": "recommendation {place} builds its estimate on it",
    "whatif.shown": "{name} {pct:.1f}% ({why})",
    # Why no recommendation carries a what-if.
    "whatif.other_fix": "another fix than recommendation {place}'s, on the same {cause} time",
    "whatif.held_back": "its {cause} recommendation was held back: the trace lacks what it needs (see the warnings)",
    "whatif.unacted": "no recommendation acts on it: {cause} holds {pct:.1f}% of the job's time",
    "whatif.uncarried": "no recommendation carries it",
    # The what-ifs that bound a fix rather than stand for one (``whatif.bound.<what-if>``).
    "whatif.bound.free_host": "every host cost gone at once: the bound of any host-side fix, not one change",
    "whatif.bound.free_launch_calls": "only the launch calls free: the low end of a host fix's range",
    "whatif.bound.double_bandwidth": "a link twice as fast: hardware, not a change to the job",
    "whatif.bound.no_variation": "every op at its type's typical time: the bound of evening out the work",
    "roles.legend": "Rank roles: {roles}.",
    # --- the report's own figures (gpuprof.render.figures) ---
    "caveat.one_step": "Every estimate below rests on one profiled step (low confidence): profile a few steps to confirm.",
    "step_card.window": "window (no step markers)",
    "nothing.samples_only": "nothing to analyze per rank: no profiler trace in the input, only the NVML samples below",
    "nothing.no_rank": "nothing to analyze: no rank with device activity was found in the input",
    "nothing.no_gpu": "the trace has no GPU activity (a CPU-only trace?)",
    "cpu_only.headline": "no GPU activity was recorded (CPU only); measured on the host:",
    "cpu_only.no_step": "no optimizer step was recorded",
    "no_recommendation": "No recommendation: no cause of lost time stands out.",
    "window.note": "no step markers: the window is first to last GPU activity, {longest}",
    "saving.step": "saves {sign}{pct:.1f}% of step time",
    "saving.window": "saves {sign}{pct:.1f}% of the window",
    "saving.time_step": "{saved} per step",
    "saving.time_window": "{saved} of the window",
    # A bound is the end of its range: the other end is what is left to say.
    "saving.at_least": "at least {low:.1f}%",
    "saving.at_most": "at most {high:.1f}%",
    "saving.between": "between {low:.1f}% and {high:.1f}%",
    "saving.details": "{saving} ({details})",
    "step_card.longest": "{stat} of rank {rank}, the longest of any rank",
    "nothing.why": "nothing to analyze: {why}",
    "host.steps": "rank {rank}, {steps}: {stat} {step} on the host",
    "host.ops": "; {op} of it ({share}) inside torch operators, the rest in Python and framework code between them",
    "host.backend_collectives": "{backend} collectives",
    "host.collectives": "; {coll} of it ({share}) in {what}",
    "cpu_only.median": ", median {median} apart by the job's own clock",
    "held_back": "No recommendation the trace supports: {n} held back for want of events the trace lacks (see the warnings).",
    "combined.less": "less than the {total:.1f}% they save one by one: they act partly on the same idle time",
    "combined.more": "more than the {total:.1f}% they save one by one: these fixes reinforce each other",
    "combined.about": "about the {total:.1f}% they save one by one: they act on different idle time",
    "combined.all": "All {n} recommendations",
    "combined.some": "Recommendations {names}",
    "combined.line": "{who} replayed together: {unit} {step} -> {after}, {combined:.1f}% saved, {relation}.",
    "ranks_shown.spread": "; compute share min {low:.1f}%, median {median:.1f}%, max {high:.1f}%",
    "ranks_shown.note": (
        "showing the {half} ranks with the lowest and the {half} with the highest compute share of {n} ranks{spread}; "
        "every rank is in --format json or html"
    ),
}


def say(phrase: str, **values: Any) -> str:
    """Template ``phrase`` worded with ``values``; a ``KeyError`` names an unknown id or a
    field no value fills."""
    return TEMPLATES[phrase].format(**values)


def sentence(*pieces: str) -> str:
    """A sentence from its opening phrase and the fragments that continue it, ended."""
    return "".join(pieces) + "."
