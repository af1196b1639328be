"""The report: what analysis hands to renderers, and what ``--format json`` serializes.

The JSON shape is fixed by SPEC.md (schema ``gpuprof.report/1``): keys may be added, none
renamed or dropped. :func:`report_to_dict` and :func:`report_from_dict` are the only places
that know the JSON layout, so that ``check --baseline`` and ``diff`` read exactly what
``analyze --format json`` writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Mapping, Sequence

SCHEMA = "gpuprof.report/1"


class Cause(str, Enum):
    """The eight causes of lost GPU time, in SPEC.md order."""

    PIPELINE_BUBBLE = "pipeline_bubble"
    COMMUNICATION = "communication"
    STRAGGLER = "straggler"
    MEMORY = "memory"
    DATALOADER = "dataloader"
    SYNC = "sync"
    HOST = "host"
    OTHER = "other"


CAUSES: tuple[Cause, ...] = tuple(Cause)


def zero_lost() -> dict[Cause, float]:
    return {c: 0.0 for c in CAUSES}


@dataclass(frozen=True)
class Recommendation:
    id: str
    category: Cause
    title: str
    estimated_savings_pct: float
    ranks: tuple[int, ...]
    evidence: tuple[str, ...]
    actions: tuple[str, ...]
    # The what-if of gpuprof.analysis.whatifs the saving was replayed from (``None``: the
    # saving comes from a closed-form estimate, said in the evidence).
    whatif: str | None = None


@dataclass(frozen=True)
class RankReport:
    """One rank's accounting. ``compute_us + sum(lost_us) == window_us``."""

    rank: int
    device: str | None
    steps: int
    window_us: float
    compute_us: float
    lost_us: Mapping[Cause, float]
    source: str | None = None
    step_times_us: tuple[float, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def lost_total_us(self) -> float:
        return float(sum(self.lost_us.values()))


@dataclass(frozen=True)
class Totals:
    window_us: float
    compute_us: float
    lost_us: Mapping[Cause, float]


@dataclass(frozen=True)
class Report:
    inputs: tuple[str, ...]
    ranks: tuple[RankReport, ...]
    recommendations: tuple[Recommendation, ...]
    warnings: tuple[str, ...] = ()
    # More keys for the JSON report (job-level findings: critical rank per step, imbalance,
    # pipeline schedule, NVML sample summaries, ...). Values must be JSON-serializable.
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def totals(self) -> Totals:
        lost = zero_lost()
        for r in self.ranks:
            for c in CAUSES:
                lost[c] += float(r.lost_us.get(c, 0.0))
        return Totals(
            window_us=float(sum(r.window_us for r in self.ranks)),
            compute_us=float(sum(r.compute_us for r in self.ranks)),
            lost_us=lost,
        )


def _lost_to_dict(lost: Mapping[Cause, float]) -> dict[str, float]:
    return {c.value: round(float(lost.get(c, 0.0)), 3) for c in CAUSES}


def report_to_dict(report: Report) -> dict[str, Any]:
    totals = report.totals
    out: dict[str, Any] = {
        "schema": SCHEMA,
        "inputs": list(report.inputs),
        "ranks": [],
        "totals": {
            "window_us": round(totals.window_us, 3),
            "compute_us": round(totals.compute_us, 3),
            "lost_us": _lost_to_dict(totals.lost_us),
        },
        "recommendations": [],
    }
    for r in report.ranks:
        row: dict[str, Any] = {
            "rank": r.rank,
            "device": r.device,
            "steps": r.steps,
            "window_us": round(r.window_us, 3),
            "compute_us": round(r.compute_us, 3),
            "lost_us": _lost_to_dict(r.lost_us),
            "source": r.source,
            "step_times_us": [round(t, 3) for t in r.step_times_us],
        }
        row.update(r.extra)
        out["ranks"].append(row)
    for rec in report.recommendations:
        out["recommendations"].append(
            {
                "id": rec.id,
                "category": rec.category.value,
                "title": rec.title,
                "estimated_savings_pct": round(rec.estimated_savings_pct, 2),
                "ranks": list(rec.ranks),
                "evidence": list(rec.evidence),
                "actions": list(rec.actions),
                "whatif": rec.whatif,
            }
        )
    out["warnings"] = list(report.warnings)
    out.update(report.extra)
    return out


class ReportFormatError(ValueError):
    """A JSON document is not a gpuprof report of a schema this version reads."""


def report_from_dict(data: Any) -> Report:
    """Rebuild a :class:`Report` from :func:`report_to_dict` output (for check / diff)."""
    if not isinstance(data, dict):
        raise ReportFormatError("not a gpuprof report (expected a JSON object)")
    schema = data.get("schema")
    if schema != SCHEMA:
        raise ReportFormatError(f"report schema is {schema!r}, this gpuprof reads {SCHEMA!r}")
    try:
        ranks = []
        for r in data["ranks"]:
            known = {"rank", "device", "steps", "window_us", "compute_us", "lost_us", "source", "step_times_us"}
            ranks.append(
                RankReport(
                    rank=int(r["rank"]),
                    device=r.get("device"),
                    steps=int(r["steps"]),
                    window_us=float(r["window_us"]),
                    compute_us=float(r["compute_us"]),
                    lost_us={c: float(r["lost_us"].get(c.value, 0.0)) for c in CAUSES},
                    source=r.get("source"),
                    step_times_us=tuple(float(t) for t in r.get("step_times_us", ())),
                    extra={k: v for k, v in r.items() if k not in known},
                )
            )
        recs = [
            Recommendation(
                id=str(x["id"]),
                category=Cause(x["category"]),
                title=str(x["title"]),
                estimated_savings_pct=float(x["estimated_savings_pct"]),
                ranks=tuple(int(i) for i in x["ranks"]),
                evidence=tuple(str(e) for e in x["evidence"]),
                actions=tuple(str(a) for a in x["actions"]),
                whatif=None if x.get("whatif") is None else str(x["whatif"]),
            )
            for x in data["recommendations"]
        ]
    except (KeyError, TypeError, ValueError) as exc:
        raise ReportFormatError(f"malformed gpuprof report: {exc}") from None
    fixed = {"schema", "inputs", "ranks", "totals", "recommendations", "warnings"}
    return Report(
        inputs=tuple(str(i) for i in data.get("inputs", ())),
        ranks=tuple(ranks),
        recommendations=tuple(recs),
        warnings=tuple(str(w) for w in data.get("warnings", ())),
        extra={k: v for k, v in data.items() if k not in fixed},
    )


def sort_recommendations(recs: Sequence[Recommendation]) -> tuple[Recommendation, ...]:
    """Highest estimated savings first; ties broken by id so output is stable."""
    return tuple(sorted(recs, key=lambda r: (-r.estimated_savings_pct, r.id)))
