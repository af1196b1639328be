"""The report: what analysis hands to renderers, and what ``--format json`` serializes.

The JSON shape is fixed by SPEC.md (schema ``gpuprof.report/1``): keys may be added, none
renamed or dropped. :func:`report_to_dict` and :func:`report_from_dict` are the only places
that know the JSON layout, so that ``check --baseline`` and ``diff`` read exactly what
``analyze --format json`` writes.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:  # pandas is imported only when a DataFrame is asked for
    import pandas as pd

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


# Field metadata read by the JSON Schema generator (gpuprof/model/schema.py): "doc" is the
# key's description, "minimum" its lower bound, "flatten" marks a mapping whose keys are
# written beside the fixed ones (so the schema allows more keys there). In the JSON, a field
# without a default is required (SPEC.md's keys), one with a default may be absent.
def _doc(text: str, **more: Any) -> Any:
    return field(metadata={"doc": text, **more})


@dataclass(frozen=True)
class Recommendation:
    id: str = _doc("stable rule id, the same for the same finding in every report")
    category: Cause = _doc("the cause this recommendation fixes")
    title: str = _doc("one line a user can act on")
    estimated_savings_pct: float = _doc("estimated share of step time (%) that fixing it would save")
    ranks: tuple[int, ...] = _doc("ranks where the cause originates and the fix applies", item_minimum=0)
    evidence: tuple[str, ...] = _doc("measured facts behind it")
    actions: tuple[str, ...] = _doc("concrete changes to try")
    # The what-if of gpuprof.analysis.whatifs the saving was replayed from (``None``: the
    # saving comes from a closed-form estimate, said in the evidence).
    whatif: str | None = field(
        default=None,
        metadata={"doc": "the what-if the saving was replayed from; null when it comes from a closed-form estimate"},
    )


@dataclass(frozen=True)
class RankReport:
    """One rank's accounting. ``compute_us + sum(lost_us) == window_us``."""

    rank: int = _doc("global rank", minimum=0)
    device: str | None = _doc("device name, null when the trace does not say")
    steps: int = _doc("profiled steps in the analysis window", minimum=0)
    window_us: float = _doc("analysis window in microseconds: compute_us + sum(lost_us)", minimum=0)
    compute_us: float = _doc("time some compute kernel ran, in microseconds", minimum=0)
    lost_us: Mapping[Cause, float] = _doc("lost time per cause in microseconds; all eight causes present")
    source: str | None = field(default=None, metadata={"doc": "trace file this rank was read from"})
    step_times_us: tuple[float, ...] = field(
        default=(), metadata={"doc": "duration of each step in the window, in microseconds", "item_minimum": 0}
    )
    extra: Mapping[str, Any] = field(default_factory=dict, metadata={"flatten": True})

    @property
    def lost_total_us(self) -> float:
        return float(sum(self.lost_us.values()))


@dataclass(frozen=True)
class Totals:
    window_us: float = _doc("sum of the ranks' windows, in microseconds", minimum=0)
    compute_us: float = _doc("sum of the ranks' compute time, in microseconds", minimum=0)
    lost_us: Mapping[Cause, float] = _doc("sum of the ranks' lost time per cause, in microseconds")


@dataclass(frozen=True, repr=False)
class Report:
    """The result of an analysis: per-rank accounting, recommendations and job findings.

    ``to_dict()`` / ``to_json()`` give the ``gpuprof.report/1`` JSON document of SPEC.md;
    ``to_dataframe()`` gives one row per rank; ``str(report)`` is the text report.
    """

    inputs: tuple[str, ...] = _doc("the paths that were analyzed")
    ranks: tuple[RankReport, ...] = _doc("one entry per rank, sorted by rank")
    recommendations: tuple[Recommendation, ...] = _doc("sorted by estimated_savings_pct, highest first")
    warnings: tuple[str, ...] = field(default=(), metadata={"doc": "what the analysis could not do or had to guess"})
    # More keys for the JSON report (job-level findings: critical rank per step, imbalance,
    # pipeline schedule, NVML sample summaries, ...). Values must be JSON-serializable.
    extra: Mapping[str, Any] = field(default_factory=dict, metadata={"flatten": True})

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

    def __repr__(self) -> str:
        # Short: a notebook showing a 1000-rank report must not print every figure.
        t = self.totals
        compute = f"{100.0 * t.compute_us / t.window_us:.1f}%" if t.window_us > 0 else "N/A"
        first = f", first: {self.recommendations[0].title!r}" if self.recommendations else ""
        return (
            f"<gpuprof.Report {len(self.ranks)} rank(s), compute {compute} of the window, "
            f"{len(self.recommendations)} recommendation(s){first}>"
        )

    def __str__(self) -> str:
        """The text report, as ``gpuprof analyze`` prints it (100 columns, no colour)."""
        from gpuprof.render import render

        return render(self, "text", width=100)

    def to_dict(self) -> dict[str, Any]:
        """The ``gpuprof.report/1`` JSON document as Python objects."""
        return report_to_dict(self)

    def to_json(self, indent: int | None = 2) -> str:
        """The ``gpuprof.report/1`` JSON document (what ``--format json`` writes)."""
        return report_to_json(self, indent)

    @classmethod
    def from_dict(cls, data: Any) -> Report:
        """Rebuild a report from its JSON document; :class:`ReportFormatError` naming the
        first problem (as a JSON path) when ``data`` is not a valid ``gpuprof.report/1``."""
        return report_from_dict(data)

    def to_dataframe(self) -> pd.DataFrame:
        """One row per rank, indexed by rank (needs pandas).

        Columns: ``device``, ``steps``, ``window_us``, ``compute_us``, ``compute_pct``,
        ``lost_us`` (all causes), ``lost_<cause>_us`` for each of the eight causes,
        ``step_median_us`` (NaN without steps) and ``source``.
        """
        import pandas as pd

        rows = []
        for r in self.ranks:
            row: dict[str, Any] = {
                "rank": r.rank,
                "device": r.device,
                "steps": r.steps,
                "window_us": r.window_us,
                "compute_us": r.compute_us,
                "compute_pct": 100.0 * r.compute_us / r.window_us if r.window_us > 0 else math.nan,
                "lost_us": r.lost_total_us,
            }
            for c in CAUSES:
                row[f"lost_{c.value}_us"] = float(r.lost_us.get(c, 0.0))
            row["step_median_us"] = statistics.median(r.step_times_us) if r.step_times_us else math.nan
            row["source"] = r.source
            rows.append(row)
        columns = ["rank", "device", "steps", "window_us", "compute_us", "compute_pct", "lost_us"]
        columns += [f"lost_{c.value}_us" for c in CAUSES] + ["step_median_us", "source"]
        return pd.DataFrame(rows, columns=columns).set_index("rank")


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


def report_to_json(report: Report, indent: int | None = 2) -> str:
    """The JSON document. NaN and Infinity are not JSON: a report holding one is a bug, and
    raises ``ValueError`` here rather than writing a file that other tools cannot read."""
    return json.dumps(report_to_dict(report), indent=indent, allow_nan=False) + "\n"


class ReportFormatError(ValueError):
    """A JSON document is not a gpuprof report of a schema this version reads."""


def report_from_dict(data: Any) -> Report:
    """Rebuild a :class:`Report` from :func:`report_to_dict` output (for check / diff).

    ``data`` is untrusted (a file someone saved, edited or damaged): it is checked against
    the report's JSON Schema first, and NaN / Infinity anywhere are refused, so the first
    problem is a :class:`ReportFormatError` naming its JSON path (``$.ranks[0].lost_us``)
    rather than an ``AttributeError`` deep in the gate.
    """
    if not isinstance(data, dict):
        raise ReportFormatError("not a gpuprof report (expected a JSON object)")
    schema = data.get("schema")
    if schema != SCHEMA:
        raise ReportFormatError(f"report schema is {schema!r}, this gpuprof reads {SCHEMA!r}")
    from gpuprof.model.schema import first_problem  # the validator stays off the analyze path

    problem = first_problem(data)
    if problem is not None:
        raise ReportFormatError(f"malformed gpuprof report: {problem}")
    known = {"rank", "device", "steps", "window_us", "compute_us", "lost_us", "source", "step_times_us"}
    ranks = [
        RankReport(
            rank=int(r["rank"]),
            device=r.get("device"),
            steps=int(r["steps"]),
            window_us=float(r["window_us"]),
            compute_us=float(r["compute_us"]),
            lost_us={c: float(r["lost_us"][c.value]) for c in CAUSES},
            source=r.get("source"),
            step_times_us=tuple(float(t) for t in r.get("step_times_us", ())),
            extra={k: v for k, v in r.items() if k not in known},
        )
        for r in data["ranks"]
    ]
    recs = [
        Recommendation(
            id=x["id"],
            category=Cause(x["category"]),
            title=x["title"],
            estimated_savings_pct=float(x["estimated_savings_pct"]),
            ranks=tuple(int(i) for i in x["ranks"]),
            evidence=tuple(x["evidence"]),
            actions=tuple(x["actions"]),
            whatif=x.get("whatif"),
        )
        for x in data["recommendations"]
    ]
    fixed = {"schema", "inputs", "ranks", "totals", "recommendations", "warnings"}
    return Report(
        inputs=tuple(data["inputs"]),
        ranks=tuple(ranks),
        recommendations=tuple(recs),
        warnings=tuple(data.get("warnings", ())),
        extra={k: v for k, v in data.items() if k not in fixed},
    )


def sort_recommendations(recs: Sequence[Recommendation]) -> tuple[Recommendation, ...]:
    """Highest estimated savings first; ties broken by id so output is stable."""
    return tuple(sorted(recs, key=lambda r: (-r.estimated_savings_pct, r.id)))
