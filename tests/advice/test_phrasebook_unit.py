"""The phrasebook says each title and evidence line in the unit the report measures in (a
step, or the analysis window without step markers) as it words them: no pass rewrites the
recommendations afterwards."""

from __future__ import annotations

from dataclasses import replace

from gpuprof.advice.context import AdviceContext, unit_of
from gpuprof.advice.finding import Finding, said
from gpuprof.advice.phrasebook import Unit, lines, recommendation, sentence
from gpuprof.advice.wording import finalize
from gpuprof.model.report import Cause, RankReport, Recommendation

_SHARE = said("general.share", cause="host", top_pct=12.5, ranks=(0,))
_ADDS = said("rank.adds", gain_pct=4.0, alone_pct=1.5, above=1)
_ACTIONS = said("host.inference_actions")


def test_a_line_is_said_per_step_or_in_the_window() -> None:
    assert sentence(_SHARE) == "host holds 12.5% of the step on rank 0"
    assert sentence(_SHARE, Unit.WINDOW) == "host holds 12.5% of the window on rank 0"
    assert lines([_SHARE, _ADDS], Unit.WINDOW) == (
        "host holds 12.5% of the window on rank 0",
        "replayed with the recommendation above, it adds 4.0% of the window (1.5% alone): the fixes reinforce each other",
    )


def test_a_finding_gets_its_title_and_evidence_in_the_unit_and_its_actions_per_step() -> None:
    f = Finding("host-launch-bound", Cause.HOST, 10.0, _SHARE, evidence=(_ADDS,), actions=(_ACTIONS,))
    step, window = recommendation(f), recommendation(f, Unit.WINDOW)
    assert step.title.endswith("of the step on rank 0") and window.title.endswith("of the window on rank 0")
    assert "of the step" in step.evidence[0] and "of the window" in window.evidence[0]
    assert window.actions == step.actions
    assert any("per step" in a for a in window.actions)


def _report(rank: int, steps: int, window_us: float) -> RankReport:
    return RankReport(rank=rank, device=None, steps=steps, window_us=window_us, compute_us=window_us,
                      lost_us=dict.fromkeys(Cause, 0.0))


def test_the_unit_is_the_window_only_when_no_rank_with_a_window_has_a_step() -> None:
    assert unit_of(AdviceContext(summaries=(), reports=())) is Unit.STEP
    assert unit_of(AdviceContext(summaries=(), reports=(_report(0, 0, 100.0),))) is Unit.WINDOW
    assert unit_of(AdviceContext(summaries=(), reports=(_report(0, 0, 100.0), _report(1, 3, 100.0)))) is Unit.STEP
    # A rank with nothing in its window does not count.
    assert unit_of(AdviceContext(summaries=(), reports=(_report(0, 0, 100.0), _report(1, 3, 0.0)))) is Unit.WINDOW


def test_the_final_pass_leaves_the_words_as_said() -> None:
    """finalize no longer rewrites: a line said per step stays so, whatever the unit."""
    ctx = AdviceContext(summaries=(), reports=(_report(0, 0, 100.0),))
    rec = recommendation(Finding("host-launch-bound", Cause.HOST, 10.0, _SHARE, evidence=(_ADDS,)))
    (done,) = finalize(ctx, [rec]).recommendations
    assert (done.title, done.evidence) == (rec.title, rec.evidence)
    assert isinstance(done, Recommendation) and replace(done, savings_bound=rec.savings_bound, caveats=rec.caveats) == rec
