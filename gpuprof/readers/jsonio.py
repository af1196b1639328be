"""Bytes -> decoded trace events, for every Chrome trace-event based format.

Reading is split from interpretation: this module turns a file (plain or gzip, whole or
cut off mid-write) into :class:`Event` structs, piece by piece for large traces (see
:mod:`gpuprof.readers.chunks`), plus the few top-level keys the readers need. Decoding uses ``msgspec`` into structs that keep only the fields we use, so
a trace is never turned into per-event Python dicts (the unused ``args`` such as input
shapes and call stacks are skipped by the decoder).

Fields whose type varies between producers (``pid``/``tid`` int or string, ``stream``
int or ``"0x0"``, integers beyond 64 bits in ``args``) are typed loosely so that no
valid trace fails validation; readers coerce them column by column.
"""

from __future__ import annotations

import os
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast, get_args

import msgspec

from gpuprof.errors import BadTraceError
from gpuprof.readers.chunks import ChunkingFailed, first_piece, later_pieces, split_points

_GZIP_MAGIC = b"\x1f\x8b"
_IN_BYTES = 1 << 20  # compressed bytes fed to zlib at a time
_OUT_BYTES = 1 << 24  # most decompressed bytes zlib returns at a time
# How many candidate cut points to try when recovering a trace cut off mid-write.
_MAX_RECOVERY_TRIES = 32


class Args(msgspec.Struct, frozen=True, gc=False):
    """The ``args`` keys any reader uses; everything else in ``args`` is skipped."""

    correlation: Any = None
    stream: Any = None
    nbytes: Any = msgspec.field(default=None, name="bytes")
    coll_name: Any = msgspec.field(default=None, name="Collective name")
    pg_name: Any = msgspec.field(default=None, name="Process Group Name")
    # Message of a collective (record_param_comms, and communication kernels in newer traces).
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    dtype: Any = None
    name: Any = None  # metadata events: thread_name / process_name
    step: Any = None  # op-level timelines
    mb_id: Any = None  # op-level timelines
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=None, name="Total Reserved")
    device_id: Any = msgspec.field(default=None, name="Device Id")


NO_ARGS = Args()


# Every event phase of the Chrome trace-event format. Decoding ``ph`` as one of them hands
# out the same string object for every event (no string per event, and comparisons by
# identity); a producer writing another phase makes the piece decode loosely instead.
Phase = Literal[
    "B",
    "E",
    "X",
    "i",
    "I",
    "C",
    "b",
    "n",
    "e",
    "S",
    "T",
    "p",
    "F",
    "s",
    "t",
    "f",
    "P",
    "N",
    "O",
    "D",
    "M",
    "V",
    "v",
    "R",
    "c",
    "(",
    ")",
    "",
]


_PHASES: frozenset[str] = frozenset(get_args(Phase))


class Event(msgspec.Struct, gc=False):
    """One trace event; times are microseconds as in the Chrome trace-event format."""

    ph: Phase = ""
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
    with_stack: Any = None


class _LooseDoc(msgspec.Struct):
    traceEvents: list[_LooseEvent] | None = None
    deviceProperties: Any = None
    distributedInfo: Any = None
    schemaVersion: Any = None
    with_stack: Any = None


@dataclass
class TopLevel:
    """The top-level keys readers use (``None`` when absent).

    With a trace decoded in pieces, keys after the event list are only known once every
    piece has been read.
    """

    device_properties: Any = None
    distributed_info: Any = None
    schema_version: Any = None
    with_stack: Any = None  # Kineto writes the profiler's with_stack setting (1 / true)

    def update(self, later: TopLevel) -> None:
        """Take the keys ``later`` (a later piece) found."""
        if later.device_properties is not None:
            self.device_properties = later.device_properties
        if later.distributed_info is not None:
            self.distributed_info = later.distributed_info
        if later.schema_version is not None:
            self.schema_version = later.schema_version
        if later.with_stack is not None:
            self.with_stack = later.with_stack


@dataclass
class RawTrace:
    """A trace file being decoded: its first piece of events, an iterator over the rest.

    ``rest`` can be consumed once and may raise :class:`ChunkingFailed` (then decode the
    file again with ``decode_trace(path, chunked=False)``). ``size_bytes`` is the size of
    the (decompressed) JSON text; ``warnings`` say what was recovered (a cut-off gzip
    stream or JSON text).
    """

    first: list[Event]
    rest: Iterator[list[Event]]
    top: TopLevel
    is_object: bool
    size_bytes: int
    warnings: tuple[str, ...]
    # Bytes of JSON text before the cut of a cut-off trace (``None``: the text is whole).
    # Events after the cut are missing: readers must not conclude from what is absent.
    cut_off_at_bytes: int | None = None
    cut_off_note: str | None = None  # the warning (one of ``warnings``) saying so

    def pieces(self) -> Iterator[list[Event]]:
        """All events, piece by piece (the first piece, then the rest); consumes them.

        ``first`` is emptied as it is handed out, so that no piece outlives its turn.
        """
        first, self.first = self.first, []
        yield first
        del first
        yield from self.rest


def read_bytes(path: Path) -> tuple[bytearray, list[str]]:
    """The JSON text of ``path``, gunzipped when it is gzip (by content, not by name).

    A mutable buffer, so that pieces of a large trace can be decoded in place (see
    :func:`gpuprof.readers.chunks.later_pieces`). A gzip stream that ends early yields
    what it decompressed so far plus a warning.
    """
    try:
        with path.open("rb") as fh:
            data = bytearray(os.fstat(fh.fileno()).st_size)
            n = fh.readinto(data)
            if n < len(data):  # the file shrank while being read
                del data[n:]
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


class _Sink:
    """Decompressed bytes written into one buffer sized from the gzip trailer.

    Joining a list of pieces would briefly hold the text twice; a trace can be GBs.
    """

    def __init__(self, size_hint: int) -> None:
        self.buf = bytearray(size_hint)  # zero pages cost nothing until written
        self.n = 0

    def put(self, piece: bytes) -> None:
        end = self.n + len(piece)
        if end > len(self.buf):
            self.buf.extend(bytes(max(end - len(self.buf), len(self.buf) // 2)))
        self.buf[self.n : end] = piece
        self.n = end

    def result(self) -> bytearray:
        del self.buf[self.n :]
        return self.buf


def _gunzip(data: bytes | bytearray, path: Path) -> tuple[bytearray, list[str]]:
    # ISIZE (the last 4 bytes) is the size of the last member mod 2**32; of a cut-off file
    # it is noise, hence the plausibility bound.
    isize = int.from_bytes(data[-4:], "little")
    sink = _Sink(isize if 0 < isize <= 200 * len(data) else 8 * len(data))
    view = memoryview(data)
    warnings: list[str] = []
    pos = 0
    while pos < len(data):
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        i = pos
        try:
            # Fed in pieces so that a corrupt or cut tail still leaves the good prefix.
            while i < len(data) and not d.eof:
                piece = view[i : i + _IN_BYTES]
                i += len(piece)
                sink.put(d.decompress(piece, _OUT_BYTES))
                while d.unconsumed_tail and not d.eof:
                    sink.put(d.decompress(d.unconsumed_tail, _OUT_BYTES))
            sink.put(d.flush())
        except zlib.error as exc:
            if not sink.n:
                raise BadTraceError(f"not a valid gzip file ({exc})", path) from None
            warnings.append(f"gzip data is corrupt after {sink.n} bytes ({exc}); read what came before")
            break
        if not d.eof:
            if not sink.n:
                raise BadTraceError("gzip file is cut off before any data", path)
            warnings.append(
                "gzip file is cut off (the run may have been killed while writing); read what was complete"
            )
            break
        pos = i - len(d.unused_data)
        if data[pos : pos + 2] != _GZIP_MAGIC:
            break  # trailing garbage after the last member is ignored, as gzip(1) does
    if not sink.n:
        raise BadTraceError("gzip file holds no data", path)
    return sink.result(), warnings


def decode_trace(path: Path, chunked: bool = True) -> RawTrace:
    """Read and decode a Chrome trace-event file (Kineto or op-level timeline).

    Large multi-line traces are decoded piece by piece as the caller iterates
    :meth:`RawTrace.pieces` (see :mod:`gpuprof.readers.chunks`); others are decoded whole.
    """
    data, warnings = read_bytes(path)
    is_object = _check_start(data, path)
    points = split_points(data, is_object) if chunked else []
    if points:
        try:
            events, top = _decode(first_piece(data, is_object, points), is_object)
        except (msgspec.DecodeError, msgspec.ValidationError):
            events = None
        if events:
            rest = _later(data, is_object, points, top)
            return RawTrace(events, rest, top, is_object, len(data), tuple(warnings))
    return decode_text(data, path, warnings)


def _later(
    data: bytes | bytearray, is_object: bool, points: list[tuple[int, int]], top: TopLevel
) -> Iterator[list[Event]]:
    for piece, last in later_pieces(data, is_object, points):
        try:
            events, found = _decode(piece, is_object and last)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise ChunkingFailed from None
        del piece
        if last:
            top.update(found)
        yield events or []


_FIRST_CHAR = re.compile(rb"\S")


def _check_start(data: bytes | bytearray, path: Path) -> bool:
    """True for a JSON object, False for a list; BadTraceError for anything else."""
    m = _FIRST_CHAR.search(data)  # not data.lstrip(): that would copy the whole text
    if m is None:
        raise BadTraceError("file holds only whitespace", path)
    first = data[m.start() : m.start() + 1]
    if first not in (b"{", b"["):
        raise BadTraceError("not JSON (a trace file starts with '{' or '[')", path)
    return first == b"{"


def decode_text(data: bytes | bytearray, path: Path, warnings: list[str] | None = None) -> RawTrace:
    """Decode a whole JSON text (recovering a cut-off one) into a one-piece RawTrace."""
    warns = list(warnings or [])
    is_object = _check_start(data, path)
    cut: int | None = None
    note: str | None = None
    try:
        doc = _decode(data, is_object)
    except msgspec.ValidationError as exc:
        raise BadTraceError(f"JSON is not a trace ({exc})", path) from None
    except msgspec.DecodeError as exc:
        recovered = _recover_cut(data, is_object)
        if recovered is None:
            raise BadTraceError(f"not valid JSON ({exc})", path) from None
        doc, n_bytes = recovered
        cut = n_bytes
        note = (
            f"trace is cut off after {n_bytes} bytes (written while the job was killed?); "
            f"read the {len(doc[0] or ())} complete events before the cut"
        )
        warns.append(note)
    events, top = doc
    if events is None:
        raise BadTraceError("JSON is not a trace (no 'traceEvents' list)", path)
    if not events:
        raise BadTraceError("trace holds no events", path)
    return RawTrace(events, iter(()), top, is_object, len(data), tuple(warns), cut, note)


_DocTuple = tuple[list[Event] | None, TopLevel]


def _decode(data: bytes | bytearray | memoryview, is_object: bool) -> _DocTuple:
    try:
        if is_object:
            doc = msgspec.json.decode(data, type=_Doc)
            top = TopLevel(doc.deviceProperties, doc.distributedInfo, doc.schemaVersion, doc.with_stack)
            return doc.traceEvents, top
        return msgspec.json.decode(data, type=list[Event]), TopLevel()
    except msgspec.ValidationError:
        pass
    # Rare: odd types somewhere. Decode loosely and coerce; raises ValidationError when the
    # JSON is not a list of objects at all.
    if is_object:
        loose = msgspec.json.decode(data, type=_LooseDoc)
        evs = None if loose.traceEvents is None else [_coerce(e) for e in loose.traceEvents]
        top = TopLevel(loose.deviceProperties, loose.distributedInfo, loose.schemaVersion, loose.with_stack)
        return evs, top
    return [_coerce(e) for e in msgspec.json.decode(data, type=list[_LooseEvent])], TopLevel()


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
        ph=cast(Phase, e.ph) if isinstance(e.ph, str) and e.ph in _PHASES else "",  # unknown: no row
        cat=str(e.cat or ""),
        name=str(e.name or ""),
        ts=_num(e.ts),
        dur=_num(e.dur),
        pid=ident(e.pid),
        tid=ident(e.tid),
        args=args,
    )


def _recover_cut(data: bytes | bytearray, is_object: bool) -> tuple[_DocTuple, int] | None:
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
