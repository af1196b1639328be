"""Bytes -> decoded trace events, for every Chrome trace-event based format.

Reading is split from interpretation: this module turns a file (plain or gzip, whole or
cut off mid-write, read as a stream by :mod:`gpuprof.readers.textstream`, converted to
UTF-8 by :mod:`gpuprof.readers.encoding`) into :class:`~gpuprof.readers.events.Event`
structs, piece by piece (see :mod:`gpuprof.readers.chunks`), plus the few top-level keys
the readers need. What an event keeps, and how odd types are coerced, is
:mod:`gpuprof.readers.events`; here is how the text is cut into pieces, and what is
recovered of a text cut off mid-write, followed by bytes that are not part of it, or
holding strings that are not valid Unicode.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec

from gpuprof.errors import BadTraceError
from gpuprof.readers import chunks
from gpuprof.readers.encoding import REPLACED_NOTE, as_utf8, valid_unicode
from gpuprof.readers.events import DocTuple, Event, TopLevel, decode_doc
from gpuprof.readers.limits import ReadLimits
from gpuprof.readers.textstream import text_blocks

# How many candidate cut points to try when recovering a trace cut off mid-write.
_MAX_RECOVERY_TRIES = 32


class NotATraceError(BadTraceError):
    """Valid JSON that is not a trace (a config, a stamp file); a folder scan skips such files."""


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


# Deeper nesting than this inside one event is refused: msgspec decodes nested values
# recursively, and Python's recursion limit (1000 by default) ends it before.
_NESTING_NOTE = "nested deeper than the decoder's recursion limit allows (no trace event nests that deep)"


def _decode(
    data: bytes | bytearray | memoryview, is_object: bool, path: Path, notes: list[str] | None = None
) -> DocTuple:
    """Decode JSON text; text that fails only for strings that are not valid Unicode (a byte
    that is not UTF-8, a lone ``\\ud800``) is decoded with them replaced by U+FFFD, and
    ``notes`` gets one line saying so (once per file)."""
    try:
        try:
            return decode_doc(data, is_object)
        except msgspec.DecodeError:
            repaired = valid_unicode(data)
            if repaired is None:
                raise
            doc = decode_doc(repaired, is_object)  # raises the text's other problems
            if notes is not None and REPLACED_NOTE not in notes:
                notes.append(REPLACED_NOTE)
            return doc
    except RecursionError:
        raise BadTraceError(f"JSON {_NESTING_NOTE}", path) from None


_TRAILING = re.compile(r"trailing characters \(byte (\d+)\)")


def _decode_whole(data: bytes | bytearray | memoryview, is_object: bool, path: Path, notes: list[str]) -> DocTuple:
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


def _recover_cut(data: bytes | bytearray, is_object: bool) -> tuple[DocTuple, int] | None:
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
                doc = decode_doc(prefix + closer, is_object)
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                continue
            if doc[0]:
                return doc, len(prefix)
    return None
