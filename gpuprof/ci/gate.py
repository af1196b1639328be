"""The CI gate: a report against thresholds and/or a baseline, as a list of checks.

Pure: reports and settings in, :class:`CheckResult` rows out; reading files, pyproject.toml
and printing are the CLI's job (:mod:`gpuprof.cli.check`).

What is measured (job level, all ranks together):

- compute share: total compute time / total window time, in % (windows summed over ranks);
- lost share of a cause: that cause's lost time / total window time, in %;
- step time: the slowest rank's mean step (its window over its steps), in ms, the one step
  statistic of every report (synchronous ranks all wait for the slowest one).

Against a baseline, the check is the step-time distributions' verdict
(:func:`check_steps`, :mod:`gpuprof.ci.verdict`: regression, improvement, no significant
change, inconclusive or not comparable, with the change's interval and the causes that
moved). The fixed rules of earlier versions stay as opt-ins: shares may move by
``tolerance_pp`` percentage points in the bad direction (:func:`check_baseline_shares`) and
the mean step may grow by ``step_tolerance_pct`` percent (:func:`check_baseline_step`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpuprof.ci.samples import RunSteps
from gpuprof.ci.verdict import DEFAULT_SETTINGS, GateSettings, Verdict, compare
from gpuprof.model.report import CAUSES, Cause, Report
from gpuprof.render import figures as fg
from gpuprof.util import phrases

DEFAULT_TOLERANCE_PP = 5.0
DEFAULT_STEP_TOLERANCE_PCT = 5.0


@dataclass(frozen=True)
class Thresholds:
    """Absolute limits; ``None`` (or an absent cause) means "not checked"."""

    min_compute_pct: float | None = None
    max_lost_pct: Mapping[Cause, float] = field(default_factory=dict)
    max_step_ms: float | None = None

    @property
    def empty(self) -> bool:
        return self.min_compute_pct is None and not self.max_lost_pct and self.max_step_ms is None


@dataclass(frozen=True)
class CheckResult:
    """One check. ``measured`` is ``None`` when the report cannot say (e.g. no step markers);
    such a check fails, because a gate that cannot be evaluated must not pass silently.
    ``measured`` and ``allowed`` are rounded to 3 decimals, as the JSON report's figures are
    (no ``22.499999999999996``)."""

    name: str
    measured: float | None
    allowed: float
    unit: str  # "%" for shares and the step's change, "ms" for step time
    passed: bool
    message: str
    # The verdict behind a step-distribution check (``baseline.step``); None for the others.
    verdict: Verdict | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.measured is not None:
            object.__setattr__(self, "measured", round(float(self.measured), 3))
        object.__setattr__(self, "allowed", round(float(self.allowed), 3))


class CheckResults(list[CheckResult]):
    """The checks of one gate, in order: a list of :class:`CheckResult` (as earlier versions
    returned) that also says whether the gate passed and carries the step verdict."""

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self)

    @property
    def failed(self) -> list[CheckResult]:
        return [r for r in self if not r.passed]

    @property
    def verdict(self) -> Verdict | None:
        """The verdict on the step-time distributions against the baseline (``None`` without
        a baseline)."""
        return next((r.verdict for r in self if r.verdict is not None), None)


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return fg.NA
    return f"{value:.1f}%" if unit == "%" else f"{value:.1f} ms"


def _at_most(name: str, what: str, measured: float | None, allowed: float, unit: str, why_na: str) -> CheckResult:
    if measured is None:
        return CheckResult(name, None, allowed, unit, False, f"{what} cannot be measured: {why_na}")
    ok = measured <= allowed
    rel = "<=" if ok else ">"
    return CheckResult(name, measured, allowed, unit, ok, f"{what} {_fmt(measured, unit)} {rel} allowed {_fmt(allowed, unit)}")


def _at_least(name: str, what: str, measured: float | None, allowed: float, unit: str, why_na: str) -> CheckResult:
    if measured is None:
        return CheckResult(name, None, allowed, unit, False, f"{what} cannot be measured: {why_na}")
    ok = measured >= allowed
    rel = ">=" if ok else "<"
    return CheckResult(name, measured, allowed, unit, ok, f"{what} {_fmt(measured, unit)} {rel} required {_fmt(allowed, unit)}")


def _step_ms(report: Report) -> float | None:
    us = fg.job_step_time_us(report)
    return None if us is None else us / 1000.0


NO_WINDOW = "the report has no rank with device activity"
NO_STEPS = "the trace has no step markers (ProfilerStep#N)"


def check_thresholds(report: Report, limits: Thresholds) -> list[CheckResult]:
    """One check per threshold that is set, in a fixed order (compute, causes, step time)."""
    shares = fg.job_shares(report)
    out: list[CheckResult] = []
    if limits.min_compute_pct is not None:
        out.append(_at_least("min_compute_pct", "compute share", shares.compute_pct, limits.min_compute_pct, "%", NO_WINDOW))
    for cause in CAUSES:
        if cause in limits.max_lost_pct:
            out.append(
                _at_most(
                    f"max_lost_pct.{cause.value}",
                    f"time lost to {cause.value}",
                    shares.lost_pct[cause],
                    limits.max_lost_pct[cause],
                    "%",
                    NO_WINDOW,
                )
            )
    if limits.max_step_ms is not None:
        out.append(_at_most("max_step_ms", "step time", _step_ms(report), limits.max_step_ms, "ms", NO_STEPS))
    return out


def check_steps(current: RunSteps, base: Sequence[RunSteps], settings: GateSettings = DEFAULT_SETTINGS) -> CheckResult:
    """The step-time distributions' verdict as the check ``baseline.step``: ``measured`` is
    the step's change in % (``None`` when inconclusive or not comparable), ``allowed`` the
    floor, the message the verdict's line with its interval and causes."""
    from gpuprof.ci.verdict_text import verdict_line

    v = compare(current, base, settings)
    return CheckResult("baseline.step", v.effect_pct, settings.min_effect_pct, "%", v.passed, verdict_line(v), v)


def check_baseline_shares(report: Report, baseline: Report, tolerance_pp: float = DEFAULT_TOLERANCE_PP) -> list[CheckResult]:
    """Compute share and every cause's share against the baseline, within ``tolerance_pp``.

    Every cause is checked (not only those the baseline had), so a bottleneck that appears
    from nothing is caught; the message names the cause and how much it grew.
    """
    cur = fg.job_shares(report)
    base = fg.job_shares(baseline)
    out: list[CheckResult] = []
    if base.compute_pct is None:
        out.append(CheckResult("baseline.compute_pct", cur.compute_pct, 0.0, "%", False, f"baseline: {NO_WINDOW}"))
    else:
        r = _at_least(
            "baseline.compute_pct", "compute share", cur.compute_pct, base.compute_pct - tolerance_pp, "%", NO_WINDOW
        )
        out.append(_with_base(r, base.compute_pct, "%"))
    for cause in CAUSES:
        b = base.lost_pct[cause]
        if b is None:
            continue  # already reported above: the baseline has no window
        r = _at_most(
            f"baseline.lost_pct.{cause.value}",
            f"time lost to {cause.value}",
            cur.lost_pct[cause],
            b + tolerance_pp,
            "%",
            NO_WINDOW,
        )
        out.append(_with_base(r, b, "%"))
    return out


def check_baseline_step(
    report: Report, baseline: Report, step_tolerance_pct: float = DEFAULT_STEP_TOLERANCE_PCT
) -> list[CheckResult]:
    """The fixed-tolerance rule of earlier versions: the mean step may grow by
    ``step_tolerance_pct`` % (no check when neither report has steps)."""
    base_step = _step_ms(baseline)
    cur_step = _step_ms(report)
    if base_step is None and cur_step is None:
        return []
    if base_step is None:
        return [CheckResult("baseline.step_ms", cur_step, 0.0, "ms", False, f"baseline step time cannot be measured: {NO_STEPS}")]
    r = _at_most("baseline.step_ms", "step time", cur_step, base_step * (1 + step_tolerance_pct / 100.0), "ms", NO_STEPS)
    return [_with_base(r, base_step, "ms")]


def check_baseline(
    report: Report,
    baseline: Report,
    tolerance_pp: float = DEFAULT_TOLERANCE_PP,
    step_tolerance_pct: float = DEFAULT_STEP_TOLERANCE_PCT,
) -> list[CheckResult]:
    """Both fixed rules of earlier versions: :func:`check_baseline_shares` then
    :func:`check_baseline_step`."""
    return check_baseline_shares(report, baseline, tolerance_pp) + check_baseline_step(report, baseline, step_tolerance_pct)


def _with_base(r: CheckResult, base: float, unit: str) -> CheckResult:
    """Say what the baseline was and by how much the value moved."""
    if r.measured is None:
        return r
    delta = r.measured - base
    moved = phrases.pp(delta) if unit == "%" else phrases.signed_pct((100.0 * delta / base) if base else 0.0)
    msg = f"{r.message} (baseline {_fmt(base, unit)}, {moved})"
    return CheckResult(r.name, r.measured, r.allowed, r.unit, r.passed, msg, r.verdict)


def baseline_notes(report: Report, baseline: Report) -> list[str]:
    """Differences that make a baseline comparison less like-for-like (ranks, GPU model)."""
    notes: list[str] = []
    n_cur, n_base = len(report.ranks), len(baseline.ranks)
    if n_cur != n_base:
        notes.append(f"the baseline has {n_base} rank(s), this run {n_cur}: shares are compared over all ranks")
    cur_dev = sorted({r.device for r in report.ranks if r.device})
    base_dev = sorted({r.device for r in baseline.ranks if r.device})
    if cur_dev and base_dev and cur_dev != base_dev:
        notes.append(
            f"the baseline ran on {', '.join(base_dev)}, this run on {', '.join(cur_dev)}: step times are not like-for-like"
        )
    return notes


def failed(results: list[CheckResult]) -> list[CheckResult]:
    return [r for r in results if not r.passed]
