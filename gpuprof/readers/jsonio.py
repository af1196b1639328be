"""Bytes -> decoded trace events, for every Chrome trace-event based format.

Reading is split from interpretation: this module turns a file (plain or gzip, whole or
cut off mid-write, read as a stream by :mod:`gpuprof.readers.textstream`) into
:class:`Event` structs, piece by piece (see :mod:`gpuprof.readers.chunks`), plus the few
top-level keys the readers need. Decoding uses ``msgspec`` into structs that keep only the
fields we use, so a trace is never turned into per-event Python dicts (the unused
``args`` such as call stacks are skipped by the decoder, and input shapes are kept as raw
JSON text until a communication row needs them). Why msgspec
and not another decoder: see ``benchmarks/README.md`` (measured side by side).

Fields whose type varies between producers (``pid``/``tid`` int or string, ``stream``
int or ``"0x0"``, integers beyond 64 bits in ``args``) are typed loosely so that no
valid trace fails validation; readers coerce them column by column. A missing ``ts`` or
``dur`` is NaN, as is a value that is not a number: readers drop such events and count
them (see :mod:`gpuprof.readers.timecheck`).
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast, get_args

import msgspec

from gpuprof.errors import BadTraceError
from gpuprof.readers import chunks
from gpuprof.readers.limits import ReadLimits
from gpuprof.readers.textstream import text_blocks

# How many candidate cut points to try when recovering a trace cut off mid-write.
_MAX_RECOVERY_TRIES = 32


class NotATraceError(BadTraceError):
    """Valid JSON that is not a trace (a config, a stamp file); a folder scan skips such files."""


# A raw ``args`` field the event does not have (``msgspec.Raw | None`` is not a type
# msgspec decodes into: the empty text stands for "absent").
NO_RAW = msgspec.Raw()


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
    # nelems (symm_mem ops). Every op of a trace recorded with shapes carries both, as
    # nested lists; kept as the raw JSON text (validated, not built into Python lists) and
    # decoded only for the communication rows that read them (see :func:`raw_value`):
    # building them for every op cost a third of the reading time, and fed the cyclic GC.
    input_dims: msgspec.Raw = msgspec.field(default=NO_RAW, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=NO_RAW, name="Input type")
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
_RAW_FIELDS = ("input_dims", "input_type")


def raw_value(value: Any) -> Any:
    """The value of an ``args`` field kept as raw JSON text (:class:`msgspec.Raw`), decoded
    (``None`` when absent); any other value (one an :class:`Args` was built with) as it is.

    The text was validated when the event was decoded (nesting too deep for the decoder
    fails there, as for any field), so decoding it again cannot fail."""
    if not isinstance(value, msgspec.Raw):
        return value
    return msgspec.json.decode(value) if value else None


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


NAN = float("nan")
INF = float("inf")


class Event(msgspec.Struct, gc=False):
    """One trace event; times are microseconds as in the Chrome trace-event format."""

    ph: Phase = ""
    cat: str = ""
    name: str = ""
    ts: float = NAN  # missing: NaN (never 0, which would read as a time)
    dur: float = NAN
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

    ``rest`` can be consumed once. ``warnings`` say what was recovered (a cut-off gzip
    stream or JSON text); like ``cut_off_at_bytes`` and the keys of ``top`` written after
    the events, they are complete only once every piece has been read.
    """

    first: list[Event]
    rest: Iterator[list[Event]]
    top: TopLevel
    is_object: bool
    warnings: list[str]
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


def decode_trace(path: Path, limits: ReadLimits | None = None) -> RawTrace:
    """Read and decode a Chrome trace-event file (Kineto or op-level timeline).

    The text is read as a stream of blocks and decoded piece by piece as the caller
    iterates :meth:`RawTrace.pieces`, so that only about a block of text and a piece of
    events are held at a time, whatever the file's size; small traces are decoded whole.
    A trace cut off mid-write (or whose gzip stream is damaged) gives the events before the
    cut, with a warning. Raises :class:`BadTraceError` for a file that is not JSON, and
    :class:`~gpuprof.readers.limits.InputLimitError` past ``limits``.
    """
    limits = ReadLimits() if limits is None else limits
    warnings: list[str] = []
    blocks = as_utf8(text_blocks(path, warnings, limits=limits), warnings)
    return _Reader(path, blocks, warnings, limits).start()


class _Reader:
    """Cuts the text into pieces (see :mod:`gpuprof.readers.chunks`) and decodes them.

    ``buf`` holds the text not yet decoded, from the byte before ``pos`` (the ``{`` of the
    next piece's first event); ``dropped`` counts the bytes of the file before ``buf[0]``.
    A piece that does not decode (a cut inside a nested value or a string) is extended to
    a later cut, at least twice as long each time, so that the work stays linear; text
    with no cut for ``max_event_bytes`` is refused.
    """

    def __init__(self, path: Path, blocks: Iterator[bytes], warnings: list[str], limits: ReadLimits) -> None:
        self.path = path
        self.blocks = blocks
        self.warnings = warnings
        self.limits = limits
        self.buf = bytearray()
        self.pos = 0
        self.dropped = 0
        self.is_object = True
        self.one_line = False
        self.top = TopLevel()
        self.raw: RawTrace | None = None
        self.events_so_far = 0
        self.last_end = 0  # offset in the file just past the last event decoded so far

    def _more(self) -> bool:
        block = next(self.blocks, None)
        if block is None:
            return False
        self.buf += block
        return True

    def _skip_space(self) -> None:
        """Drop leading whitespace a block at a time (linear in its length, never held)."""
        for block in self.blocks:
            rest = block.lstrip()  # C speed; a regular expression takes ~100 ns a byte here
            self.dropped += len(block) - len(rest)
            if rest:
                self.buf += rest
                return
        raise BadTraceError("file holds only whitespace", self.path)

    def start(self) -> RawTrace:
        self._skip_space()
        self.is_object = _check_start(self.buf, self.path)
        key = 0
        if self.is_object:
            key = self._find_key()
            if key < 0:  # no event list within the limit: small, or not a trace
                return self._whole()
        events = self._next_piece(key + chunks.FIRST_PIECE_TARGETS * chunks.TARGET_BYTES, first=True)
        if events is None:
            return self._whole()
        raw = RawTrace(events, self._rest(), self.top, self.is_object, self.warnings)
        self.raw = raw
        return raw

    def _find_key(self) -> int:
        """Offset of the ``traceEvents`` key in ``buf`` (reading on as needed), else -1."""
        searched = 0
        while True:
            found = self.buf.find(b'"traceEvents"', max(0, searched - 16))
            if found >= 0:
                return found
            searched = len(self.buf)
            if searched > self.limits.max_event_bytes:
                raise self.limits.event_too_large(self.path, self.dropped)
            if not self._more():
                return -1

    def _whole(self) -> RawTrace:
        """The text decoded at once: it offers no cut (a small trace, or not a trace)."""
        while self._more():
            if len(self.buf) > self.limits.max_event_bytes:
                raise self.limits.event_too_large(self.path, self.dropped)
        return decode_text(self.buf, self.path, self.warnings)

    def _next_piece(self, scan: int, first: bool = False) -> list[Event] | None:
        """Decode the events from ``pos`` (0 for the first piece, which keeps the top-level
        keys before the events) up to a cut at or after ``scan``, and move ``pos`` past them.

        ``None`` when the text from ``pos`` to the end offers no cut that gives a piece.
        """
        error: str | None = None
        failures = 0
        while True:
            cut = chunks.find_cut(self.buf, scan, self.one_line)
            if cut is None and first and not self.one_line and self.buf.find(b"\n", scan) < 0:
                cut = chunks.find_cut(self.buf, scan, True)  # a trace written on one line
                self.one_line = cut is not None
            if cut is None:
                if len(self.buf) - self.pos > self.limits.max_event_bytes:
                    if error:
                        raise BadTraceError(f"not valid JSON ({error})", self.path)
                    raise self.limits.event_too_large(self.path, self.dropped + self.pos)
                # Search again from the last '}' only (a cut may straddle the end of the
                # text), so that text with no cut is scanned once, not once per block.
                last = self.buf.rfind(b"}", scan)
                scan = max(scan, last if last >= 0 else len(self.buf))
                if not first:
                    scan -= self._drop()
                if not self._more():
                    return None
                continue
            end, nxt = cut
            try:
                events = self._decode_piece(end, first)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                # A cut inside a nested value or a string: try the next cut, then (should
                # that fail too) cuts twice as far each time, so the work stays linear.
                error = error or str(exc)
                failures += 1
                scan = nxt if failures < 3 else max(nxt, self.pos + 2 * (end - self.pos))
                continue
            self.events_so_far += len(events)
            self.last_end = self.dropped + end
            self.pos = nxt
            return events

    def _drop(self) -> int:
        """Forget the text before ``pos - 1`` (that byte becomes the piece's ``[``);
        returns how far offsets moved."""
        drop = self.pos - 1
        if drop <= 0:
            return 0
        del self.buf[:drop]
        self.dropped += drop
        self.pos -= drop
        return drop

    def _decode_piece(self, end: int, first: bool) -> list[Event]:
        # Each piece is decoded from a copy of its own: the events' raw ``args`` fields
        # (``msgspec.Raw``) keep the text they were decoded from exported, and ``buf`` is
        # resized as the file is read.
        if first:
            with memoryview(self.buf) as whole, whole[:end] as head:
                text = b"".join((head, b"]}" if self.is_object else b"]"))
            events, top = _decode(text, self.is_object, self.path, self.warnings)
            if not events:  # the cut was not in the event list: not a piece
                raise msgspec.DecodeError("no events before the first cut")
            self.top.update(top)
            return events
        # ``[`` + the events + ``]``: the bytes before and after a piece lie in the gaps
        # between events.
        with memoryview(self.buf) as whole, whole[self.pos : end] as body:
            piece = b"".join((b"[", body, b"]"))
        return _decode(piece, False, self.path, self.warnings)[0] or []

    def _rest(self) -> Iterator[list[Event]]:
        while (events := self._next_piece(self.pos + chunks.TARGET_BYTES)) is not None:
            yield events
            del events
        yield self._last_piece()

    def _last_piece(self) -> list[Event]:
        begin = self.pos
        with memoryview(self.buf) as whole, whole[begin:] as body:
            text = b"".join((chunks.OPEN_OBJECT if self.is_object else b"[", body))
        added = len(text) - (len(self.buf) - begin)  # bytes of the opening
        self.buf = bytearray()
        try:
            events, top = _decode_whole(text, self.is_object, self.path, self.warnings)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            recovered = _recover_cut(text, self.is_object)
            at = self.last_end  # the end of the previous piece, unless some events follow
            events, top = [], TopLevel()
            if recovered is not None:
                (found, top), n_bytes = recovered
                events = found or []
                at = self.dropped + begin + n_bytes - added
            if not self.events_so_far and not events:
                raise BadTraceError(f"not valid JSON ({exc})", self.path) from None
            self._cut_off(at, self.events_so_far + len(events))
        self.top.update(top)
        return events or []

    def _cut_off(self, at_bytes: int, n_events: int) -> None:
        note = (
            f"trace is cut off after {at_bytes} bytes (written while the job was killed?); "
            f"read the {n_events} complete events before the cut"
        )
        self.warnings.append(note)
        if self.raw is not None:
            self.raw.cut_off_at_bytes = at_bytes
            self.raw.cut_off_note = note


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
        doc = _decode_whole(data, is_object, path, warns)
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
    return RawTrace(events, iter(()), top, is_object, warns, cut, note)


_DocTuple = tuple[list[Event] | None, TopLevel]


# Deeper nesting than this inside one event is refused: msgspec decodes nested values
# recursively, and Python's recursion limit (1000 by default) ends it before.
_NESTING_NOTE = "nested deeper than the decoder's recursion limit allows (no trace event nests that deep)"


def _decode(
    data: bytes | bytearray | memoryview, is_object: bool, path: Path, notes: list[str] | None = None
) -> _DocTuple:
    """Decode JSON text; text that fails only for strings that are not valid Unicode (a byte
    that is not UTF-8, a lone ``\\ud800``) is decoded with them replaced by U+FFFD, and
    ``notes`` gets one line saying so (once per file)."""
    try:
        try:
            return _decode_doc(data, is_object)
        except msgspec.DecodeError:
            repaired = _valid_unicode(data)
            if repaired is None:
                raise
            doc = _decode_doc(repaired, is_object)  # raises the text's other problems
            if notes is not None and _REPLACED_NOTE not in notes:
                notes.append(_REPLACED_NOTE)
            return doc
    except RecursionError:
        raise BadTraceError(f"JSON {_NESTING_NOTE}", path) from None


_TRAILING = re.compile(r"trailing characters \(byte (\d+)\)")


def _decode_whole(data: bytes | bytearray | memoryview, is_object: bool, path: Path, notes: list[str]) -> _DocTuple:
    """:func:`_decode` for a text that ends the file: what follows a complete JSON text
    (bytes a writer appended, a second document) is left out with a warning, never
    taken silently nor read as a cut-off trace."""
    try:
        return _decode(data, is_object, path, notes)
    except msgspec.DecodeError as exc:
        m = _TRAILING.search(str(exc))
        if m is None:
            raise
        end = int(m.group(1)) - 1  # msgspec counts the byte after the first one left over
        doc = _decode(memoryview(data)[:end], is_object, path, notes)
        notes.append(f"{len(data) - end} bytes after the end of the JSON text were ignored (not part of the trace)")
        return doc


_REPLACED_NOTE = (
    "some strings in the trace are not valid Unicode (bytes that are not UTF-8, or lone surrogates "
    "such as \\ud800): they are read with U+FFFD in their place"
)
_HIGH = rb"\\u[dD][89abAB][0-9a-fA-F]{2}"
_LOW = rb"\\u[dD][c-fC-F][0-9a-fA-F]{2}"
_LONE_SURROGATE = re.compile(rb"(?:" + _HIGH + rb"(?!" + _LOW + rb"))|(?:(?<!" + _HIGH + rb")" + _LOW + rb")")


def _valid_unicode(data: bytes | bytearray | memoryview) -> bytes | None:
    """``data`` with invalid UTF-8 and lone surrogate escapes replaced by U+FFFD, or
    ``None`` when it holds neither (its decode error is another one)."""
    raw = bytes(data)
    fixed = raw
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        fixed = raw.decode("utf-8", errors="replace").encode("utf-8")
    fixed = _LONE_SURROGATE.sub(rb"\\ufffd", fixed)
    return None if fixed == raw else fixed


# --- encodings: what a JSON text may be written in besides UTF-8 ----------------------------

_BOMS = (
    (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xff\xfe\x00\x00", "utf-32-le"),
    (b"\xef\xbb\xbf", "utf-8"),
    (b"\xfe\xff", "utf-16-be"),
    (b"\xff\xfe", "utf-16-le"),
)


def _encoding_of(head: bytes) -> tuple[str, int]:
    """The encoding of a JSON text from its first bytes, and the length of its byte-order
    mark: a BOM, else the pattern of zero bytes around the first ASCII character (RFC 8259
    JSON starts with one)."""
    for bom, name in _BOMS:
        if head.startswith(bom):
            return name, len(bom)
    if len(head) >= 4:
        if head[:3] == b"\x00\x00\x00" and head[3]:
            return "utf-32-be", 0
        if head[0] and head[1:4] == b"\x00\x00\x00":
            return "utf-32-le", 0
    if len(head) >= 2:
        if head[0] == 0 and head[1]:
            return "utf-16-be", 0
        if head[0] and head[1] == 0:
            return "utf-16-le", 0
    return "utf-8", 0


def as_utf8(blocks: Iterator[bytes], warnings: list[str]) -> Iterator[bytes]:
    """The blocks of a JSON text as UTF-8: a UTF-8 byte-order mark is dropped, UTF-16 and
    UTF-32 text (with or without one) is converted, with one warning; what does not decode
    becomes U+FFFD."""
    first = b""
    for block in blocks:
        first += block
        if len(first) >= 4:
            break
    else:
        if not first:
            return
    encoding, bom = _encoding_of(first[:4])
    if encoding == "utf-8":
        yield first[bom:] if bom else first
        yield from blocks
        return
    warnings.append(f"the trace is written in {encoding.upper()}, not UTF-8: read after converting it")
    decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
    yield decoder.decode(first[bom:]).encode("utf-8")
    for block in blocks:
        yield decoder.decode(block).encode("utf-8")
    yield decoder.decode(b"", final=True).encode("utf-8")


def _decode_doc(data: bytes | bytearray | memoryview, is_object: bool) -> _DocTuple:
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
    """A time from a loosely typed value: a number or numeric string as it is, ``None``
    (``null``) as missing (NaN), anything else (``"abc"``, ``"NaN"``, ``true``) as not a
    number (infinity), so that readers can tell the two apart."""
    if v is None:
        return NAN
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        return INF
    try:
        f = float(v)
    except (ValueError, OverflowError):
        return INF
    return INF if f != f else f


def _coerce(e: _LooseEvent) -> Event:
    args = NO_ARGS
    if isinstance(e.args, dict):
        given = dict(e.args)
        # Raw fields cannot be converted from Python values: set as their JSON text.
        raws = {
            f.name: msgspec.Raw(msgspec.json.encode(given.pop(f.encode_name)))
            for f in msgspec.structs.fields(Args)
            if f.name in _RAW_FIELDS and f.encode_name in given
        }
        try:
            args = msgspec.convert(given, type=Args, strict=False)
        except msgspec.ValidationError:
            args = NO_ARGS
        else:
            if raws:
                args = msgspec.structs.replace(args, **raws)

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
                doc = _decode_doc(prefix + closer, is_object)
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                continue
            if doc[0]:
                return doc, len(prefix)
    return None
