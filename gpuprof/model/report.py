"""The report: what analysis hands to renderers, and what ``--format json`` serializes.

The JSON shape is the project's contract (schema ``gpuprof.report/1``, described in
docs/report.md): keys may be added, none renamed or dropped. :func:`report_to_dict` and :func:`report_from_dict` are the only places
that know the JSON layout, so that ``check --baseline`` and ``diff`` read exactly what
``analyze --format json`` writes.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Protocol, Sequence

from gpuprof.util.jsontypes import JsonMapping, JsonObject

if TYPE_CHECKING:  # pandas is imported only when a DataFrame is asked for
    import pandas as pd

SCHEMA = "gpuprof.report/1"


class Cause(str, Enum):
    """The eight causes of lost GPU time, in the contract's order (docs/attribution.md)."""

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
# without a default is required (the contract's keys), one with a default may be absent.
def _doc(text: str, **more: Any) -> Any:
    return field(metadata={"doc": text, **more})


@dataclass(frozen=True)
class Recommendation:
    """One ranked recommendation: the cause it fixes, what to change, what it would save,
    the evidence and actions as prose, and the measured facts behind them as numbers."""

    id: str = _doc("stable rule id, the same for the same finding in every report")
    category: Cause = _doc("the cause this recommendation fixes")
    title: str = _doc("one line a user can act on")
    estimated_savings_pct: float = _doc("estimated share of step time (%) that fixing it would save")
    ranks: tuple[int, ...] = _doc("ranks where the cause originates and the fix applies", item_minimum=0)
    evidence: tuple[str, ...] = _doc("measured facts behind it")
    actions: tuple[str, ...] = _doc("concrete changes to try")
    # The what-if of gpuprof.job.whatifs the saving was replayed from (``None``: the
    # saving comes from a closed-form estimate, said in the evidence).
    whatif: str | None = field(
        default=None,
        metadata={"doc": "the what-if the saving was replayed from; null when it comes from a closed-form estimate"},
    )
    # The saving's numbers beside the prose evidence (for tables, DataFrames and the
    # renderers, which put the caveats beside the saving they qualify).
    saved_us_per_step: float | None = field(
        default=None,
        metadata={"doc": "the saving in microseconds per step of the job (estimated_savings_pct of its step); "
                  "null when the job's step is unknown", "minimum": 0},
    )
    savings_low_pct: float | None = field(
        default=None, metadata={"doc": "low end of the range the saving lies in, when the advice bounds it (%)"}
    )
    savings_high_pct: float | None = field(
        default=None, metadata={"doc": "high end of the range the saving lies in, when the advice bounds it (%)"}
    )
    savings_bound: str | None = field(
        default=None,
        metadata={"doc": "'upper' when estimated_savings_pct is an upper bound (the real saving may be smaller), "
                  "'lower' when a lower bound; null when it is the estimate itself"},
    )
    caveats: tuple[str, ...] = field(
        default=(),
        metadata={"doc": "what qualifies the saving, said beside it (a partial trace, a single profiled step, "
                  "a profiler that inflates host time)"},
    )
    # The measured numbers the evidence is written from, by name (units in the names),
    # so that a notebook reads the straggler's margin without parsing the prose.
    facts: Mapping[str, float | int | str | None] = field(
        default_factory=dict,
        hash=False,
        metadata={"doc": "the measured facts behind the evidence as named values, units in the names (_us, "
                  "_bytes, _pct; _per_step: per step of the job); null: not measured. Absent in reports of "
                  "older versions"},
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
    extra: JsonMapping = field(default_factory=dict, metadata={"flatten": True})

    @property
    def lost_total_us(self) -> float:
        return float(sum(self.lost_us.values()))


@dataclass(frozen=True)
class Totals:
    window_us: float = _doc("sum of the ranks' windows, in microseconds", minimum=0)
    compute_us: float = _doc("sum of the ranks' compute time, in microseconds", minimum=0)
    lost_us: Mapping[Cause, float] = _doc("sum of the ranks' lost time per cause, in microseconds")


@dataclass(frozen=True, repr=False, eq=False)
class Report:
    """The result of an analysis: per-rank accounting, recommendations and job findings.

    ``to_dict()`` / ``to_json()`` give the ``gpuprof.report/1`` JSON document (its keys:
    docs/report.md); ``to_html()`` / ``to_markdown()`` / ``str(report)`` the other formats;
    ``save(path)`` writes the one its extension names; ``to_dataframe(kind)`` a table per
    question (ranks, steps, kernels, collectives, what-ifs, recommendations). In a notebook
    the report shows itself (``_repr_html_``, ``_repr_markdown_``). Two reports are equal
    when their JSON documents are: ``load_report(report.save("r.json")) == report``.
    """

    inputs: tuple[str, ...] = _doc("the paths that were analyzed")
    ranks: tuple[RankReport, ...] = _doc("one entry per rank, sorted by rank")
    recommendations: tuple[Recommendation, ...] = _doc("sorted by estimated_savings_pct, highest first")
    warnings: tuple[str, ...] = field(default=(), metadata={"doc": "what the analysis could not do or had to guess"})
    # More keys for the JSON report (job-level findings: critical rank per step, imbalance,
    # pipeline schedule, NVML sample summaries, ...). Values must be JSON-serializable.
    extra: JsonMapping = field(default_factory=dict, metadata={"flatten": True})

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

    def __eq__(self, other: object) -> bool:
        """Equal JSON documents (numbers rounded as the JSON rounds them)."""
        if not isinstance(other, Report):
            return NotImplemented
        return _canonical(self) == _canonical(other)

    __hash__ = None  # type: ignore[assignment]  # a report holds mappings: not hashable

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
        """The text report as ``gpuprof analyze`` writes it to a file (no colour, no line
        broken inside a sentence)."""
        return _views().render(self, "text", 100)

    def to_dict(self) -> dict[str, Any]:
        """The ``gpuprof.report/1`` JSON document as Python objects."""
        return report_to_dict(self)

    def to_json(self, indent: int | None = 2) -> str:
        """The ``gpuprof.report/1`` JSON document (what ``--format json`` writes)."""
        return report_to_json(self, indent)

    def to_html(self) -> str:
        """The HTML report: one self-contained page (what ``--format html`` writes)."""
        return _views().render(self, "html", 100)

    def to_markdown(self) -> str:
        """The Markdown report (what ``--format markdown`` writes)."""
        return _views().render(self, "markdown", 100)

    def save(self, path: str | os.PathLike[str], format: str | None = None) -> Path:
        """Write the report to ``path`` in the format its extension names (``.json``,
        ``.json.gz``, ``.html``, ``.md``, ``.txt``) or ``format``; atomically (a failed
        write leaves no half-written file). Returns the path, so that
        ``gpuprof.load_report(report.save("r.json")) == report``. A name without a known
        extension and no ``format`` is a :class:`~gpuprof.GpuprofError`."""
        return _views().save(self, Path(path), format)

    def _repr_html_(self) -> str:
        """The HTML report inside a notebook: the page in a sandboxed frame, so that its
        styles stay its own."""
        import html

        page = self.to_html()
        return (
            f'<iframe srcdoc="{html.escape(page, quote=True)}" sandbox="" '
            'style="width:100%;height:720px;border:1px solid #dadce0;border-radius:6px" '
            'title="gpuprof report"></iframe>'
        )

    def _repr_markdown_(self) -> str:
        return self.to_markdown()

    @classmethod
    def from_dict(cls, data: Any) -> Report:
        """Rebuild a report from its JSON document; :class:`ReportFormatError` naming the
        first problem (as a JSON path) when ``data`` is not a valid ``gpuprof.report/1``."""
        return report_from_dict(data)

    def to_dataframe(self, kind: str = "ranks") -> pd.DataFrame:
        """A table per question, as a pandas DataFrame (:mod:`gpuprof.render.frames`):

        - ``"ranks"`` (default): one row per rank, indexed by rank: ``device``, ``steps``,
          ``window_us``, ``compute_us``, ``compute_pct``, ``lost_us`` (all causes),
          ``lost_<cause>_us`` for each of the eight causes, ``step_mean_us`` and
          ``step_median_us`` (NaN without steps) and ``source``;
        - ``"steps"``: each profiled step of each rank (index rank, step): ``duration_us``,
          its ``compute_us`` and ``lost_<cause>_us`` for each cause (NaN in reports saved
          by versions without per-step causes);
        - ``"kernels"``: the device kernels with the most time per rank: ``calls``,
          ``total_us``, ``share_pct`` of the rank's window;
        - ``"collectives"``: each collective of each rank: ``size_bytes``, ``duration_us``,
          the rank's ``busbw_gbps``, ``exposed_us_per_step``, ``wait_us_per_step``, ...;
        - ``"whatifs"``: each what-if replayed on the job: ``step_before_us``,
          ``step_after_us``, ``savings_pct`` and the ``recommendation`` that carries it;
        - ``"recommendations"``: ranked, with ``estimated_savings_pct``,
          ``saved_us_per_step``, ``savings_low_pct``/``savings_high_pct``,
          ``savings_bound``, ``whatif``, ``ranks``, ``caveats`` and ``facts`` (the
          recommendation's named numbers, a dict per row: ``pd.json_normalize`` spreads
          them into columns) as columns.

        An unknown ``kind`` is a :class:`~gpuprof.GpuprofError` (with "did you mean").
        """
        return _views().frame(self, kind)


class ReportViews(Protocol):
    """What turns a report into text, files and tables. The model never imports its
    renderers (they sit below it in the flow); it finds them by module name on first use,
    the way pandas finds its plotting backend: :data:`VIEWS_MODULE` names the module and its
    ``VIEWS`` attribute is the object. Nothing has to be imported beforehand, so a report
    prints, saves and tabulates in a fresh interpreter, after unpickling on a Dask worker,
    or when it was built by :meth:`Report.from_dict` alone."""

    def render(self, report: Report, fmt: str, width: int) -> str: ...

    def save(self, report: Report, path: Path, fmt: str | None) -> Path: ...

    def frame(self, report: Report, kind: str) -> pd.DataFrame: ...


#: The module whose ``VIEWS`` attribute renders reports (the one late binding of the model;
#: ``tests/test_layout.py`` checks that it names the renderers' package and nothing else).
VIEWS_MODULE = "gpuprof.render"


def _views() -> ReportViews:
    import importlib

    views: ReportViews = importlib.import_module(VIEWS_MODULE).VIEWS
    return views


def _canonical(report: Report) -> str:
    return json.dumps(report_to_dict(report), sort_keys=True, allow_nan=False, default=str)


def _lost_to_dict(lost: Mapping[Cause, float]) -> dict[str, float]:
    return {c.value: round(float(lost.get(c, 0.0)), 3) for c in CAUSES}


def report_to_dict(report: Report) -> JsonObject:
    # The totals are the sums of the ranks' figures as written (each rounded to 3 decimals),
    # so that a report read back from its JSON writes the same totals again.
    totals_lost = {c.value: 0.0 for c in CAUSES}
    for r in report.ranks:
        for c in CAUSES:
            totals_lost[c.value] += round(float(r.lost_us.get(c, 0.0)), 3)
    out: dict[str, Any] = {
        "schema": SCHEMA,
        "inputs": list(report.inputs),
        "ranks": [],
        "totals": {
            "window_us": round(sum(round(r.window_us, 3) for r in report.ranks), 3),
            "compute_us": round(sum(round(r.compute_us, 3) for r in report.ranks), 3),
            "lost_us": {k: round(v, 3) for k, v in totals_lost.items()},
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
                "saved_us_per_step": None if rec.saved_us_per_step is None else round(rec.saved_us_per_step, 3),
                "savings_low_pct": None if rec.savings_low_pct is None else round(rec.savings_low_pct, 2),
                "savings_high_pct": None if rec.savings_high_pct is None else round(rec.savings_high_pct, 2),
                "savings_bound": rec.savings_bound,
                "caveats": list(rec.caveats),
                # as measured, not rounded: a script compares them with its own thresholds, and
                # a rounded share can read differently from the evidence written from it
                "facts": dict(rec.facts),
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
        # Named only when it has the shape of a schema name: a saved report is untrusted input,
        # its strings are not echoed (a megabyte, or a terminal escape).
        named = f" {schema}" if isinstance(schema, str) and re.fullmatch(r"gpuprof\.report/[0-9]{1,6}", schema) else ""
        raise ReportFormatError(f"report schema{named} is not the one this gpuprof reads ({SCHEMA})")
    from gpuprof.model.validate import first_problem  # the validator stays off the analyze path

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
            saved_us_per_step=_opt_float(x.get("saved_us_per_step")),
            savings_low_pct=_opt_float(x.get("savings_low_pct")),
            savings_high_pct=_opt_float(x.get("savings_high_pct")),
            savings_bound=x.get("savings_bound"),
            caveats=tuple(x.get("caveats", ())),
            facts=dict(x.get("facts") or {}),
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


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


def sort_recommendations(recs: Sequence[Recommendation]) -> tuple[Recommendation, ...]:
    """Highest estimated savings first; ties broken by id so output is stable."""
    return tuple(sorted(recs, key=lambda r: (-r.estimated_savings_pct, r.id)))
