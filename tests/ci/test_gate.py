"""The CI gate's rules on reports whose shares are known by construction."""

from __future__ import annotations

import pytest
from reportfactory import rank, report

from gpuprof.ci.gate import CheckResult, Thresholds, check_baseline, check_thresholds, failed
from gpuprof.model.report import CAUSES, Cause

# Two ranks of 100 ms: 200 ms window, dataloader 30 ms (15 %), host 10 ms (5 %), compute 80 %.
BASE = report([rank(0, lost_ms={"dataloader": 20, "host": 10}), rank(1, lost_ms={"dataloader": 10})])


def _by_name(results: list[CheckResult]) -> dict[str, CheckResult]:
    return {r.name: r for r in results}


def test_thresholds_pass_at_the_limit_and_fail_beyond() -> None:
    ok = check_thresholds(BASE, Thresholds(min_compute_pct=80.0, max_lost_pct={Cause.DATALOADER: 15.0}, max_step_ms=25.0))
    got = _by_name(ok)
    assert [r.name for r in ok] == ["min_compute_pct", "max_lost_pct.dataloader", "max_step_ms"]
    assert got["min_compute_pct"].measured == pytest.approx(80.0)
    assert got["min_compute_pct"].passed  # equal to the limit passes
    assert got["max_lost_pct.dataloader"].measured == pytest.approx(15.0) and got["max_lost_pct.dataloader"].passed
    assert got["max_step_ms"].measured == pytest.approx(25.0) and got["max_step_ms"].passed
    bad = _by_name(check_thresholds(BASE, Thresholds(min_compute_pct=80.1, max_lost_pct={Cause.DATALOADER: 14.9}, max_step_ms=24.9)))
    assert not any(r.passed for r in bad.values())
    assert "dataloader 15.0% > allowed 14.9%" in bad["max_lost_pct.dataloader"].message
    assert bad["min_compute_pct"].unit == "%" and bad["max_step_ms"].unit == "ms"


def test_unset_thresholds_are_not_checked() -> None:
    assert check_thresholds(BASE, Thresholds()) == []
    assert Thresholds().empty and not Thresholds(max_step_ms=1.0).empty


def test_step_time_is_the_slowest_ranks_median() -> None:
    slow = report([rank(0, window_ms=100, steps=4), rank(1, window_ms=200, steps=4)])  # 25 ms and 50 ms steps
    r = check_thresholds(slow, Thresholds(max_step_ms=40.0))[0]
    assert r.measured == pytest.approx(50.0) and not r.passed


def test_unmeasurable_check_fails_with_reason() -> None:
    no_steps = report([rank(0, steps=0)])
    r = check_thresholds(no_steps, Thresholds(max_step_ms=100.0))[0]
    assert r.measured is None and not r.passed and "no step markers" in r.message
    cpu_only = report([rank(0, window_ms=0, steps=0, extra={"note": "CPU-only"})])
    r = check_thresholds(cpu_only, Thresholds(min_compute_pct=1.0))[0]
    assert r.measured is None and not r.passed


def test_baseline_against_itself_passes_every_cause() -> None:
    results = check_baseline(BASE, BASE)
    assert not failed(results)
    names = [r.name for r in results]
    assert names == ["baseline.compute_pct", *[f"baseline.lost_pct.{c.value}" for c in CAUSES], "baseline.step_ms"]


def test_baseline_names_the_cause_that_grew() -> None:
    # Same job, dataloader grew from 15 % to 25 % of the window (and the step got longer).
    worse = report([rank(0, window_ms=110, lost_ms={"dataloader": 30, "host": 10}), rank(1, window_ms=110, lost_ms={"dataloader": 25})])
    bad = failed(check_baseline(worse, BASE, tolerance_pp=5.0, step_tolerance_pct=5.0))
    names = {r.name for r in bad}
    assert "baseline.lost_pct.dataloader" in names
    assert "baseline.lost_pct.host" not in names
    assert "baseline.step_ms" in names  # 27.5 ms vs 25 ms: +10 % > 5 %
    dl = next(r for r in bad if r.name == "baseline.lost_pct.dataloader")
    assert dl.allowed == pytest.approx(20.0) and dl.measured == pytest.approx(25.0)
    assert "dataloader" in dl.message and "+10.0 pp" in dl.message


def test_tolerance_decides() -> None:
    worse = report([rank(0, lost_ms={"dataloader": 26, "host": 10}), rank(1, lost_ms={"dataloader": 10})])  # 18 %
    assert not failed(check_baseline(worse, BASE, tolerance_pp=5.0))
    assert {r.name for r in failed(check_baseline(worse, BASE, tolerance_pp=2.0))} == {
        "baseline.compute_pct", "baseline.lost_pct.dataloader"
    }  # fmt: skip


def test_a_cause_that_appears_from_nothing_is_caught() -> None:
    new = report([rank(0, lost_ms={"dataloader": 20, "host": 10, "straggler": 12}), rank(1, lost_ms={"dataloader": 10})])
    assert "baseline.lost_pct.straggler" in {r.name for r in failed(check_baseline(new, BASE))}


def test_faster_step_and_less_lost_time_pass() -> None:
    better = report([rank(0, window_ms=80, lost_ms={"host": 2}), rank(1, window_ms=80)])
    assert not failed(check_baseline(better, BASE))


def test_baseline_notes_say_when_runs_differ() -> None:
    from gpuprof.ci.gate import baseline_notes

    assert baseline_notes(BASE, BASE) == []
    other = report([rank(0, device="NVIDIA A100-SXM4-80GB")])
    notes = baseline_notes(other, BASE)
    assert any("2 rank(s), this run 1" in n for n in notes)
    assert any("NVIDIA H100 80GB HBM3" in n and "NVIDIA A100-SXM4-80GB" in n for n in notes)
