"""The gate's verdict on a run against a baseline: from step-time distributions, not means.

Pure: :class:`~gpuprof.ci.samples.RunSteps` in, a :class:`Verdict` out. docs/gate.md is
the user's description; the rules, in order:

1. **not comparable** when a baseline run ran on another world size, device model or
   parallel layout, or its kernel mix differs (:func:`gpuprof.ci.samples.incomparable`);
2. **inconclusive** when either side has fewer steps than the test needs to reach its
   level at all (:func:`gpuprof.ci.stats.min_per_side`: 5 per side at 99 %);
3. otherwise the step's change is the Hodges-Lehmann ratio of the run's step times to the
   baseline's (log step times, :func:`gpuprof.ci.stats.shift_estimate`) with the interval
   that inverts the Mann-Whitney test. With three or more baseline runs, the spread of
   their medians beyond their own step noise (run-to-run noise, which one run's steps
   cannot show) widens the interval (:func:`gpuprof.ci.stats.between_run_variance`);
4. **regression** when the interval lies above 0 (significant) and reaches the floor
   ``min_effect_pct`` (a slowdown that large is plausible); **improvement** the same way
   down; else **no significant change**, which includes a significant change whose whole
   interval lies within the floor.

Once the steps are compared, compute and every cause are compared as time per step (ms,
mean over the ranks) with a seeded bootstrap interval each; for a regression (an
improvement) those whose interval lies above (below) 0 are named, the largest change first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np

from gpuprof.ci import stats
from gpuprof.ci.samples import PARTS, RunSteps, incomparable

DEFAULT_MIN_EFFECT_PCT = 5.0
DEFAULT_CONFIDENCE_PCT = 99.0
# A part is named among the causes of a change only when it moved by at least this share of
# the baseline's median step: a significant 1 µs is true, and no reason for anything.
PART_MIN_PCT_OF_STEP = 0.5


class Kind(str, Enum):
    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    NO_CHANGE = "no significant change"
    INCONCLUSIVE = "inconclusive"
    NOT_COMPARABLE = "not comparable"


@dataclass(frozen=True)
class GateSettings:
    """``min_effect_pct``: the floor, the smallest change of the step that matters (%);
    ``confidence_pct``: the intervals' level (the test's false-alarm rate is
    ``100 - confidence_pct`` %, split between the two directions); ``strict``: an
    inconclusive verdict fails."""

    min_effect_pct: float = DEFAULT_MIN_EFFECT_PCT
    confidence_pct: float = DEFAULT_CONFIDENCE_PCT
    strict: bool = False

    def __post_init__(self) -> None:
        if not (math.isfinite(self.min_effect_pct) and self.min_effect_pct >= 0):
            raise ValueError(f"min_effect_pct: expected a finite number >= 0, got {self.min_effect_pct!r}")
        if not (math.isfinite(self.confidence_pct) and 50.0 <= self.confidence_pct < 100.0):
            raise ValueError(f"confidence_pct: expected a number from 50 to under 100, got {self.confidence_pct!r}")

    @property
    def confidence(self) -> float:
        return self.confidence_pct / 100.0


@dataclass(frozen=True)
class PartChange:
    """Compute or one cause, in ms per step: the baseline's and this run's mean, the change
    and its interval (``None`` bounds: no per-step data on a side, so no interval)."""

    name: str
    base_ms: float
    current_ms: float
    low_ms: float | None
    high_ms: float | None

    @property
    def change_ms(self) -> float:
        return self.current_ms - self.base_ms

    @property
    def grew(self) -> bool:
        """Significantly more time per step."""
        return self.low_ms is not None and self.low_ms > 0.0

    @property
    def dropped(self) -> bool:
        return self.high_ms is not None and self.high_ms < 0.0

    def to_dict(self) -> dict[str, Any]:
        r = lambda v: None if v is None else round(v, 3)
        return {
            "base_ms_per_step": r(self.base_ms),
            "current_ms_per_step": r(self.current_ms),
            "change_ms_per_step": r(self.change_ms),
            "low_ms_per_step": r(self.low_ms),
            "high_ms_per_step": r(self.high_ms),
        }


@dataclass(frozen=True)
class Verdict:
    """The gate's answer (see the module docstring). Percentages are the step's change
    (positive: slower); ``None`` where the verdict came before any measuring."""

    kind: Kind
    reason: str  # why, for inconclusive and not comparable; what the floor did otherwise ("")
    settings: GateSettings
    n_current: int
    n_base: int
    runs_base: int
    min_steps: int
    effect_pct: float | None = None
    low_pct: float | None = None
    high_pct: float | None = None
    p_value: float | None = None
    method: str | None = None  # "exact" / "normal" (Mann-Whitney), "+ run-to-run spread" added
    run_spread_pct: float | None = None  # run-to-run standard deviation taken in, % of the step
    base_median_ms: float | None = None
    current_median_ms: float | None = None
    parts: tuple[PartChange, ...] = ()
    parts_note: str = ""  # why the parts have no intervals, when they do not

    @property
    def passed(self) -> bool:
        if self.kind in (Kind.REGRESSION, Kind.NOT_COMPARABLE):
            return False
        return not (self.kind is Kind.INCONCLUSIVE and self.settings.strict)

    @property
    def causes(self) -> tuple[PartChange, ...]:
        """The parts that moved with the verdict, the largest change first: those that grew
        for a regression, dropped for an improvement (significantly, or without intervals
        by their change alone), by at least :data:`PART_MIN_PCT_OF_STEP` % of the step."""
        least = PART_MIN_PCT_OF_STEP / 100.0 * (self.base_median_ms or 0.0)
        if self.kind is Kind.REGRESSION:
            moved = [p for p in self.parts if (p.grew or p.low_ms is None) and p.change_ms >= max(least, 1e-9)]
            return tuple(sorted(moved, key=lambda p: -p.change_ms))
        if self.kind is Kind.IMPROVEMENT:
            moved = [p for p in self.parts if (p.dropped or p.high_ms is None) and -p.change_ms >= max(least, 1e-9)]
            return tuple(sorted(moved, key=lambda p: p.change_ms))
        return ()

    def to_dict(self) -> dict[str, Any]:
        r = lambda v, d=3: None if v is None else round(v, d)
        return {
            "verdict": self.kind.value,
            "passed": self.passed,
            "reason": self.reason,
            "step": {
                "change_pct": r(self.effect_pct),
                "low_pct": r(self.low_pct),
                "high_pct": r(self.high_pct),
                "confidence_pct": self.settings.confidence_pct,
                "p_value": None if self.p_value is None else float(f"{self.p_value:.4g}"),
                "method": self.method,
                "run_spread_pct": r(self.run_spread_pct),
                "base_median_ms": r(self.base_median_ms),
                "current_median_ms": r(self.current_median_ms),
            },
            "min_effect_pct": self.settings.min_effect_pct,
            "strict": self.settings.strict,
            "steps": {"current": self.n_current, "base": self.n_base, "min_per_side": self.min_steps},
            "baseline_runs": self.runs_base,
            "causes": [p.name for p in self.causes],
            "parts": {p.name: p.to_dict() for p in self.parts},
            "parts_note": self.parts_note,
        }


def _pct(log_ratio: float) -> float:
    return 100.0 * math.expm1(log_ratio)


def _parts(current: RunSteps, base: Sequence[RunSteps], confidence: float) -> tuple[tuple[PartChange, ...], str]:
    if current.parts_ms is not None and all(b.parts_ms is not None for b in base):
        out = []
        for i, name in enumerate(PARTS):
            cur = current.parts_ms[name]
            pooled = np.concatenate([b.parts_ms[name] for b in base if b.parts_ms is not None])
            d = stats.bootstrap_mean_diff(cur, pooled, confidence, seed=i)
            base_ms = float(pooled.mean())
            out.append(PartChange(name, base_ms, base_ms + d.estimate, d.low, d.high))
        return tuple(out), ""
    old = [b.label for b in base if b.parts_ms is None] if current.parts_ms is not None else ["this run"]
    note = (
        f"no per-step cause times in {', '.join(old[:3])}{' ...' if len(old) > 3 else ''} (a report saved by an older "
        "gpuprof): causes are compared by their totals per step, without intervals"
    )
    if current.totals_ms is None or any(b.totals_ms is None for b in base):
        return (), note
    return (
        tuple(
            PartChange(name, float(np.mean([b.totals_ms[name] for b in base if b.totals_ms])), current.totals_ms[name], None, None)
            for name in PARTS
        ),
        note,
    )


DEFAULT_SETTINGS = GateSettings()


def compare(current: RunSteps, base: Sequence[RunSteps], settings: GateSettings = DEFAULT_SETTINGS) -> Verdict:
    """The verdict on ``current`` against the pooled ``base`` runs (module docstring)."""
    if not base:
        raise ValueError("compare needs at least one baseline run")
    n_cur = int(current.step_ms.size)
    n_base = int(sum(b.step_ms.size for b in base))
    need = stats.min_per_side(settings.confidence)

    def verdict(kind: Kind, reason: str, **measured: Any) -> Verdict:
        return Verdict(kind, reason, settings, n_cur, n_base, len(base), need, **measured)

    for b in base:
        why = incomparable(current.fingerprint, b.fingerprint, "the baseline" if len(base) == 1 else f"baseline {b.label}")
        if why is not None:
            return verdict(Kind.NOT_COMPARABLE, why)
    if n_cur < need or n_base < need:
        return verdict(Kind.INCONCLUSIVE, f"needs >= {need} steps on each side at {settings.confidence_pct:g}% (has {n_cur} vs {n_base})")
    x = np.log(current.step_ms)
    y = np.log(np.concatenate([b.step_ms for b in base]))
    sh = stats.shift_estimate(x, y, settings.confidence)
    if sh.low is None or sh.high is None:
        return verdict(Kind.INCONCLUSIVE, f"{n_cur} vs {n_base} steps with this many equal step times cannot reach {settings.confidence_pct:g}%")
    low, high, p, method = sh.low, sh.high, sh.p_value, sh.method
    logs = [np.log(b.step_ms) for b in base]
    spread = stats.between_run_variance(logs)
    if spread is not None and spread > 0:
        # The run's own offset and the baseline mean's, beside the steps' noise: each side
        # of the interval widened in quadrature, so that it keeps its asymmetry; Student's
        # quantile, since a handful of runs estimate that variance roughly.
        k = stats.usable_runs(logs)
        t = stats.t_quantile(0.5 + settings.confidence / 2.0, k - 1)
        extra = t * t * spread * (1.0 + 1.0 / k)
        low = sh.estimate - math.sqrt((sh.estimate - low) ** 2 + extra)
        high = sh.estimate + math.sqrt((high - sh.estimate) ** 2 + extra)
        z = stats.normal_quantile(0.5 + settings.confidence / 2.0)
        p = stats.normal_two_sided_p(sh.estimate / ((high - low) / (2.0 * z)))
        method = f"{method} + run-to-run spread"
    floor = settings.min_effect_pct
    lo_pct, hi_pct = _pct(low), _pct(high)
    reason = ""
    if lo_pct > 0 and hi_pct >= floor:
        kind = Kind.REGRESSION
    elif hi_pct < 0 and lo_pct <= -floor:
        kind = Kind.IMPROVEMENT
    else:
        kind = Kind.NO_CHANGE
        if lo_pct > 0 or hi_pct < 0:
            reason = f"significant, but the whole interval is within the {floor:g}% floor"
    parts, note = _parts(current, base, settings.confidence)
    return verdict(
        kind,
        reason,
        effect_pct=_pct(sh.estimate),
        low_pct=lo_pct,
        high_pct=hi_pct,
        p_value=p,
        method=method,
        run_spread_pct=None if spread is None else 100.0 * math.sqrt(spread),
        base_median_ms=float(np.median(np.exp(y))),
        current_median_ms=float(np.median(current.step_ms)),
        parts=parts,
        parts_note=note,
    )


def without_baseline(current: RunSteps, reason: str, settings: GateSettings = DEFAULT_SETTINGS) -> Verdict:
    """The inconclusive verdict of a run with nothing to compare it with (a history with no
    earlier comparable run): it passes unless ``settings.strict``."""
    need = stats.min_per_side(settings.confidence)
    return Verdict(Kind.INCONCLUSIVE, reason, settings, int(current.step_ms.size), 0, 0, need)
