"""Bytes -> decoded trace events, for every Chrome trace-event based format.

Reading is split from interpretation: this module turns a file (plain or gzip, whole or
cut off mid-write) into a list of :class:`Event` structs plus the few top-level keys the
readers need. Decoding uses ``msgspec`` into structs that keep only the fields we use, so
a trace is never turned into per-event Python dicts (the unused ``args`` such as input
shapes and call stacks are skipped by the decoder).

Fields whose type varies between producers (``pid``/``tid`` int or string, ``stream``
int or ``"0x0"``, integers beyond 64 bits in ``args``) are typed loosely so that no
valid trace fails validation; readers coerce them column by column.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from gpuprof.errors import BadTraceError

_GZIP_MAGIC = b"\x1f\x8b"
_CHUNK_BYTES = 1 << 24
# How many candidate cut points to try when recovering a trace cut off mid-write.
_MAX_RECOVERY_TRIES = 32


class Args(msgspec.Struct, frozen=True, gc=False):
    """The ``args`` keys any reader uses; everything else in ``args`` is skipped."""

    correlation: Any = None
    stream: Any = None
    device: Any = None
    nbytes: Any = msgspec.field(default=None, name="bytes")
    coll_name: Any = msgspec.field(default=None, name="Collective name")
    pg_name: Any = msgspec.field(default=None, name="Process Group Name")
    name: Any = None  # metadata events: thread_name / process_name
    labels: Any = None  # metadata events: process_labels ("GPU 0", "CPU")
    step: Any = None  # op-level timelines
    mb_id: Any = None  # op-level timelines
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=None, name="Total Reserved")
    device_id: Any = msgspec.field(default=None, name="Device Id")
    device_type: Any = msgspec.field(default=None, name="Device Type")


NO_ARGS = Args()


class Event(msgspec.Struct, gc=False):
    """One trace event; times are microseconds as in the Chrome trace-event format."""

    ph: str = ""
    cat: str = ""
    name: str = ""
    ts: float = 0.0
    dur: float = 0.0
    pid: int | str = -1
    tid: int | str = -1
    args: Args = NO_ARGS


class _LooseEvent(msgspec.Struct):
    """Fallback when a producer writes odd types (e.g. a float pid or a null name)."""

    ph: Any = ""
    cat: Any = ""
    name: Any = ""
    ts: Any = 0.0
    dur: Any = 0.0
    pid: Any = -1
    tid: Any = -1
    args: Any = None


class _Doc(msgspec.Struct):
    traceEvents: list[Event] | None = None
    deviceProperties: Any = None
    distributedInfo: Any = None
    schemaVersion: Any = None


class _LooseDoc(msgspec.Struct):
    traceEvents: list[_LooseEvent] | None = None
    deviceProperties: Any = None
    distributedInfo: Any = None
    schemaVersion: Any = None


@dataclass(frozen=True)
class RawTrace:
    """A decoded trace file: its events and the top-level keys readers use.

    ``size_bytes`` is the size of the (decompressed) JSON text; ``warnings`` says what was
    recovered (a cut-off gzip stream or JSON text).
    """

    events: list[Event]
    device_properties: Any
    distributed_info: Any
    schema_version: Any
    is_object: bool
    size_bytes: int
    warnings: tuple[str, ...]


def read_bytes(path: Path) -> tuple[bytes, list[str]]:
    """The JSON text of ``path``, gunzipped when it is gzip (by content, not by name).

    A gzip stream that ends early yields what it decompressed so far plus a warning.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise BadTraceError("no such file", path) from None
    except IsADirectoryError:
        raise BadTraceError("is a directory, not a trace file", path) from None
    except OSError as exc:
        raise BadTraceError(f"cannot read: {exc.strerror or exc}", path) from None
    if not data:
        raise BadTraceError("file is empty", path)
    if data[:2] != _GZIP_MAGIC:
        return data, []
    return _gunzip(data, path)


def _gunzip(data: bytes, path: Path) -> tuple[bytes, list[str]]:
    out: list[bytes] = []
    rest = data
    warnings: list[str] = []
    while rest:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            # Chunked so that a corrupt tail still leaves the good prefix in ``out``.
            for i in range(0, len(rest), _CHUNK_BYTES):
                out.append(d.decompress(rest[i : i + _CHUNK_BYTES]))
                if d.eof:
                    break
            out.append(d.flush())
        except zlib.error as exc:
            if not any(out):
                raise BadTraceError(f"not a valid gzip file ({exc})", path) from None
            warnings.append(
                f"gzip data is corrupt after {sum(map(len, out))} bytes ({exc}); read what came before"
            )
            break
        if not d.eof:
            if not any(out):
                raise BadTraceError("gzip file is cut off before any data", path)
            warnings.append(
                "gzip file is cut off (the run may have been killed while writing); read what was complete"
            )
            break
        rest = d.unused_data
        if rest[:2] != _GZIP_MAGIC:
            break  # trailing garbage after the last member is ignored, as gzip(1) does
    text = b"".join(out)
    if not text.strip():
        raise BadTraceError("gzip file holds no data", path)
    return text, warnings


def decode_trace(path: Path) -> RawTrace:
    """Read and decode a Chrome trace-event file (Kineto or op-level timeline)."""
    data, warnings = read_bytes(path)
    return decode_text(data, path, warnings)


def decode_text(data: bytes, path: Path, warnings: list[str] | None = None) -> RawTrace:
    warns = list(warnings or [])
    stripped = data.lstrip()
    if not stripped:
        raise BadTraceError("file holds only whitespace", path)
    first = stripped[:1]
    if first not in (b"{", b"["):
        raise BadTraceError("not JSON (a trace file starts with '{' or '[')", path)
    is_object = first == b"{"
    try:
        doc = _decode(data, is_object)
    except msgspec.ValidationError as exc:
        raise BadTraceError(f"JSON is not a trace ({exc})", path) from None
    except msgspec.DecodeError as exc:
        recovered = _recover_cut(data, is_object)
        if recovered is None:
            raise BadTraceError(f"not valid JSON ({exc})", path) from None
        doc, n_bytes = recovered
        n_events = len(doc[0] or ())
        warns.append(
            f"trace is cut off after {n_bytes} bytes (written while the job was killed?); "
            f"read the {n_events} complete events before the cut"
        )
    events, props, dist, schema = doc
    if events is None:
        raise BadTraceError("JSON is not a trace (no 'traceEvents' list)", path)
    if not events:
        raise BadTraceError("trace holds no events", path)
    return RawTrace(events, props, dist, schema, is_object, len(data), tuple(warns))


_DocTuple = tuple[list[Event] | None, Any, Any, Any]


def _decode(data: bytes, is_object: bool) -> _DocTuple:
    try:
        if is_object:
            doc = msgspec.json.decode(data, type=_Doc)
            return doc.traceEvents, doc.deviceProperties, doc.distributedInfo, doc.schemaVersion
        return msgspec.json.decode(data, type=list[Event]), None, None, None
    except msgspec.ValidationError:
        pass
    # Rare: odd types somewhere. Decode loosely and coerce; raises ValidationError when the
    # JSON is not a list of objects at all.
    if is_object:
        loose = msgspec.json.decode(data, type=_LooseDoc)
        evs = None if loose.traceEvents is None else [_coerce(e) for e in loose.traceEvents]
        return evs, loose.deviceProperties, loose.distributedInfo, loose.schemaVersion
    return [_coerce(e) for e in msgspec.json.decode(data, type=list[_LooseEvent])], None, None, None


def _num(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return 0.0


def _coerce(e: _LooseEvent) -> Event:
    args = NO_ARGS
    if isinstance(e.args, dict):
        try:
            args = msgspec.convert(e.args, type=Args, strict=False)
        except msgspec.ValidationError:
            args = NO_ARGS

    def ident(v: Any) -> int | str:
        if isinstance(v, bool) or not isinstance(v, (int, str)):
            return int(v) if isinstance(v, float) else str(v)
        return v

    return Event(
        ph=str(e.ph or ""),
        cat=str(e.cat or ""),
        name=str(e.name or ""),
        ts=_num(e.ts),
        dur=_num(e.dur),
        pid=ident(e.pid),
        tid=ident(e.tid),
        args=args,
    )


def _recover_cut(data: bytes, is_object: bool) -> tuple[_DocTuple, int] | None:
    """Decode the longest prefix of a cut-off trace that ends after a complete event.

    Candidate cut points are closing braces followed by a comma or ``]`` (the end of one
    element of the event list); the prefix is closed with ``]`` (and ``}`` for an object
    trace).
    Returns ``None`` when no candidate gives a trace, e.g. when the cut is before the
    first event or the text is not a trace at all.
    """
    closers = (b"]}", b"}", b"]") if is_object else (b"]",)
    end = len(data)
    tries = 0
    while tries < _MAX_RECOVERY_TRIES:
        pos = data.rfind(b"}", 0, end)
        if pos < 0:
            return None
        end = pos
        after = data[pos + 1 : pos + 65].lstrip()
        if after and not after.startswith((b",", b"]")):
            continue  # a brace inside an event (its args), not the end of an event
        tries += 1
        prefix = data[: pos + 1]
        for closer in closers:
            try:
                doc = _decode(prefix + closer, is_object)
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
            if doc[0]:
                return doc, len(prefix)
    return None
