"""Report diffs on reports whose changes are known by construction."""

from __future__ import annotations

import json

import pytest
from reportfactory import rank, report

from gpuprof.ci.diff import DIFF_SCHEMA, diff_reports, diff_to_dict
from gpuprof.ci.diff_output import diff_markdown, diff_text, headline

BASE = report([rank(0, lost_ms={"dataloader": 10, "host": 10}), rank(1, lost_ms={"communication": 20})])
CUR = report(
    [rank(0, window_ms=120, lost_ms={"dataloader": 40, "host": 8}), rank(1, window_ms=120, lost_ms={"communication": 14}),
     rank(2)]
)  # fmt: skip


def test_job_level_changes() -> None:
    d = diff_reports(BASE, CUR)
    # base: 200 ms window, dataloader 5 %, host 5 %, communication 10 %, compute 80 %.
    # current (ranks 0-2): 340 ms window, dataloader 40/340, host 8/340, communication 14/340.
    dl = d.share("dataloader")
    assert dl.base_pct == pytest.approx(5.0)
    assert dl.current_pct == pytest.approx(100 * 40 / 340)
    assert dl.delta_pp == pytest.approx(100 * 40 / 340 - 5.0) and dl.verdict == "worse"
    assert d.share("communication").verdict == "better"
    assert d.share("straggler").verdict == "same" and d.share("straggler").delta_pp == 0.0
    assert d.share("compute").verdict == "better"  # 278 / 340 = 81.8 % vs 80 %: rank 2 is all compute
    assert d.base_step_ms == pytest.approx(25.0) and d.current_step_ms == pytest.approx(30.0)
    assert d.step_change_pct == pytest.approx(20.0) and d.step_verdict == "worse"
    assert d.only_in_current == (2,) and d.only_in_base == ()


def test_per_rank_changes() -> None:
    d = diff_reports(BASE, CUR)
    assert [r.rank for r in d.ranks] == [0, 1]
    r0 = d.ranks[0]
    assert r0.share("dataloader").delta_pp == pytest.approx(100 * 40 / 120 - 10.0)
    assert r0.share("host").delta_pp == pytest.approx(100 * 8 / 120 - 10.0) and r0.share("host").verdict == "better"
    assert r0.base_step_ms == pytest.approx(25.0) and r0.current_step_ms == pytest.approx(30.0)


def test_noise_is_same() -> None:
    a = report([rank(0, lost_ms={"host": 10.0})])
    b = report([rank(0, lost_ms={"host": 10.3})])
    d = diff_reports(a, b)
    assert d.share("host").verdict == "same" and d.step_verdict == "same" and d.overall == "same"
    assert headline(d) == "about the same overall (step time 0.0%); no share changed by more than the noise level"


def test_unknown_step_time_is_na() -> None:
    d = diff_reports(report([rank(0, steps=0)]), report([rank(0, steps=0)]))
    assert d.step_change_pct is None and d.step_verdict == "n/a"


def test_renderings_agree() -> None:
    d = diff_reports(BASE, CUR)
    data = json.loads(json.dumps(diff_to_dict(d, BASE.inputs, CUR.inputs)))
    assert data["schema"] == DIFF_SCHEMA
    assert data["shares"]["dataloader"]["verdict"] == "worse"
    assert data["step_ms"]["change_pct"] == pytest.approx(20.0)
    assert data["ranks"][0]["shares"]["dataloader"]["delta_pp"] == pytest.approx(23.333, abs=1e-3)
    text = diff_text(d, 100)
    assert text.splitlines()[0].startswith("gpuprof diff: worse overall (step time +20.0%); worse: dataloader +6.8 pp")
    assert data["overall"] == "worse"
    assert "step time: 25.0 ms -> 30.0 ms (+20.0%, worse)" in text
    md = diff_markdown(d)
    assert "| dataloader | 5.0% | 11.8% | +6.8 pp | **worse** |" in md


def test_better_overall_says_so_first_and_lists_the_gains_first() -> None:
    d = diff_reports(CUR, BASE)  # the other way round: steps 30 -> 25 ms
    assert d.overall == "better"
    assert headline(d).startswith("better overall (step time -16.7%); better: dataloader -6.8 pp")
    assert headline(d).index("better:") < headline(d).index("worse:")
    md = diff_markdown(d)
    assert md.startswith("### gpuprof diff: better overall (step time -16.7%)")


def test_without_step_times_the_compute_share_decides() -> None:
    d = diff_reports(report([rank(0, steps=0, lost_ms={"host": 30})]), report([rank(0, steps=0, lost_ms={"host": 10})]))
    assert d.step_verdict == "n/a" and d.overall == "better"
    assert headline(d).startswith("better overall (compute +20.0 pp)")


def test_html_diff_is_one_offline_page_that_leads_with_the_verdict() -> None:
    from gpuprof.ci.diff_output import diff_html

    page = diff_html(diff_reports(CUR, BASE), ("base <b>.json",), ("cur.json",))
    assert page.startswith("<!DOCTYPE html>") and "script-src 'none'" in page
    body = page.split("<body>")[1]
    assert body.index("Better overall (step time -16.7%)") < body.index("Share of the window")
    assert "base &lt;b&gt;.json" in page and "<b>.json" not in page
    assert page.count('id="gpuprof-diff"') == 1