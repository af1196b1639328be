"""The evidence is said last, once per finding: a line a higher-ranked recommendation gave
is left out on its phrase and values, not on its words (gpuprof.advice.drafts)."""

from __future__ import annotations

from gpuprof.advice.drafts import Draft, word_once
from gpuprof.advice.finding import Finding, Said, said
from gpuprof.advice.general import disagreement, explain_disagreement
from gpuprof.advice.phrasebook import Unit, recommendation, sentence
from gpuprof.model.report import Cause, RankReport, Recommendation

_SHARE = said("general.share", cause="host", top_pct=12.5, ranks=(0,))
# Worded like _SHARE, but a different measurement: a different finding.
_SHARE_ALIKE = said("general.share", cause="host", top_pct=12.5000001, ranks=(0,))
_ADDS = said("rank.adds", gain_pct=4.0, alone_pct=1.5, above=1)
_NONE = said("general.no_saving")


def _draft(rid: str, *evidence: Said, added: tuple[Said, ...] = (), unit: Unit = Unit.STEP) -> Draft:
    f = Finding(rid, Cause.HOST, 10.0, said("title.general", cause="host"), evidence=evidence)
    return Draft(recommendation(f, unit), f, added)


def test_a_finding_a_higher_recommendation_gave_is_not_said_again() -> None:
    first, second = word_once([_draft("a", _SHARE, _NONE), _draft("b", _SHARE, _ADDS)], Unit.STEP)
    assert first.evidence == (sentence(_SHARE), sentence(_NONE))
    assert second.evidence == (sentence(_ADDS),)


def test_the_same_words_from_other_values_are_another_finding() -> None:
    assert sentence(_SHARE) == sentence(_SHARE_ALIKE)
    first, second = word_once([_draft("a", _SHARE), _draft("b", _SHARE_ALIKE)], Unit.STEP)
    assert first.evidence == second.evidence == (sentence(_SHARE),)


def test_a_recommendation_repeats_none_of_its_own_lines_away() -> None:
    (only,) = word_once([_draft("a", _SHARE, _SHARE)], Unit.STEP)
    assert only.evidence == (sentence(_SHARE), sentence(_SHARE))


def test_lines_added_after_the_advisor_are_said_last_in_the_unit_and_once() -> None:
    first, second = word_once(
        [_draft("a", _SHARE, added=(_ADDS,), unit=Unit.WINDOW), _draft("b", _NONE, added=(_ADDS,), unit=Unit.WINDOW)],
        Unit.WINDOW,
    )
    assert first.evidence == (sentence(_SHARE, Unit.WINDOW), sentence(_ADDS, Unit.WINDOW))
    assert "of the window" in first.evidence[1]
    assert second.evidence == (sentence(_NONE),)


def test_a_recommendation_its_advisor_worded_is_de_duplicated_on_its_words() -> None:
    worded = Recommendation(id="x", category=Cause.HOST, title="t", estimated_savings_pct=5.0, ranks=(),
                            evidence=(sentence(_SHARE), "its own line"), actions=())
    first, second = word_once([_draft("a", _SHARE), Draft(worded, None, (_NONE,))], Unit.STEP)
    assert first.evidence == (sentence(_SHARE),)
    assert second.evidence == ("its own line", sentence(_NONE))


def _report(rank: int, host_us: float) -> RankReport:
    lost = dict.fromkeys(Cause, 0.0)
    lost[Cause.HOST] = host_us
    return RankReport(rank=rank, device=None, steps=1, window_us=100.0, compute_us=100.0 - host_us, lost_us=lost)


def test_the_disagreement_is_a_record_and_its_worded_form_the_same() -> None:
    from gpuprof.advice.context import AdviceContext

    ctx = AdviceContext(summaries=(), reports=(_report(0, 40.0),))
    low = recommendation(Finding("host-x", Cause.HOST, 2.0, said("title.general", cause="host"), ranks=(0,)))
    agreeing = recommendation(Finding("host-y", Cause.HOST, 30.0, said("title.general", cause="host"), ranks=(0,)))
    line = disagreement(ctx, low)
    assert line is not None and line.phrase == "agree.less" and line.values["share_pct"] == 40.0
    assert disagreement(ctx, agreeing) is None
    worded = explain_disagreement(ctx, [low, agreeing])
    assert worded[0].evidence == (sentence(line),) and worded[1] == agreeing
