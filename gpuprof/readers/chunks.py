"""Where a trace's event list can be cut into pieces that decode on their own.

Decoding a whole trace at once holds a struct per event for every event of the file;
decoding it in pieces of a few hundred KB holds the structs of one piece while readers turn
them into columns, so memory stays close to one block of text whatever the file's size
(see :mod:`gpuprof.readers.jsonio`, which drives the pieces).

A cut is a ``}`` ``,`` ``{`` sequence (whitespace allowed around the comma) after the
``traceEvents`` key: the end of one event and the start of the next. Pretty-printed and
one-event-per-line traces are cut only where a newline follows the comma (a JSON string
cannot hold a raw newline, so such a cut is never inside a string); traces written on one
line are cut at any ``},{`` followed by a key events have (``"ph"``, ``"name"``...). A cut can still fall inside a nested value (a list of dicts
in ``args``) or a string: the piece before it then fails to decode (its brackets do not
balance), and the reader extends the piece to a later cut. No cut is ever trusted
without the decoder's word.
"""

from __future__ import annotations

import re

# Bytes of JSON text per piece: large enough that per-piece costs vanish (a few numpy
# calls per column), small enough that a piece's structs (about twice its text) stay in
# the CPU caches while readers make columns of them: with 8 MB pieces reading took twice
# as long as with 512 KB ones (each pass over the events went to main memory).
TARGET_BYTES = 512 << 10
# The first piece is longer: readers tell the format from it (Kineto categories, complete
# events), and a few thousand events are not always enough to see them.
FIRST_PIECE_TARGETS = 4
_LINE_CUT = re.compile(rb"\}[ \t\r]*,[ \t\r]*\n[ \t\r\n]*\{")
# On one line, a cut must also be followed by a key that events have: far fewer false
# cuts in lists of dicts inside ``args``.
_ANY_CUT = re.compile(rb'\}\s*,\s*\{(?=\s*"(?:ph|cat|name|pid|tid|ts|dur|args|id|s|bp|cname)")')
OPEN_OBJECT = b'{"traceEvents":['


def find_cut(text: bytes | bytearray, start: int, one_line: bool) -> tuple[int, int] | None:
    """``(end, begin)`` of the first cut at or after ``start``: ``end`` is just past the
    ``}`` closing one event, ``begin`` at the ``{`` opening the next; ``None`` if none.

    ``one_line`` allows cuts without a newline (for traces written on one line)."""
    m = (_ANY_CUT if one_line else _LINE_CUT).search(text, start)
    return None if m is None else (m.start() + 1, m.end() - 1)


def has_line_cut(text: bytes | bytearray, start: int) -> bool:
    """Whether the text after ``start`` holds a cut followed by a newline."""
    return _LINE_CUT.search(text, start) is not None
