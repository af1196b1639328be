"""``gpuprof annotate``: the original trace plus tracks that show every lost interval's cause.

The output opens in Perfetto and chrome://tracing like the input did: for each rank a new
process (a ``pid`` no event of the input uses) named ``gpuprof: lost time (rank N)``, with
one thread per cause, and one complete (``ph: "X"``) slice per lost interval, on the
trace's own clock (the analysis keeps the trace's ``ts`` microseconds unchanged).

The input is untrusted and may be large. It is parsed only as JSON (msgspec, never eval),
and its bytes are copied through unchanged: the top-level object is split into raw values,
and the new events are spliced in at the end of the ``traceEvents`` array. So every field,
number format and key of the original survives exactly. Writing is atomic.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from gpuprof.accounting.attribution import Attribution
from gpuprof.errors import BadTraceError
from gpuprof.model.report import CAUSES
from gpuprof.readers.columns import as_int
from gpuprof.util import atomic

TRACK_PREFIX = "gpuprof: lost time"
CATEGORY = "gpuprof.lost"


class _Pid(msgspec.Struct):
    """Only the ``pid`` of an event, to choose pids nobody uses; other fields are skipped."""

    pid: Any = None


@dataclass(frozen=True)
class Annotated:
    """What :func:`annotate_file` added."""

    ranks: tuple[int, ...]
    pids: Mapping[int, int]  # rank -> pid of its lost-time process
    slices: int


def lost_time_events(rank: int, pid: int, attribution: Attribution, sort_index: int = 0) -> list[dict[str, Any]]:
    """Metadata naming the process and its cause threads, then one slice per lost interval.

    Thread ids are the cause's position in the contract's order (docs/attribution.md), starting at 1. Times are the trace's
    microseconds; ``dur`` is rounded to the nanosecond, ``ts`` kept exact.
    """
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": f"{TRACK_PREFIX} (rank {rank})"}},
        {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": sort_index}},
    ]
    for tid, cause in enumerate(CAUSES, 1):
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": cause.value}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
    for tid, cause in enumerate(CAUSES, 1):
        starts, ends = attribution.intervals.get(cause, ((), ()))
        for s, e in zip(starts, ends):
            events.append(
                {
                    "name": cause.value,
                    "cat": CATEGORY,
                    "ph": "X",
                    "pid": pid,
                    "tid": tid,
                    "ts": float(s),  # unrounded: the slice starts exactly where the trace's event ended
                    "dur": round(float(e) - float(s), 3),
                    "args": {"rank": rank, "cause": cause.value, "lost_us": round(float(e) - float(s), 3)},
                }
            )
    return events


def unused_pids(existing: Iterable[Any], count: int) -> list[int]:
    """``count`` integer pids above every integer pid in use (string pids cannot clash)."""
    top = 0
    for pid in existing:
        n = as_int(pid)  # "²" or 5000 digits are no integer (int() raised on them)
        if n is not None:
            top = max(top, n)
    return [top + 1 + i for i in range(count)]


def _read_bytes(path: Path) -> bytes:
    try:
        if path.name.lower().endswith(".gz"):
            with gzip.open(path, "rb") as fh:
                return fh.read()
        return path.read_bytes()
    except FileNotFoundError:
        raise BadTraceError("no such file", path) from None
    except (OSError, EOFError) as exc:
        raise BadTraceError(f"cannot read: {exc}", path) from None


def _split_array(raw: bytes, path: Path) -> tuple[bytes, bool]:
    """The array's bytes without the closing bracket, and whether it holds any element."""
    body = raw.rstrip()
    if not body.endswith(b"]"):
        raise BadTraceError("traceEvents is not a JSON array", path)
    inner = body[:-1]
    return inner, inner.strip() not in (b"[", b"")


def _pieces(data: bytes, new_events: bytes, path: Path) -> Iterator[bytes]:
    """The output document in pieces: the original bytes with ``new_events`` spliced in."""
    stripped = data.lstrip()
    if stripped.startswith(b"["):  # the JSON Array Format of the trace-event spec
        inner, has_any = _split_array(stripped, path)
        yield inner
        yield (b"," if has_any and new_events else b"") + new_events + b"]"
        return
    try:
        top = msgspec.json.decode(data, type=dict[str, msgspec.Raw])
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise BadTraceError(f"not a JSON trace: {exc}", path) from None
    if "traceEvents" not in top:
        raise BadTraceError("no 'traceEvents' list", path)
    yield b"{"
    for i, (key, raw) in enumerate(top.items()):
        yield (b"," if i else b"") + msgspec.json.encode(key) + b":"
        if key == "traceEvents":
            inner, has_any = _split_array(bytes(raw), path)
            yield inner
            yield (b"," if has_any and new_events else b"") + new_events + b"]"
        else:
            yield bytes(raw)
    yield b"}"


def _existing_pids(data: bytes, path: Path) -> list[Any]:
    stripped = data.lstrip()
    try:
        if stripped.startswith(b"["):
            events = msgspec.json.decode(stripped, type=list[_Pid])
        else:
            events = msgspec.json.decode(data, type=dict[str, msgspec.Raw])
            raw = events.get("traceEvents")
            events = [] if raw is None else msgspec.json.decode(bytes(raw), type=list[_Pid])
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise BadTraceError(f"not a JSON trace: {exc}", path) from None
    return [e.pid for e in events]


def write_atomic(dest: Path, pieces: Iterable[bytes]) -> None:
    """Write ``pieces`` to ``dest`` (gzip when it ends in ``.gz``) through a temporary file."""
    atomic.write_atomic(dest, pieces)


def annotate_file(src: Path, dest: Path, attributions: Mapping[int, Attribution], ranks: Sequence[int] | None = None) -> Annotated:
    """Copy ``src`` to ``dest`` with lost-time tracks for ``ranks`` (default: every rank)."""
    chosen = sorted(attributions) if ranks is None else list(ranks)
    data = _read_bytes(src)
    pids = unused_pids(_existing_pids(data, src), len(chosen))
    events: list[dict[str, Any]] = []
    for i, (rank, pid) in enumerate(zip(chosen, pids)):
        events.extend(lost_time_events(rank, pid, attributions[rank], sort_index=-len(chosen) + i))
    encoded = msgspec.json.encode(events)[1:-1]  # elements only: spliced into the array
    slices = sum(1 for e in events if e["ph"] == "X")
    write_atomic(dest, _pieces(data, encoded, src))
    return Annotated(ranks=tuple(chosen), pids=dict(zip(chosen, pids)), slices=slices)
