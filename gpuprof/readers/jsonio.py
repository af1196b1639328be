"""Bytes -> decoded trace events, for every Chrome trace-event based format.

Reading is split from interpretation: this module turns a file (plain or gzip, whole or
cut off mid-write, read as a stream by :mod:`gpuprof.readers.textstream`) into :class:`Event` structs, piece by piece for large traces (see
:mod:`gpuprof.readers.chunks`), plus the few top-level keys the readers need. Decoding uses ``msgspec`` into structs that keep only the fields we use, so
a trace is never turned into per-event Python dicts (the unused ``args`` such as input
shapes and call stacks are skipped by the decoder).

Fields whose type varies between producers (``pid``/``tid`` int or string, ``stream``
int or ``"0x0"``, integers beyond 64 bits in ``args``) are typed loosely so that no
valid trace fails validation; readers coerce them column by column.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast, get_args

import msgspec

from gpuprof.errors import BadTraceError
from gpuprof.readers import chunks, textstream
from gpuprof.readers.chunks import ChunkingFailed
from gpuprof.readers.textstream import read_bytes, text_blocks

# Blocks of text read at most while looking for the end of the first piece; a trace with
# no cut that early (one written on one line) is read and decoded whole.
_MAX_HEAD_BLOCKS = 4
# How many candidate cut points to try when recovering a trace cut off mid-write.
_MAX_RECOVERY_TRIES = 32


class NotATraceError(BadTraceError):
    """Valid JSON that is not a trace (a config, a stamp file); a folder scan skips such files."""


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
    # Shapes and C++ types of an op's inputs: the size of a collective that records no
    # nelems (symm_mem ops).
    input_dims: Any = msgspec.field(default=None, name="Input Dims")
    input_type: Any = msgspec.field(default=None, name="Input type")
    name: Any = None  # metadata events: thread_name / process_name
    step: Any = None  # op-level timelines
    mb_id: Any = None  # op-level timelines
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=None, name="Total Reserved")
    device_id: Any = msgspec.field(default=None, name="Device Id")
    # Merged multi-rank files (TraceFusion): the event's rank and its pid before merging.
    rank: Any = None
    pid_raw: Any = None


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
    file again with ``decode_trace(path, chunked=False)``). ``warnings`` say what was
    recovered (a cut-off gzip stream or JSON text).
    """

    first: list[Event]
    rest: Iterator[list[Event]]
    top: TopLevel
    is_object: bool
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


def decode_trace(path: Path, chunked: bool = True) -> RawTrace:
    """Read and decode a Chrome trace-event file (Kineto or op-level timeline).

    Large multi-line traces are read and decoded piece by piece as the caller iterates
    :meth:`RawTrace.pieces`, so that only about a block of text (see
    :data:`gpuprof.readers.textstream.BLOCK_BYTES`) is held at a time. Small traces, and
    those that offer no cut, are read whole; ``chunked=False`` reads and decodes the whole
    text at once (the way back when a piece did not decode, see :class:`ChunkingFailed`).
    """
    if not chunked:
        data, found = read_bytes(path)
        return decode_text(data, path, found)
    # Warnings of a damaged gzip stream are only known once its blocks run out: the rest
    # of a streamed trace then raises ChunkingFailed, and the whole-text path says so.
    warnings: list[str] = []
    blocks = text_blocks(path, warnings)
    head = bytearray()
    is_object: bool | None = None
    cut: tuple[int, int] | None = None
    enough = (chunks.FIRST_PIECE_TARGETS + 1) * chunks.TARGET_BYTES
    for block in blocks:
        head += block
        if is_object is None and _FIRST_CHAR.search(head):
            is_object = _check_start(head, path)  # fails fast on a file that is not JSON
        if is_object is None or len(head) < enough:
            continue
        cut = chunks.first_cut(head, is_object)
        if cut is not None or len(head) > _MAX_HEAD_BLOCKS * textstream.BLOCK_BYTES:
            break
    if cut is None or is_object is None:
        # Small, or no cut near the start (e.g. a trace written on one line): read it whole.
        for block in blocks:
            head += block
        return _decode_whole(head, path, warnings)
    end, begin = cut
    first = head[:end]
    first += b"]}" if is_object else b"]"
    try:
        events, top = _decode(first, is_object)
    except (msgspec.DecodeError, msgspec.ValidationError):
        events = None
    del first
    if not events:
        for block in blocks:
            head += block
        return decode_text(head, path, warnings)
    rest = _streamed(head, begin, blocks, is_object, top, warnings)
    return RawTrace(events, rest, top, is_object, ())


def _decode_whole(data: bytearray, path: Path, warnings: list[str]) -> RawTrace:
    """Decode a whole text, piece by piece (in place) when it is large and offers cuts."""
    is_object = _check_start(data, path)
    points = chunks.split_points(data, is_object)
    if points:
        try:
            events, top = _decode(chunks.first_piece(data, is_object, points), is_object)
        except (msgspec.DecodeError, msgspec.ValidationError):
            events = None
        if events:
            rest = _later(chunks.later_pieces(data, is_object, points), is_object, top, [])
            return RawTrace(events, rest, top, is_object, tuple(warnings))
    return decode_text(data, path, warnings)


def _streamed(
    buf: bytearray, begin: int, blocks: Iterator[bytes], is_object: bool, top: TopLevel, warnings: list[str]
) -> Iterator[list[Event]]:
    return _later(chunks.stream_pieces(buf, begin, blocks, is_object), is_object, top, warnings)


def _later(
    pieces: Iterator[tuple[bytearray | memoryview, bool]], is_object: bool, top: TopLevel, warnings: list[str]
) -> Iterator[list[Event]]:
    for piece, last in pieces:
        try:
            events, found = _decode(piece, is_object and last)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise ChunkingFailed from None
        del piece  # a view into the text being read: gone before the next piece is cut
        if last:
            if warnings:  # the gzip stream was damaged: the whole-text path reports it
                raise ChunkingFailed
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
        raise NotATraceError(f"JSON is not a trace ({exc})", path) from None
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
        raise NotATraceError("JSON is not a trace (no 'traceEvents' list)", path)
    if not events:
        raise BadTraceError("trace holds no events", path)
    return RawTrace(events, iter(()), top, is_object, tuple(warns), cut, note)


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
