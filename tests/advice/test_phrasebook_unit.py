"""The phrasebook says each title and evidence line in the unit the report measures in (a
step, or the analysis window without step markers) as it words them: no pass rewrites the
recommendations afterwards."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuprof.advice import wording
from gpuprof.advice.context import AdviceContext, unit_of
from gpuprof.advice.finding import Finding, Said, said
from gpuprof.advice.phrasebook import Unit, book, lines, recommendation, sentence
from gpuprof.advice.phrasebook import general as general_phrases
from gpuprof.advice.phrasebook import unit as unit_module
from gpuprof.advice.phrasebook.unit import PER_STEP
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


# --- each way a phrase names its unit, worded in each unit ----------------------------------


def test_a_template_names_its_unit_through_its_fields() -> None:
    exposed = said("communication.exposed", rank=1, per_step_us=2100.0, step_pct=2.5)
    assert sentence(exposed).startswith("rank 1 loses 2.1 ms per step (2.5% of its step) to collectives")
    assert sentence(exposed, Unit.WINDOW).startswith("rank 1 loses 2.1 ms in the window (2.5% of the window) to")
    ddp = said("host.ddp_broadcasts", rank=0, broadcasts=3, host_us=1500.0)
    assert "take 1.5 ms/step on the host" in sentence(ddp)
    assert "take 1.5 ms in the window on the host" in sentence(ddp, Unit.WINDOW)


def test_a_field_spec_names_the_unit_per_value() -> None:
    waits = said("straggler.waits_present", waits=((0, 1000.0), (3, 2500.0)))
    assert sentence(waits) == "measured waits among the ranks present: rank 0 1.0 ms/step, rank 3 2.5 ms/step"
    assert sentence(waits, Unit.WINDOW) == (
        "measured waits among the ranks present: rank 0 1.0 ms in the window, rank 3 2.5 ms in the window"
    )
    one, two = (said("slowrank.others_wait", ranks=r, share_pct=31.0) for r in ((2,), (1, 2)))
    assert sentence(one) == "rank 2 waits for it in collectives, up to 31% of its step"
    assert sentence(two) == "ranks 1-2 wait for it in collectives, up to 31% of their step"
    assert sentence(two, Unit.WINDOW) == "ranks 1-2 wait for it in collectives, up to 31% of the window"


def test_a_phrase_written_as_a_function_is_given_the_unit() -> None:
    replay = said("replay.saved", whatif="free_launches", step_us=8000.0, after_us=6000.0, pct=25.0,
                  rough_error_pct=None, copy_floor_us=1000.0)
    step, window = sentence(replay), sentence(replay, Unit.WINDOW)
    assert ": its step 8.0 ms -> 6.0 ms, 25.0% saved" in step and "1.0 ms per step its busiest" in step
    assert ": the window 8.0 ms -> 6.0 ms, 25.0% saved" in window and "1.0 ms in the window its busiest" in window
    op = {"op": "aten::mm", "us": 1500.0, "per_step": True, "calls": 2, "launches_per_call": None, "inner_op": None}
    ops = said("local.ops", rank=0, cause="host", ops=(op,))
    assert "aten::mm 1.5 ms/step, 2 calls" in sentence(ops)
    assert "aten::mm 1.5 ms in the window, 2 calls" in sentence(ops, Unit.WINDOW)
    calls = said("sync.calls", rank=0, calls=(("aten::item", 8),), steps=4)
    assert (sentence(calls), sentence(calls, Unit.WINDOW)) == (
        "Rank 0 blocking calls: aten::item 2.0/step.", "Rank 0 blocking calls: aten::item 2.0 in the window."
    )


def test_idle_time_of_ranks_without_steps_is_in_the_window_whatever_the_unit() -> None:
    def idle(stepped: bool) -> Said:
        return said("local.idle", finding="host-launch", ranks=1, worst_rank=0, per_step_us=2000.0,
                    stepped=stepped, share_pct=20.0, low_pct=20.0, high_pct=20.0)

    assert "idled 2.0 ms per step (20.0% of the step)" in sentence(idle(True))
    assert "idled 2.0 ms in the window (20.0% of the window)" in sentence(idle(True), Unit.WINDOW)
    assert "idled 2.0 ms in the window (20.0% of the window)" in sentence(idle(False))


def test_unit_is_no_name_for_a_records_value() -> None:
    with pytest.raises(ValueError, match="unit"):
        sentence(said("general.share", cause="host", top_pct=1.0, ranks=(0,), unit="window"))
    with pytest.raises(ValueError, match="unit"):
        sentence(said("sync.calls", rank=0, calls=(), steps=1, unit=PER_STEP))


# --- no sentence is rewritten once said ------------------------------------------------------


def test_no_pass_rewrites_a_finished_sentence_into_the_unit() -> None:
    """The regex rewriting of finished sentences (``window_words``, ``in_unit``) is gone: a
    line written per step stays per step whatever the unit it is said in afterwards, and a
    template's words are its fill, nothing after."""
    for module in (unit_module, book, general_phrases, wording):
        assert not hasattr(module, "window_words") and not hasattr(module, "in_unit"), module.__name__
    ctx = AdviceContext(summaries=(), reports=(_report(0, 0, 100.0),))
    rec = recommendation(Finding("host-launch-bound", Cause.HOST, 10.0, _SHARE, evidence=(_ADDS,)))
    assert "of the step" in rec.title
    (done,) = finalize(ctx, [rec]).recommendations
    assert done.title == rec.title and done.evidence == rec.evidence
    for name, text in book.TEMPLATES.items():
        group = (text,) if isinstance(text, str) else text
        if any(book.fields(t) for t in group):
            continue  # the phrases said without values: their words are the templates' own fill
        for unit in Unit:
            assert book.words(said(name), unit) == tuple(book.fill(t, {}, unit) for t in group)
