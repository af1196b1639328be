"""Validating a saved report against the JSON Schema shipped in the package.

:func:`first_problem` says why a document is not a valid ``gpuprof.report/1`` (NaN or
Infinity anywhere, or the first schema violation, with its JSON path). It reads the shipped
schema file only, so that the report model can validate what it loads without importing
the schema's generator (:mod:`gpuprof.model.schema`, which reads the model's dataclasses).
The validator (``jsonschema``) is imported only when a report is validated, never on the
``analyze`` path.
"""

from __future__ import annotations

import functools
import json
import math
import sys
import typing
from importlib import resources
from typing import Any

SCHEMA_FILE_NAME = "report.schema.json"


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


