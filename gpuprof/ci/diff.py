"""Two reports of the same job compared: what got better or worse, per cause and per rank.

Pure: reports in, a :class:`ReportDiff` out. Shares are % of the analysis window, so runs
with a different number of profiled steps compare fairly; changes of shares are in
percentage points (pp). A change smaller than ``noise_pp`` is reported as "same".

The step's verdict is the gate's (:mod:`gpuprof.ci.verdict`, the same statistics as
``gpuprof check --baseline``): ``overall`` follows it when it is decisive (regression:
worse, improvement: better, no significant change: same); when it is inconclusive or
the runs are not comparable, the mean steps decide, a change under ``noise_pct`` being
"same".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuprof.ci.samples import run_steps
from gpuprof.ci.verdict import DEFAULT_SETTINGS, GateSettings, Kind, Verdict, compare
from gpuprof.model.report import CAUSES, Cause, RankReport, Report
from gpuprof.render import figures as fg

DIFF_SCHEMA = "gpuprof.ci.diff/1"
NOISE_PP = 0.5
NOISE_PCT = 1.0


@dataclass(frozen=True)
class ShareChange:
    """One share (compute or a cause) in both reports; ``None`` where a report cannot say."""

    name: str  # "compute" or a cause value
    base_pct: float | None
    current_pct: float | None
    delta_pp: float | None
    verdict: str  # "better", "worse", "same" or "n/a"


@dataclass(frozen=True)
class RankDiff:
    rank: int
    base_step_ms: float | None
    current_step_ms: float | None
    shares: tuple[ShareChange, ...]  # compute first, then the eight causes

    def share(self, name: str) -> ShareChange:
        return next(s for s in self.shares if s.name == name)


@dataclass(frozen=True)
class ReportDiff:
    base_step_ms: float | None
    current_step_ms: float | None
    step_change_pct: float | None  # positive: slower
    step_verdict: str
    shares: tuple[ShareChange, ...]  # job level: compute, then the eight causes
    ranks: tuple[RankDiff, ...]  # ranks present in both
    only_in_base: tuple[int, ...]
    only_in_current: tuple[int, ...]
    verdict: Verdict | None = None  # the gate's verdict on the step distributions

    def share(self, name: str) -> ShareChange:
        return next(s for s in self.shares if s.name == name)

    @property
    def overall(self) -> str:
        """``better``, ``worse``, ``same`` or ``n/a`` for the job as a whole: the step's
        verdict when it is decisive, else the step time when both runs have step markers
        (what the user waits for), else the compute share."""
        decided = {Kind.REGRESSION: "worse", Kind.IMPROVEMENT: "better", Kind.NO_CHANGE: "same"}
        if self.verdict is not None and self.verdict.kind in decided:
            return decided[self.verdict.kind]
        if self.step_verdict != "n/a":
            return self.step_verdict
        return self.share("compute").verdict

    @property
    def worse(self) -> tuple[ShareChange, ...]:
        return tuple(s for s in self.shares if s.verdict == "worse")

    @property
    def better(self) -> tuple[ShareChange, ...]:
        return tuple(s for s in self.shares if s.verdict == "better")


def _change(name: str, base: float | None, cur: float | None, higher_is_better: bool, noise_pp: float) -> ShareChange:
    if base is None or cur is None:
        return ShareChange(name, base, cur, None, "n/a")
    delta = cur - base
    if abs(delta) < noise_pp:
        verdict = "same"
    else:
        verdict = "better" if (delta > 0) == higher_is_better else "worse"
    return ShareChange(name, base, cur, delta, verdict)


def _shares(
    base_compute: float | None,
    cur_compute: float | None,
    base_lost: dict[Cause, float | None],
    cur_lost: dict[Cause, float | None],
    noise_pp: float,
) -> tuple[ShareChange, ...]:
    out = [_change("compute", base_compute, cur_compute, True, noise_pp)]
    out += [_change(c.value, base_lost[c], cur_lost[c], False, noise_pp) for c in CAUSES]
    return tuple(out)


def _ms(us: float | None) -> float | None:
    return None if us is None else us / 1000.0


def _rank_diff(b: RankReport, c: RankReport, noise_pp: float) -> RankDiff:
    return RankDiff(
        rank=b.rank,
        base_step_ms=_ms(fg.step_time_us(b)),
        current_step_ms=_ms(fg.step_time_us(c)),
        shares=_shares(
            fg.compute_pct(b),
            fg.compute_pct(c),
            {x: fg.lost_pct(b, x) for x in CAUSES},
            {x: fg.lost_pct(c, x) for x in CAUSES},
            noise_pp,
        ),
    )


def diff_reports(
    base: Report,
    current: Report,
    noise_pp: float = NOISE_PP,
    noise_pct: float = NOISE_PCT,
    settings: GateSettings | None = DEFAULT_SETTINGS,
) -> ReportDiff:
    """Compare ``current`` with ``base`` (job level, then rank by rank for common ranks);
    ``settings`` are the step verdict's (``None``: no verdict)."""
    bs = fg.job_shares(base)
    cs = fg.job_shares(current)
    base_step = _ms(fg.job_step_time_us(base))
    cur_step = _ms(fg.job_step_time_us(current))
    change: float | None = None
    verdict = "n/a"
    if base_step is not None and cur_step is not None and base_step > 0:
        change = 100.0 * (cur_step - base_step) / base_step
        verdict = "same" if abs(change) < noise_pct else ("worse" if change > 0 else "better")
    b_ranks = {r.rank: r for r in base.ranks}
    c_ranks = {r.rank: r for r in current.ranks}
    common = sorted(set(b_ranks) & set(c_ranks))
    return ReportDiff(
        base_step_ms=base_step,
        current_step_ms=cur_step,
        step_change_pct=change,
        step_verdict=verdict,
        shares=_shares(bs.compute_pct, cs.compute_pct, dict(bs.lost_pct), dict(cs.lost_pct), noise_pp),
        ranks=tuple(_rank_diff(b_ranks[r], c_ranks[r], noise_pp) for r in common),
        only_in_base=tuple(sorted(set(b_ranks) - set(c_ranks))),
        only_in_current=tuple(sorted(set(c_ranks) - set(b_ranks))),
        verdict=None if settings is None else compare(run_steps(current), [run_steps(base)], settings),
    )


def _share_dict(s: ShareChange) -> dict[str, Any]:
    r = lambda v: None if v is None else round(v, 3)
    return {"base_pct": r(s.base_pct), "current_pct": r(s.current_pct), "delta_pp": r(s.delta_pp), "verdict": s.verdict}


def diff_to_dict(d: ReportDiff, base_inputs: tuple[str, ...] = (), current_inputs: tuple[str, ...] = ()) -> dict[str, Any]:
    """The JSON form of a diff (schema ``gpuprof.ci.diff/1``)."""
    r = lambda v: None if v is None else round(v, 3)
    return {
        "schema": DIFF_SCHEMA,
        "base": list(base_inputs),
        "current": list(current_inputs),
        "overall": d.overall,
        "step_ms": {
            "base": r(d.base_step_ms),
            "current": r(d.current_step_ms),
            "change_pct": r(d.step_change_pct),
            "verdict": d.step_verdict,
        },
        "shares": {s.name: _share_dict(s) for s in d.shares},
        "ranks": [
            {
                "rank": rd.rank,
                "step_ms": {"base": r(rd.base_step_ms), "current": r(rd.current_step_ms)},
                "shares": {s.name: _share_dict(s) for s in rd.shares},
            }
            for rd in d.ranks
        ],
        "only_in_base": list(d.only_in_base),
        "only_in_current": list(d.only_in_current),
        "verdict": None if d.verdict is None else d.verdict.to_dict(),
    }
