"""Split a large trace's event list into pieces that decode on their own.

Decoding a whole trace at once holds a struct per event for every event of the file;
decoding it in pieces of a few hundred KB holds the structs of one piece while readers turn
them into columns, so memory stays close to the size of the JSON text itself.

Pieces are cut between two events at a ``}`` ``,`` *newline* ``{`` sequence found after
the ``traceEvents`` key. A JSON string cannot hold a raw newline, so such a cut is never
inside a string; should a cut fall inside a nested object (a list of dicts in ``args``
written over several lines), the piece does not decode and the reader falls back to
decoding the whole text (:class:`ChunkingFailed`). Traces written on one line (no
newlines) are simply decoded whole.

Each piece is wrapped so that it is valid JSON by itself: the first keeps the top-level
keys before the events and is closed with ``]}``; middle pieces are bare lists; the last
is opened with ``{"traceEvents":[`` and keeps the top-level keys after the events.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator

# Bytes of JSON text per piece: large enough that per-piece costs vanish (a few numpy
# calls per column), small enough that a piece's structs (about twice its text) stay in
# the CPU caches while readers make columns of them: with 8 MB pieces reading took twice
# as long as with 512 KB ones (each pass over the events went to main memory).
TARGET_BYTES = 512 << 10
# The first piece is longer: readers tell the format from it (Kineto categories, complete
# events), and a few thousand events are not always enough to see them.
FIRST_PIECE_TARGETS = 4
_BOUNDARY = re.compile(rb"\}[ \t\r]*,[ \t\r]*\n[ \t\r\n]*\{")
_OPEN_OBJECT = b'{"traceEvents":['


class ChunkingFailed(Exception):
    """A piece did not decode: the caller decodes the whole text instead."""


def split_points(
    text: bytes | bytearray, is_object: bool, target_bytes: int | None = None
) -> list[tuple[int, int]]:
    """``(end, start)`` offsets between events, about every ``target_bytes`` of text
    (the first after ``FIRST_PIECE_TARGETS`` times as much).

    ``end`` is just past the ``}`` closing one event, ``start`` at the ``{`` opening the
    next. Empty when the text is small or offers no cut. ``target_bytes`` defaults to
    :data:`TARGET_BYTES` (read at call time, so tests can shrink it).
    """
    if target_bytes is None:
        target_bytes = TARGET_BYTES
    first_bytes = FIRST_PIECE_TARGETS * target_bytes
    if len(text) < first_bytes + target_bytes:
        return []
    pos = 0
    if is_object:
        pos = text.find(b'"traceEvents"')
        if pos < 0:
            return []
    out: list[tuple[int, int]] = []
    pos += first_bytes
    stop = len(text) - target_bytes // 2  # no tiny last piece
    while pos < stop:
        m = _BOUNDARY.search(text, pos, stop)
        if m is None:
            break
        out.append((m.start() + 1, m.end() - 1))
        pos = m.end() + target_bytes
    return out


def _wrapped(opening: bytes, body: memoryview, closing: bytes) -> bytearray:
    """``opening + body + closing`` with a single copy of ``body``."""
    out = bytearray(len(opening) + len(body) + len(closing))
    out[: len(opening)] = opening
    out[len(opening) : len(opening) + len(body)] = body
    out[len(out) - len(closing) :] = closing
    return out


def first_piece(text: bytes | bytearray, is_object: bool, points: list[tuple[int, int]]) -> bytearray:
    """The text up to the first cut, closed: ``{... "traceEvents": [e, e]}`` or ``[e, e]``."""
    return _wrapped(b"", memoryview(text)[: points[0][0]], b"]}" if is_object else b"]")


def later_pieces(
    text: bytes | bytearray, is_object: bool, points: list[tuple[int, int]]
) -> Iterator[tuple[bytearray | memoryview, bool]]:
    """The other pieces, each with ``True`` when it is the last (which may hold top-level keys).

    In a mutable ``text`` a middle piece is decoded in place, without a copy: the byte
    before its first ``{`` becomes ``[`` and the byte after its last ``}`` becomes ``]``.
    Both bytes are in the gap between two events (a cut's gap holds at least a comma and
    a newline), so no other piece covers them. ``text`` is thereby changed: decode it
    afresh to read it again.
    """
    view = memoryview(text)
    mutable = text if isinstance(text, bytearray) else None
    for (_, begin), (end, _) in itertools.pairwise(points):
        if mutable is not None:
            mutable[begin - 1] = 0x5B  # "["
            mutable[end] = 0x5D  # "]"
            yield view[begin - 1 : end + 1], False
        else:
            yield _wrapped(b"[", view[begin:end], b"]"), False
    yield _wrapped(_OPEN_OBJECT if is_object else b"[", view[points[-1][1] :], b""), True


def first_cut(text: bytes | bytearray, is_object: bool) -> tuple[int, int] | None:
    """``(end, start)`` of the cut ending the first piece of a trace read as a stream.

    The first cut at least ``FIRST_PIECE_TARGETS * TARGET_BYTES`` after the
    ``traceEvents`` key; ``None`` while ``text`` (the start of the trace) holds none yet.
    """
    pos = 0
    if is_object:
        pos = text.find(b'"traceEvents"')
        if pos < 0:
            return None
    m = _BOUNDARY.search(text, pos + FIRST_PIECE_TARGETS * TARGET_BYTES)
    return None if m is None else (m.start() + 1, m.end() - 1)


def stream_pieces(
    buf: bytearray, begin: int, blocks: Iterator[bytes], is_object: bool
) -> Iterator[tuple[memoryview | bytearray, bool]]:
    """The pieces after the first of a trace read as a stream, each with ``True`` when last.

    ``buf`` holds the text read so far and ``begin`` is the offset in it of the ``{`` that
    opens the first event not yet handed out (the end of :func:`first_cut`); ``blocks``
    give the rest of the text. Text is dropped from ``buf`` once handed out, so only about
    a block plus a piece is held at any time. Middle pieces are views into ``buf``, valid
    until the next piece is asked for (decoded in place as in :func:`later_pieces`).
    """
    target = TARGET_BYTES
    pos = begin
    scan = pos + target
    while True:
        m = _BOUNDARY.search(buf, scan)
        if m is not None:
            end, nxt = m.start() + 1, m.end() - 1
            buf[pos - 1] = 0x5B  # "[" in the gap before the piece's first event
            buf[end] = 0x5D  # "]" in the gap after its last one
            whole = memoryview(buf)
            piece = whole[pos - 1 : end + 1]
            yield piece, False
            # Views must be gone before ``buf`` is resized below.
            piece.release()
            whole.release()
            pos = nxt
            scan = pos + target
            continue
        block = next(blocks, None)
        if block is None:
            break
        # A cut may straddle the end of ``buf``: search again from its last '}'.
        last_brace = buf.rfind(b"}", scan)
        scan = max(scan, last_brace if last_brace >= 0 else len(buf))
        drop = pos - 1  # keep the byte before ``pos``: it becomes the next piece's "["
        del buf[:drop]
        pos -= drop
        scan -= drop
        buf += block
    with memoryview(buf) as whole:
        last = _wrapped(_OPEN_OBJECT if is_object else b"[", whole[pos:], b"")
    yield last, True
