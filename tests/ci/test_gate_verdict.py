"""The gate's verdicts on step distributions known by construction: each verdict, the
minimum-sample rule, "not comparable", pooled baselines, the causes, older reports."""

from __future__ import annotations

import json
from collections.abc import Sequence

import jsonschema
import numpy as np
import pytest
from reportfactory import rank, report, stepped_rank

from gpuprof.ci.samples import Fingerprint, incomparable, kernel_family, kernel_overlap, run_steps
from gpuprof.ci.schemas import VERDICT
from gpuprof.ci.verdict import GateSettings, Kind, compare
from gpuprof.model.report import Report, report_from_dict, report_to_dict


def _steps(seed: int, n: int, ms: float = 100.0, cv: float = 0.02) -> list[float]:
    return list(ms * np.exp(np.random.default_rng(seed).normal(0.0, cv, n)))


def _run(steps: Sequence[float], host_ms: float = 5.0, dataloader_ms: float = 0.0, ranks: int = 1, **kw: object) -> Report:
    lost = {"host": [host_ms] * len(steps), "dataloader": [dataloader_ms] * len(steps)}
    return report([stepped_rank(r, steps, lost, **kw) for r in range(ranks)])  # type: ignore[arg-type]


def _verdict(cur: Report, *base: Report, **settings: object):  # type: ignore[no-untyped-def]
    return compare(run_steps(cur), [run_steps(b) for b in base], GateSettings(**settings))  # type: ignore[arg-type]


def test_a_slower_run_is_a_regression_with_its_interval_and_cause() -> None:
    base = _run(_steps(1, 30))
    # 8 % slower, all of it DataLoader waits (8 ms per step on a 100 ms step).
    slow = _run([s + 8.0 for s in _steps(2, 30)], dataloader_ms=8.0)
    v = _verdict(slow, base)
    assert v.kind is Kind.REGRESSION and not v.passed
    assert v.low_pct is not None and v.high_pct is not None and v.low_pct < 8.0 < v.high_pct
    assert v.low_pct > 0 and v.n_current == v.n_base == 30
    (cause,) = v.causes
    assert cause.name == "dataloader" and cause.change_ms == pytest.approx(8.0)
    assert cause.low_ms is not None and cause.high_ms is not None and cause.low_ms <= 8.0 <= cause.high_ms
    jsonschema.validate(v.to_dict(), VERDICT)


def test_a_faster_run_is_an_improvement_naming_what_dropped() -> None:
    base = _run([s + 10.0 for s in _steps(3, 30)], host_ms=15.0)
    fast = _run(_steps(4, 30), host_ms=5.0)
    v = _verdict(fast, base)
    assert v.kind is Kind.IMPROVEMENT and v.passed
    assert v.high_pct is not None and v.high_pct < 0
    assert [p.name for p in v.causes] == ["host"] and v.causes[0].change_ms == pytest.approx(-10.0)


def test_the_same_job_again_is_no_significant_change() -> None:
    v = _verdict(_run(_steps(5, 30)), _run(_steps(6, 30)))
    assert v.kind is Kind.NO_CHANGE and v.passed and v.causes == ()
    assert v.low_pct is not None and v.high_pct is not None and v.low_pct < 0 < v.high_pct


def test_a_significant_change_within_the_floor_passes_and_a_zero_floor_catches_it() -> None:
    base = _run(_steps(7, 200, cv=0.002))
    cur = _run(_steps(8, 200, ms=101.0, cv=0.002))  # +1 %, measured to a tenth of a percent
    v = _verdict(cur, base)
    assert v.kind is Kind.NO_CHANGE and "within the 5% floor" in v.reason
    assert v.low_pct is not None and v.low_pct > 0
    assert _verdict(cur, base, min_effect_pct=0.0).kind is Kind.REGRESSION


def test_the_floor_is_reached_by_the_interval_not_the_estimate() -> None:
    # A slowdown just under the floor whose interval reaches it is called: a regression the
    # size of the floor must not be missed half of the time.
    base = _run(_steps(9, 30, cv=0.03))
    cur = _run([s * 1.045 for s in _steps(10, 30, cv=0.03)])
    v = _verdict(cur, base)
    assert v.effect_pct is not None and v.effect_pct < 5.0 <= (v.high_pct or 0.0)
    assert v.kind is Kind.REGRESSION


def test_minimum_sample_rule() -> None:
    base = _run(_steps(11, 30))
    four = _run([s * 1.5 for s in _steps(12, 4)])
    v = _verdict(four, base)
    assert v.kind is Kind.INCONCLUSIVE and v.passed and v.effect_pct is None
    assert v.reason == "needs >= 5 steps on each side at 99% (has 4 vs 30)"
    assert not _verdict(four, base, strict=True).passed
    assert _verdict(four, base, confidence_pct=95).kind is Kind.REGRESSION  # 4 a side reach 95 %
    five = _run([s * 1.5 for s in _steps(12, 5)])
    assert _verdict(five, base).kind is Kind.REGRESSION


def test_no_steps_is_inconclusive_not_a_crash() -> None:
    v = _verdict(report([rank(0, steps=0)]), _run(_steps(13, 10)))
    assert v.kind is Kind.INCONCLUSIVE and "(has 0 vs 10)" in v.reason


@pytest.mark.parametrize(
    "kwargs, says",
    [
        ({"ranks": 2}, "the baseline ran on 1 rank(s), this run on 2"),
        ({"device": "NVIDIA A100-SXM4-80GB"}, "the baseline ran on NVIDIA H100 80GB HBM3, this run on NVIDIA A100-SXM4-80GB"),
        ({"extra": {"parallel": {"pp_size": 2, "dp_size": 4}}}, "the parallel layout differs"),
        ({"extra": {"kernels": [{"name": "void other_kernel<1>(int)", "calls": 900, "total_us": 1.0}]}}, "the kernel mix differs"),
    ],
)
def test_not_comparable_says_why_and_fails(kwargs: dict[str, object], says: str) -> None:
    base = _run(_steps(14, 30), extra={"parallel": {"pp_size": 4, "dp_size": 2},
                                       "kernels": [{"name": "void gemm<float, 3>(int)", "calls": 1000, "total_us": 5.0}]})  # fmt: skip
    extra = {"parallel": {"pp_size": 4, "dp_size": 2}, "kernels": [{"name": "void gemm<half, 2>(long)", "calls": 990, "total_us": 5.0}]}
    extra.update(kwargs.pop("extra", {}))  # type: ignore[arg-type]
    cur = _run(_steps(15, 30), extra=extra, **kwargs)
    v = _verdict(cur, base)
    assert v.kind is Kind.NOT_COMPARABLE and not v.passed and says in v.reason
    # Same template, other arguments: one kernel family, the same job.
    same = _run(_steps(15, 30), extra={"parallel": {"pp_size": 4, "dp_size": 2},
                                       "kernels": [{"name": "void gemm<half, 2>(long)", "calls": 990, "total_us": 5.0}]})  # fmt: skip
    assert _verdict(same, base).kind is Kind.NO_CHANGE


def test_what_a_report_does_not_say_never_mismatches() -> None:
    unknown = Fingerprint()
    known = Fingerprint(world_size=8, devices=("X",), parallel=(("dp_size", 8),), kernels={"k": 1.0})
    assert incomparable(unknown, known) is None and incomparable(known, unknown) is None
    assert kernel_family("void at::native::vectorized_elementwise_kernel<4, Op>(int, Op)") == "at::native::vectorized_elementwise_kernel"
    assert kernel_overlap({"a": 0.5, "b": 0.5}, {"a": 0.2, "c": 0.8}) == pytest.approx(0.2)


def test_the_job_step_is_the_slowest_rank_of_each_step_matched_by_number() -> None:
    r0 = stepped_rank(0, [10.0, 30.0, 10.0], extra={"step_numbers": [5, 6, 7]})
    r1 = stepped_rank(1, [20.0, 10.0, 40.0], extra={"step_numbers": [6, 7, 8]})
    got = run_steps(report([r0, r1]))
    assert got.step_ms.tolist() == [30.0, 10.0]  # steps 6 and 7, by number: max(30, 20), max(10, 10)
    assert got.parts_ms is not None and got.parts_ms["compute"].tolist() == [25.0, 10.0]  # mean over ranks


def test_pooled_baseline_runs_with_run_to_run_spread_widen_the_interval() -> None:
    cur = _run(_steps(20, 30, ms=106.0))
    one = _verdict(cur, _run(_steps(21, 30)))
    offsets = (97.0, 100.0, 103.0, 99.0, 101.5)  # runs whose medians differ by more than their steps' noise
    pooled = _verdict(cur, *[_run(_steps(30 + i, 30, ms=o)) for i, o in enumerate(offsets)])
    assert pooled.runs_base == 5 and pooled.n_base == 150
    assert pooled.method is not None and "run-to-run spread" in pooled.method and pooled.run_spread_pct is not None
    width = lambda v: v.high_pct - v.low_pct
    assert width(pooled) > 2 * width(one)
    assert one.kind is Kind.REGRESSION and pooled.kind is Kind.NO_CHANGE  # 6 % is within that spread


def test_a_report_saved_before_per_step_causes_still_gets_a_verdict() -> None:
    doc = report_to_dict(_run([s + 8.0 for s in _steps(40, 30)], dataloader_ms=8.0))
    for r in doc["ranks"]:
        del r["step_compute_us"], r["step_lost_us"]
    old = report_from_dict(json.loads(json.dumps(doc)))  # as read back from its file
    v = _verdict(old, _run(_steps(41, 30)))
    assert v.kind is Kind.REGRESSION
    assert "no per-step cause times" in v.parts_note and "older" in v.parts_note
    assert v.causes[0].name == "dataloader" and v.causes[0].low_ms is None  # by totals, no interval
    assert v.causes[0].change_ms == pytest.approx(8.0)


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="confidence_pct"):
        GateSettings(confidence_pct=100.0)
    with pytest.raises(ValueError, match="min_effect_pct"):
        GateSettings(min_effect_pct=float("nan"))
