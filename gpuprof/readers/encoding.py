"""What a JSON text may be written in besides valid UTF-8, made UTF-8 for the decoder.

:func:`as_utf8` converts a stream of blocks written in UTF-16 or UTF-32 (told by the
byte-order mark, or by where the zero bytes fall) and drops a UTF-8 byte-order mark;
:func:`valid_unicode` repairs a piece of text that fails to decode only for strings that
are not valid Unicode (a byte that is not UTF-8, a lone ``\\ud800`` escape), and
:data:`REPLACED_NOTE` is the warning that says so. Nothing here reads the JSON itself.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator

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


REPLACED_NOTE = (
    "some strings in the trace are not valid Unicode (bytes that are not UTF-8, or lone surrogates "
    "such as \\ud800): they are read with U+FFFD in their place"
)
_HIGH = rb"\\u[dD][89abAB][0-9a-fA-F]{2}"
_LOW = rb"\\u[dD][c-fC-F][0-9a-fA-F]{2}"
_LONE_SURROGATE = re.compile(rb"(?:" + _HIGH + rb"(?!" + _LOW + rb"))|(?:(?<!" + _HIGH + rb")" + _LOW + rb")")


def valid_unicode(data: bytes | bytearray | memoryview) -> bytes | None:
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
