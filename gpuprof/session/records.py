"""Session JSON-lines files read as untrusted input, like traces.

A session folder may come from a run killed mid-write, a full disk, another version of
gpuprof or a hand edit. Every line is checked against what its file's layout says
(:mod:`gpuprof.session.layout`): a line that is not a JSON object, or whose required keys
are missing or of the wrong type (``"time_unix_s": "x"``, ``"gpu": 1e20``), is skipped;
an optional value of the wrong type is read as unknown. Both are counted, and each kind of
problem is one warning (:class:`Problems`), never a traceback later in pandas. Only a torn
*last* line (a kill mid-write) is skipped silently.

Large files are read as columns, a block of lines at a time: a ``samples.jsonl`` of
hours of polls (millions of lines) costs its numbers, not a Python dict per line (2 million
lines took 44 s and 1.65 GB as dicts).
"""

from __future__ import annotations

import math
import operator
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from gpuprof.errors import GpuprofError

BLOCK_LINES = 1 << 14

NUMBER = "number"  # float64, NaN when null or missing
INDEX = "index"  # a non-negative integer below 2**31 (a GPU index, a pid)
STRING = "string"
BOOL = "bool"
ANY = "any"  # kept as decoded (lists, objects): only for small files

_WHAT = {NUMBER: "a number within ±1e18", INDEX: "an integer from 0", STRING: "a string", BOOL: "true or false"}
# No measurement a session holds comes near this (1 EB, ~3e10 years in seconds, counters of
# mJ or KiB since driver load): a larger number is damage, and arithmetic on it (1e308
# bytes, summed) would end in infinity in the report.
MAX_MAGNITUDE = 1e18
_INDEX_LIMIT = 2**31


@dataclass(frozen=True)
class Field:
    kind: str
    required: bool = False


class Problems:
    """What was wrong in a session's files: ``(file, what) -> count``, for one warning each."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()

    def add(self, file: str, what: str, n: int = 1) -> None:
        if n:
            self.counts[(file, what)] += n

    def warnings(self) -> list[str]:
        out = []
        for (file, what), n in self.counts.items():
            out.append(f"{file}: {n} {what.format(s='' if n == 1 else 's')}")
        return out


_READ_BYTES = 4 << 20


def _lines(path: Path) -> Iterator[tuple[list[bytes], bool]]:
    """Blocks of non-empty lines, and whether the block ends the file without a newline
    (its last line may be torn)."""
    try:
        fh = open(path, "rb")  # noqa: SIM115 -- closed by the with below; opening errors differ
    except FileNotFoundError:
        return
    except OSError as exc:
        raise GpuprofError(f"cannot read session file: {exc.strerror or exc}", path) from None
    with fh:
        rest = b""
        block: list[bytes] = []
        while True:
            try:
                data = fh.read(_READ_BYTES)
            except OSError as exc:
                raise GpuprofError(f"cannot read session file: {exc.strerror or exc}", path) from None
            if not data:
                break
            lines = (rest + data).split(b"\n")
            rest = lines.pop()  # the part after the last newline: completed by the next read
            block.extend(line for line in lines if line.strip())
            while len(block) >= BLOCK_LINES:
                yield block[:BLOCK_LINES], False
                del block[:BLOCK_LINES]
        if rest.strip():
            block.append(rest.strip())
        yield block, bool(rest.strip())


def _struct(fields: Mapping[str, Field]) -> Any:
    return msgspec.defstruct("Row", [(name, object, None) for name in fields], gc=False)


def _decode(block: list[bytes], row: Any, torn_tail: bool, file: str, problems: Problems) -> list[Any]:
    """The block's lines as structs; lines that are not JSON objects are skipped and counted."""
    decoder = msgspec.json.Decoder(list[row])
    try:
        return decoder.decode(b"[" + b",".join(block) + b"]")
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        pass
    one = msgspec.json.Decoder(row)
    rows = []
    for i, line in enumerate(block):
        try:
            rows.append(one.decode(line))
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):  # RecursionError: nested 1e5 deep
            if not (torn_tail and i == len(block) - 1):
                problems.add(file, "unreadable line{s} skipped (not a JSON object)")
    return rows


def _column(values: list[Any], kind: str) -> tuple[np.ndarray, np.ndarray | None]:
    """``values`` as a column of ``kind``, and a mask of the values that were not of that
    kind (``None`` when all were; those become NaN, -1, None or False)."""
    types = set(map(type, values))
    if kind == NUMBER:
        if types <= {float, int, type(None)}:
            try:
                col = np.array(values, dtype=np.float64)  # None -> NaN
            except OverflowError:  # an integer beyond 1.8e308: the slow path says which
                pass
            else:
                huge = np.abs(col) > MAX_MAGNITUDE
                if not huge.any():
                    return col, None
                col[huge] = np.nan
                return col, huge
        col = np.full(len(values), np.nan)
        bad = np.zeros(len(values), dtype=bool)
        for i, v in enumerate(values):
            if v is None:
                continue
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                try:
                    f = float(v)
                except OverflowError:
                    f = math.inf
                if math.isfinite(f) and abs(f) <= MAX_MAGNITUDE:
                    col[i] = f
                    continue
            bad[i] = True
        return col, (bad if bad.any() else None)
    if kind == INDEX:
        col = np.full(len(values), -1, dtype=np.int64)
        bad = np.zeros(len(values), dtype=bool)
        if types <= {int}:  # every value an integer (no null): one conversion
            try:
                arr = np.array(values, dtype=np.int64)
                ok = (arr >= 0) & (arr < _INDEX_LIMIT)
                if ok.all():
                    return arr, None
            except (OverflowError, TypeError, ValueError):
                pass
        for i, v in enumerate(values):
            if v is None:
                continue
            if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < _INDEX_LIMIT and float(v).is_integer():
                col[i] = int(v)
            else:
                bad[i] = True
        return col, (bad if bad.any() else None)
    if kind == BOOL:
        col = np.array([v is True for v in values], dtype=bool)
        bad = np.array([v is not None and not isinstance(v, bool) for v in values], dtype=bool)
        return col, (bad if bad.any() else None)
    if kind == STRING:
        out = np.empty(len(values), dtype=object)
        seen: dict[str, str] = {}  # one object per distinct string: a GPU's uuid repeats on every line
        if types <= {str, type(None)}:
            out[:] = [v if v is None else seen.setdefault(v, v) for v in values]
            return out, None
        bad = np.array([v is not None and not isinstance(v, str) for v in values], dtype=bool)
        out[:] = [seen.setdefault(v, v) if isinstance(v, str) else None for v in values]
        return out, bad
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out, None


def read_columns(path: Path, fields: Mapping[str, Field], name: str, problems: Problems) -> dict[str, np.ndarray] | None:
    """The file's records as columns (``None`` when it has none), lines with a bad required
    value left out; ``name`` is how warnings name the file."""
    row = _struct(fields)
    getters = {f: operator.attrgetter(f) for f in fields}
    blocks: dict[str, list[np.ndarray]] = {f: [] for f in fields}
    n = 0
    for lines, torn in _lines(path):
        rows = _decode(lines, row, torn, name, problems)
        if not rows:
            continue
        cols: dict[str, np.ndarray] = {}
        keep = np.ones(len(rows), dtype=bool)
        for f, spec in fields.items():
            values = list(map(getters[f], rows))
            col, bad = _column(values, spec.kind)
            missing = None
            if spec.required:
                missing = np.array([v is None for v in values], dtype=bool)
                if missing.any():
                    problems.add(name, f"line{{s}} skipped (no {f!r})", int((missing & keep).sum()))
                    keep &= ~missing
            if bad is not None:
                if spec.required:
                    problems.add(name, f"line{{s}} skipped ({f!r} is not {_WHAT[spec.kind]})", int((bad & keep).sum()))
                    keep &= ~bad
                else:
                    problems.add(name, f"value{{s}} of {f!r} read as unknown (not {_WHAT[spec.kind]})", int(bad.sum()))
            cols[f] = col
        for f in fields:
            blocks[f].append(cols[f] if keep.all() else cols[f][keep])
        n += int(keep.sum())
    if n == 0:
        return None
    out: dict[str, np.ndarray] = {}
    for f in fields:  # one column at a time: never the blocks and the whole table at once
        parts = blocks.pop(f)
        out[f] = np.concatenate(parts) if len(parts) > 1 else parts[0]
        del parts
    return out


def read_records(path: Path, fields: Mapping[str, Field], name: str, problems: Problems) -> list[dict[str, Any]]:
    """A small file's records as dicts (every key kept), checked like :func:`read_columns`:
    a record with a bad required value is left out, a bad optional value becomes None."""
    out: list[dict[str, Any]] = []
    for lines, torn in _lines(path):
        for i, line in enumerate(lines):
            try:
                rec = msgspec.json.decode(line)
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                rec = None
            if not isinstance(rec, dict):
                if not (torn and i == len(lines) - 1):
                    problems.add(name, "unreadable line{s} skipped (not a JSON object)")
                continue
            if _check(rec, fields, name, problems):
                out.append(rec)
    return out


def _check(rec: dict[str, Any], fields: Mapping[str, Field], name: str, problems: Problems) -> bool:
    for f, spec in fields.items():
        v = rec.get(f)
        if v is None:
            if spec.required:
                problems.add(name, f"line{{s}} skipped (no {f!r})")
                return False
            continue
        if spec.kind == ANY or _ok(v, spec.kind):
            continue
        if spec.required:
            problems.add(name, f"line{{s}} skipped ({f!r} is not {_WHAT[spec.kind]})")
            return False
        problems.add(name, f"value{{s}} of {f!r} read as unknown (not {_WHAT[spec.kind]})")
        rec[f] = None
    return True


def _ok(v: Any, kind: str) -> bool:
    if kind == STRING:
        return isinstance(v, str)
    if kind == BOOL:
        return isinstance(v, bool)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    if kind == NUMBER:
        try:
            return abs(float(v)) <= MAX_MAGNITUDE
        except OverflowError:
            return False
    return 0 <= v < _INDEX_LIMIT and float(v).is_integer()  # INDEX (NaN fails the comparison)


__all__ = ["ANY", "BOOL", "INDEX", "NUMBER", "STRING", "Field", "Problems", "read_columns", "read_records"]
