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
import functools
import json
import math
import sys
import types
import typing
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from gpuprof.model.report import CAUSES, SCHEMA, Cause, RankReport, Recommendation, Report, Totals

SCHEMA_FILE_NAME = "report.schema.json"
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
# The data behind the HTML report's step timeline (gpuprof.analysis.stepview): optional, so
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
        if len(rest) == 1 and rest[0] in _SIMPLE and len(args) == 2:
            return {"type": [_SIMPLE[rest[0]], "null"]}
        return {"anyOf": [_type_schema(a, defs) for a in args]}
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return {"type": "array", "items": _type_schema(args[0], defs)}
    if origin in (Mapping, dict) and args == (Cause, float):
        return {"$ref": "#/$defs/lost_us"}
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


def shipped_schema_text() -> str:
    """The schema file shipped in the package (what ``gpuprof schema`` prints)."""
    return resources.files("gpuprof.model").joinpath(SCHEMA_FILE_NAME).read_text(encoding="utf-8")


@functools.lru_cache(maxsize=1)
def _validator() -> Any:
    # jsonschema: a complete, maintained implementation of the draft; imported here only.
    from jsonschema import Draft202012Validator

    return Draft202012Validator(json.loads(shipped_schema_text()))


def json_path(parts: typing.Iterable[str | int]) -> str:
    """``("ranks", 0, "lost_us")`` -> ``$.ranks[0].lost_us``."""
    out = "$"
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if p.isidentifier() else f"[{json.dumps(p)}]")
    return out


def _non_finite(data: Any) -> tuple[list[str | int], Any] | None:
    """Path and value of the first NaN, Infinity or number too large for a float, else None.

    In document order, with no allocation per value: a report may hold arrays of millions
    of numbers."""

    def bad(v: Any) -> bool:
        if isinstance(v, float):
            return not math.isfinite(v)
        return isinstance(v, int) and not isinstance(v, bool) and abs(v) > sys.float_info.max

    if bad(data):
        return [], data
    stack: list[tuple[list[str | int], Any]] = []

    def items(path: list[str | int], value: Any) -> None:
        if isinstance(value, dict):
            stack.append((path, iter(value.items())))
        elif isinstance(value, list):
            stack.append((path, enumerate(value)))

    items([], data)
    while stack:
        path, it = stack[-1]
        for key, v in it:
            if isinstance(v, (dict, list)):
                items([*path, key], v)
                break
            if bad(v):
                return [*path, key], v
        else:
            stack.pop()
    return None


# Arrays longer than this are validated on a sample (see _sampled): the schema's array
# keywords hold of the sample exactly when they hold of the array (a test checks that the
# shipped schema keeps to what this allows).
SAMPLE_ABOVE = 16


class _Sample(list):  # type: ignore[type-arg]
    """A long array's representatives, with the index each had in the array."""

    indices: list[int]


def _representatives(values: list[Any]) -> list[int] | None:
    """Indices of a long array of scalars that stand for all of it, or ``None`` when it
    holds containers (validated whole): the first item of each JSON type, the smallest and
    the largest number, the first string, up to :data:`SAMPLE_ABOVE` items in all."""
    first: dict[Any, int] = {}
    lo = hi = None
    for i, v in enumerate(values):
        t = type(v)
        if t is dict or t is list:
            return None
        first.setdefault(t, i)
        if t is int or t is float:
            if t is float and not v.is_integer():
                first.setdefault("fraction", i)  # 2.0 is an integer to JSON Schema, 2.5 is not
            if lo is None or v < values[lo]:
                lo = i
            if hi is None or v > values[hi]:
                hi = i
    keep = sorted({*first.values(), *(i for i in (lo, hi) if i is not None)})
    # Enough items that a length bound still holds or fails as for the whole array.
    rest = (i for i in range(len(values)) if i not in keep)
    while len(keep) < SAMPLE_ABOVE:
        keep.append(next(rest))
    return sorted(keep)


def _sampled(data: Any) -> Any:
    """``data`` with every array of more than :data:`SAMPLE_ABOVE` scalars replaced by a
    :class:`_Sample`: validation then costs per array, not per number (a report of 2 million
    step times took 40 s in the validator)."""
    if isinstance(data, dict):
        return {k: _sampled(v) for k, v in data.items()}
    if isinstance(data, list):
        if len(data) > SAMPLE_ABOVE:
            keep = _representatives(data)
            if keep is not None:
                out = _Sample(data[i] for i in keep)
                out.indices = keep
                return out
        return [_sampled(v) for v in data]
    return data


def _unsampled_path(sampled: Any, path: typing.Iterable[str | int]) -> list[str | int]:
    """A path in the sampled document as the path in the original."""
    out: list[str | int] = []
    node = sampled
    for key in path:
        out.append(node.indices[key] if isinstance(node, _Sample) and isinstance(key, int) else key)
        node = node[key]
    return out


_NAMES = {"object": "an object", "array": "an array", "string": "a string", "number": "a number",
          "integer": "an integer", "boolean": "a boolean", "null": "null"}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    for py, name in ((bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string"),
                     (list, "an array"), (dict, "an object")):
        if isinstance(value, py):
            return name
    return type(value).__name__


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _describe(err: Any, sampled: Any = None) -> str:
    """One schema violation as ``$.path: what is wrong`` (short, whatever the value's size)."""
    where = json_path(err.absolute_path if sampled is None else _unsampled_path(sampled, err.absolute_path))
    kind, want, value = err.validator, err.validator_value, err.instance
    if kind == "type":
        wanted = " or ".join(_NAMES.get(t, t) for t in ([want] if isinstance(want, str) else want))
        return f"{where}: expected {wanted}, got {_json_type(value)}"
    if kind == "required":
        missing = [k for k in want if k not in value]
        return f"{where}: missing key {missing[0]!r}" if missing else f"{where}: {err.message}"
    if kind == "enum":
        return f"{where}: {_short(value)} is not one of: {', '.join(str(v) for v in want)}"
    if kind == "minimum":
        return f"{where}: {_short(value)} is below the minimum {want}"
    if kind == "additionalProperties":
        allowed = set(err.schema.get("properties", {}))
        unexpected = sorted(str(k) for k in value if k not in allowed)
        return f"{where}: unexpected key(s) {', '.join(repr(k) for k in unexpected[:5])}; allowed: {', '.join(sorted(allowed))}"
    if kind == "const":
        return f"{where}: expected {_short(want)}, got {_short(value)}"
    message = " ".join(str(err.message).split())
    return f"{where}: {message[:200]}"


def first_problem(data: Any) -> str | None:
    """Why ``data`` is not a valid ``gpuprof.report/1`` document, as one line starting with
    the JSON path of the problem; ``None`` when it is valid."""
    bad = _non_finite(data)
    if bad is not None:
        path, value = bad
        if isinstance(value, float) and math.isnan(value):
            what = "NaN"
        elif isinstance(value, float):
            what = "Infinity (or a number beyond 1.8e308)"
        else:
            what = "an integer beyond 1.8e308"
        return f"{json_path(path)}: {what} is not allowed in a report (only finite JSON numbers are)"
    from jsonschema.exceptions import best_match

    sampled = _sampled(data)
    err = best_match(_validator().iter_errors(sampled))
    return None if err is None else _describe(err, sampled)


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
