"""The analysis asks a trace what it holds (``RankTrace.holds``), never which format it is.

A format with a new name whose reader says it records what the op-level timelines (or
Kineto traces) record must be analyzed exactly as they are: the whole report the same. A
branch anywhere downstream that still looked at ``fmt == "timeline"`` (or ``"kineto"``)
would treat it as the other kind and change the report, which these tests would see; the
control shows that each thing a trace holds does change some report.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from repo_paths import SAMPLES

from gpuprof import readers
from gpuprof.accounting.summarize import summarize
from gpuprof.accounting.window import StepSelection
from gpuprof.job.onejob import differences
from gpuprof.model.timeline import RankTrace, Step, TraceHolds, empty_host
from gpuprof.pipeline import AnalyzeOptions, executors, run_analysis
from gpuprof.readers.kineto import KINETO_HOLDS
from gpuprof.readers.optimeline import TIMELINE_HOLDS

Change = Callable[[RankTrace], RankTrace]


def _as_read(t: RankTrace) -> RankTrace:
    return t


def _steps_end_early(t: RankTrace) -> RankTrace:
    """Each step ended before the next begins (as the reader ends a step whose successor is
    not the next number, or on a stitched clock), though the numbers are consecutive."""
    return dataclasses.replace(
        t, steps=tuple(Step(s.number, s.start_us, s.end_us - 0.2 * s.duration_us) for s in t.steps)
    )


def _gpu_only(t: RankTrace) -> RankTrace:
    """The trace without its host side (a GPU-only export)."""
    return dataclasses.replace(t, host=empty_host())


# Traces that reach every branch on what a trace holds (the control test checks that each
# capability matters to one): the op-level replay, waits before collectives, barriers,
# groups, tensor-parallel positions, steps the reader ended; launches, missing evidence.
CASES: dict[str, tuple[str, Change, TraceHolds]] = {
    "timeline": ("megatron-timeline", _as_read, TIMELINE_HOLDS),
    "slow-worker": ("megatron-slow-worker", _as_read, TIMELINE_HOLDS),
    "barriers": ("megatron-uneven-data", _as_read, TIMELINE_HOLDS),
    "steps-ended": ("megatron-timeline", _steps_end_early, TIMELINE_HOLDS),
    "kineto": ("dp-exposed", _as_read, KINETO_HOLDS),
    "launch-bound": ("launch-bound", _as_read, KINETO_HOLDS),
    "gpu-only": ("dp-exposed", _gpu_only, KINETO_HOLDS),
}


def _analyze(case: str, monkeypatch: pytest.MonkeyPatch, change: Change) -> tuple[dict[str, Any], set[Any]]:
    """The report of a case (as a dict) with every trace passed through ``change`` before
    it is summarized, and the summaries' format names and what they hold."""
    sample, prepare, _ = CASES[case]

    def changed(trace: RankTrace, selection: StepSelection) -> Any:
        return summarize(change(prepare(trace)), selection)

    with monkeypatch.context() as m:
        m.setattr(executors, "summarize", changed)
        analysis = run_analysis([SAMPLES / sample], AnalyzeOptions(jobs=1))
    return analysis.report.to_dict(), {(s.fmt, s.holds) for s in analysis.summaries}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_new_format_that_holds_what_a_known_one_holds_is_analyzed_as_it(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    holds = CASES[case][2]
    same, kinds = _analyze(case, monkeypatch, _as_read)
    assert {h for _, h in kinds} == {holds}
    other, kinds = _analyze(case, monkeypatch, lambda t: dataclasses.replace(t, fmt="other_format"))
    assert kinds == {("other_format", holds)}
    assert other == same


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(TraceHolds) if f.name != "title"])
def test_each_thing_a_trace_holds_changes_some_analysis(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: for each capability, one of the cases above is analyzed otherwise when
    its trace is said not to have it (or to have it), so the equality above is that of
    analyses that ask it, not of ones blind to it."""
    for case in sorted(CASES):
        holds = CASES[case][2]
        flips: dict[str, Any] = {name: not getattr(holds, name)}
        flipped = dataclasses.replace(holds, **flips)

        def said_flipped(t: RankTrace, h: TraceHolds = flipped) -> RankTrace:
            return dataclasses.replace(t, holds=h)

        same, _ = _analyze(case, monkeypatch, _as_read)
        other, kinds = _analyze(case, monkeypatch, said_flipped)
        assert {h for _, h in kinds} == {flipped}
        if other != same:
            return
    pytest.fail(f"no case tells a trace with {name} from one without")


def test_readers_say_what_their_traces_hold() -> None:
    """Kineto's are the defaults (a reader of a format like it sets only its title); the
    op-level timeline differs in every capability."""
    assert dataclasses.replace(KINETO_HOLDS, title=None) == TraceHolds()
    alike = [f.name for f in dataclasses.fields(TraceHolds) if getattr(KINETO_HOLDS, f.name) == getattr(TIMELINE_HOLDS, f.name)]
    assert alike == []
    timeline = readers.load_file(SAMPLES / "megatron-timeline" / "timeline-sim.json.gz")
    assert {t.holds for t in timeline} == {TIMELINE_HOLDS}
    kineto = readers.load_file(SAMPLES / "healthy" / "rank0.pt.trace.json.gz")
    assert {t.holds for t in kineto} == {KINETO_HOLDS}


def test_a_job_that_mixes_formats_names_each_by_its_title_else_its_name() -> None:
    kineto = summarize(readers.load_file(SAMPLES / "healthy" / "rank0.pt.trace.json.gz")[0])
    timeline = summarize(readers.load_file(SAMPLES / "megatron-timeline" / "timeline-sim.json.gz")[0])
    untitled = dataclasses.replace(timeline, fmt="other_format", holds=dataclasses.replace(TIMELINE_HOLDS, title=None))
    said = {d.what: [v for v, _ in d.groups] for d in differences([kineto, timeline, untitled])}
    assert said["trace format"] == ["Kineto trace", "op-level timeline", "other_format"]
