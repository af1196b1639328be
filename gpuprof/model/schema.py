"""The JSON Schema of ``gpuprof.report/1``, generated from the report model.

The schema follows :mod:`gpuprof.model.report`'s dataclasses: a field without a default is a
required key (exactly the contract's keys, docs/report.md), a field with one may be absent, field metadata gives
each key's description and lower bound, and a ``flatten`` field (``extra``) is why an
object allows more keys. Every object allows more keys, as the contract allows extension (a
recommendation's ``whatif``, job findings), except ``lost_us``: its keys are the eight
causes, all present.

The generated schema is shipped in the package as ``report.schema.json`` beside this module:
``gpuprof schema`` prints it, and :func:`first_problem` validates saved reports against it.
A test checks that the shipped file equals a fresh :func:`report_schema`; after changing the
model, write it again with ``python -m gpuprof.model.schema --write``.

The validator (``jsonschema``) is imported only when a report is validated, never on the
``analyze`` path.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpuprof.model.report import CAUSES, SCHEMA, Cause, RankReport, Recommendation, Report, Totals
from gpuprof.model.run_schema import RUN_PROPERTIES
from gpuprof.model.validate import SCHEMA_FILE_NAME, first_problem, json_path, shipped_schema_text

__all__ = ["SCHEMA_FILE_NAME", "first_problem", "json_path", "main", "report_schema", "schema_text", "shipped_schema_text"]
_DRAFT = "https://json-schema.org/draft/2020-12/schema"
_DEF_NAMES: dict[type, str] = {RankReport: "rank", Recommendation: "recommendation", Totals: "totals"}
_SIMPLE: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}

# Job-level what-if figures of the contract (docs/report.md): optional (absent in reports of older versions),
# a number or null when present.
_JOB_FIGURES = {
    "model_error_pct": "the replay's signed error on the measured step time of the unchanged job, in %; "
    "null when no replay could be built",
    "combined_savings_pct": "share of step time (%) saved by applying every recommendation at once, "
    "from one replay; null when no replay could be built",
}


def _nullable(kind: str, description: str, **more: Any) -> dict[str, Any]:
    return {"description": description, "type": [kind, "null"], **more}


_SPAN: dict[str, Any] = {
    "type": "object",
    "properties": {
        "rank": {"type": "integer", "minimum": 0},
        "start_us": {"type": "number"},
        "end_us": {"type": "number"},
    },
    "required": ["rank", "start_us", "end_us"],
    "additionalProperties": True,
}
# The data behind the HTML report's step timeline (gpuprof.job.stepview): optional, so
# that a saved JSON report draws the same timeline as the run that made it.
_TIMELINE: dict[str, Any] = {
    "description": "one representative step per rank on the common clock, in microseconds from the "
    "first rank's start of that step (the HTML report's timeline); absent when no rank has a window",
    "type": "object",
    "properties": {
        "step": _nullable("integer", "the step shown (the one with the median job step time); null: each "
                          "rank's whole window"),
        "span_us": {"description": "length of the time shown", "type": "number", "minimum": 0},
        "bin_us": {"description": "resolution of the segments", "type": "number", "minimum": 0},
        "clock_offsets_applied": {"description": "ranks' clocks were aligned on their collectives", "type": "boolean"},
        "slowest_rank": _nullable("integer", "the rank whose own work in the step took longest", minimum=0),
        "critical_rank": _nullable("integer", "the rank that waited least in the step", minimum=0),
        "critical_path": {
            "description": "the chain of work across ranks that set the step's length, in time order",
            "type": "array",
            "items": _SPAN,
        },
        "critical_path_source": _nullable(
            "string", "'replay' (walked on the job model) or 'critical_rank_per_step' (the critical rank "
            "standing in for it); null when no path is drawn"
        ),
        "ranks_total": {"description": "ranks in the job (lanes shows at most a bounded number)", "type": "integer",
                        "minimum": 0},
        "lanes": {
            "description": "the ranks drawn, each as segments of compute and the causes",
            "type": "array",
            "items": {
                **_SPAN,
                "properties": {
                    **_SPAN["properties"],
                    "stage": _nullable("integer", "pipeline stage of the rank", minimum=0),
                    "segment_names": {
                        "description": "what each segment is (parallel to segments): the device work covering "
                        "most of it, or what the host was in while the device waited; null where nothing named ran",
                        "type": "array",
                        "items": {"type": ["string", "null"]},
                    },
                    "segments": {
                        "description": "[kind, start_us, end_us]: kind is 'compute' or a cause",
                        "type": "array",
                        "items": {
                            "type": "array",
                            "prefixItems": [{"type": "string"}, {"type": "number"}, {"type": "number"}],
                            "minItems": 3,
                            "maxItems": 3,
                        },
                    },
                },
            },
        },
    },
    "additionalProperties": True,
}


# Per-step figures of a rank (optional keys beside the dataclass fields: absent in reports of
# older versions and for a rank without steps), parallel to step_times_us.
_STEP_SERIES = {"type": "array", "items": {"type": "number", "minimum": 0}}
_RANK_EXTRAS: dict[str, Any] = {
    "step_numbers": {"description": "each step's number as the trace numbers it, parallel to step_times_us",
                     "type": "array", "items": {"type": "integer"}},
    "step_compute_us": {"description": "time some compute kernel ran in each step, in microseconds, parallel "
                        "to step_times_us", **_STEP_SERIES},
    "step_lost_us": {
        "description": "lost time per cause in each step, in microseconds, parallel to step_times_us (per step, "
        "step_compute_us plus the causes is the step's time); absent in reports of older versions",
        "type": "object",
        "properties": {c.value: _STEP_SERIES for c in CAUSES},
        "additionalProperties": False,
    },
}


def _type_schema(tp: Any, defs: dict[str, Any]) -> dict[str, Any]:
    """The schema of one annotated type of the report model."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp in _SIMPLE:
        return {"type": _SIMPLE[tp]}
    if tp is Cause:
        return {"$ref": "#/$defs/cause"}
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if rest and all(a in _SIMPLE for a in rest):  # simple values, maybe null: one list of types
            return {"type": [_SIMPLE[a] for a in rest] + (["null"] if len(rest) < len(args) else [])}
        return {"anyOf": [_type_schema(a, defs) for a in args]}
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return {"type": "array", "items": _type_schema(args[0], defs)}
    if origin in (Mapping, dict) and args == (Cause, float):
        return {"$ref": "#/$defs/lost_us"}
    if origin in (Mapping, dict) and len(args) == 2 and args[0] is str:
        return {"type": "object", "additionalProperties": _type_schema(args[1], defs)}
    if dataclasses.is_dataclass(tp) and isinstance(tp, type) and tp in _DEF_NAMES:
        name = _DEF_NAMES[tp]
        if name not in defs:
            defs[name] = {}  # claimed before recursing
            defs[name] = _object_schema(tp, defs)
        return {"$ref": f"#/$defs/{name}"}
    raise TypeError(f"no JSON Schema for {tp!r}: extend gpuprof/model/schema.py")


def _field_schema(f: dataclasses.Field[Any], tp: Any, defs: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "doc" in f.metadata:
        out["description"] = f.metadata["doc"]
    out.update(_type_schema(tp, defs))
    if "minimum" in f.metadata:
        out["minimum"] = f.metadata["minimum"]
    if "item_minimum" in f.metadata:
        out["items"] = {**out["items"], "minimum": f.metadata["item_minimum"]}
    return out


def _is_required(f: dataclasses.Field[Any]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _object_schema(cls: type, defs: dict[str, Any], first: Mapping[str, Any] | None = None) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    props: dict[str, Any] = dict(first or {})
    required = list(props)
    for f in dataclasses.fields(cls):
        if f.metadata.get("flatten"):
            continue
        props[f.name] = _field_schema(f, hints[f.name], defs)
        if _is_required(f):
            required.append(f.name)
    out: dict[str, Any] = {"type": "object"}
    if cls.__doc__ and cls in _DEF_NAMES:
        out["description"] = " ".join(cls.__doc__.replace("``", "").split())
    out.update({"properties": props, "required": required, "additionalProperties": True})
    return out


def report_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a ``gpuprof.report/1`` document, from the model."""
    defs: dict[str, Any] = {
        "cause": {"description": "one of the eight causes of lost GPU time", "enum": [c.value for c in CAUSES]},
        "lost_us": {
            "description": "lost time per cause, in microseconds",
            "type": "object",
            "properties": {c.value: {"type": "number", "minimum": 0} for c in CAUSES},
            "required": [c.value for c in CAUSES],
            "additionalProperties": False,
        },
    }
    body = _object_schema(Report, defs, first={"schema": {"description": "the schema's name and version", "const": SCHEMA}})
    defs["rank"]["properties"].update(_RANK_EXTRAS)
    props = body["properties"]
    # `totals` is derived from the ranks (a property of Report), written after them.
    ordered: dict[str, Any] = {}
    for key, value in props.items():
        ordered[key] = value
        if key == "ranks":
            ordered["totals"] = {"description": "the ranks' figures summed", **_type_schema(Totals, defs)}
    ordered["job"] = {
        "description": "job-level findings; more keys may appear",
        "type": "object",
        "properties": {k: {"description": v, "type": ["number", "null"]} for k, v in _JOB_FIGURES.items()},
        "additionalProperties": True,
    }
    ordered["timeline"] = _TIMELINE
    ordered.update(RUN_PROPERTIES)  # a session's whole run: step clock, phases, windows, changes
    required = body["required"]
    required.insert(required.index("ranks") + 1, "totals")
    return {
        "$schema": _DRAFT,
        "title": SCHEMA,
        "description": "The JSON report of gpuprof (gpuprof analyze --format json). Keys may be added "
        "within schema 1; none of the required ones is renamed or dropped.",
        "type": "object",
        "properties": ordered,
        "required": required,
        "additionalProperties": True,
        "$defs": {name: defs[name] for name in sorted(defs)},
    }


def schema_text(schema: Mapping[str, Any]) -> str:
    """The schema as the shipped file holds it."""
    return json.dumps(schema, indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m gpuprof.model.schema [--write]``: print the schema, or write the shipped file."""
    args = sys.argv[1:] if argv is None else argv
    text = schema_text(report_schema())
    if args == ["--write"]:
        Path(__file__).with_name(SCHEMA_FILE_NAME).write_text(text, encoding="utf-8")
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
