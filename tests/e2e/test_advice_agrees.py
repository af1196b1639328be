"""Attribution and advice agree, on every sample and shared trace (issue 10).

For every cause holding at least 5 % of a rank's step there is a recommendation of that
cause, or a held-back line saying why the trace cannot support one (never silent). And the
recommendation's saving is within a factor of 3 of the share its cause holds on its ranks,
or its evidence says why (``Saving vs lost share:``: the replay follows the whole job, so a
fix can save less than its share -- the freed time is spent waiting elsewhere -- or more).
Time no rule explains (``other``) is shown with no saving claimed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from analyzed import analysis_of
from conftest import SHARED_TRACES

from gpuprof.advice.general import AGREE_FACTOR, AGREE_MARK, NEVER_SILENT_PCT
from gpuprof.model.report import CAUSES, Cause

ROOT = Path(__file__).resolve().parents[2]
SHARED = SHARED_TRACES


def _folders() -> list[Path]:
    out = [p for p in sorted((ROOT / "sample_traces").iterdir()) if p.is_dir()]
    if SHARED.is_dir():
        out += [p for p in sorted(SHARED.iterdir()) if p.is_dir() and p.name != "LICENSES"]
    return out


@pytest.mark.parametrize("folder", _folders(), ids=lambda p: p.name)
def test_every_cause_of_note_has_advice_that_agrees_or_says_why(folder: Path) -> None:
    report = analysis_of(folder).report  # analyze_paths([folder]), once per session
    ranks = [r for r in report.ranks if r.window_us > 0]
    if not ranks:
        return
    held = " ".join(w for w in report.warnings if w.startswith("held back"))
    wrong = []
    for cause in CAUSES:
        share = max(100.0 * r.lost_us[cause] / r.window_us for r in ranks)
        if share < NEVER_SILENT_PCT:
            continue
        recs = [x for x in report.recommendations if x.category is cause]
        if not recs:
            if f"({cause.value.replace('_', '-')}" not in held and cause.value not in held:
                wrong.append(f"{cause.value} holds {share:.1f}% and has no recommendation nor held-back line")
            continue
        if cause is Cause.OTHER:
            assert all(x.estimated_savings_pct == 0.0 for x in recs)
            continue
        for rec in recs:
            job_level = cause in (Cause.STRAGGLER, Cause.PIPELINE_BUBBLE, Cause.COMMUNICATION)
            mine = ([] if job_level else [r for r in ranks if r.rank in rec.ranks]) or ranks
            own = max(100.0 * r.lost_us[cause] / r.window_us for r in mine)
            est = rec.estimated_savings_pct
            if max(own, est) < NEVER_SILENT_PCT:
                continue
            agrees = own / AGREE_FACTOR <= est <= AGREE_FACTOR * own
            if not agrees and not any(e.startswith(AGREE_MARK) for e in rec.evidence):
                wrong.append(f"{rec.id}: saves {est:.1f}% for a {own:.1f}% share, and does not say why")
    assert not wrong, "; ".join(wrong)
