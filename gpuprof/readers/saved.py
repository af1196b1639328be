"""Saved reports (``gpuprof analyze --format json``): recognizing one, and reading it.

A saved report is untrusted input like a trace: someone may have edited it, sorted its
keys, cut it short or damaged it. :func:`read_report` answers every problem with one
:class:`~gpuprof.errors.GpuprofError` naming the file and the first problem (with its JSON
path), and refuses NaN and Infinity.

:func:`is_report_file` tells a report from a trace by its top-level ``"schema"`` key, read
member by member from the start of the JSON object without parsing the rest: a report keeps
its schema first, but one rewritten with sorted keys (``jq -S``) has it after ``inputs``,
``job``, ``ranks``, ... A trace is recognized as soon as its ``traceEvents`` key is reached
(a few hundred bytes in), so a 1 GB trace costs one small read.
"""

from __future__ import annotations

import codecs
import gzip
import json
import zlib
from collections.abc import Iterator
from json.decoder import scanstring  # type: ignore[attr-defined]
from pathlib import Path
from typing import TYPE_CHECKING

from gpuprof.errors import GpuprofError
from gpuprof.model.report import Report, ReportFormatError, report_from_dict

if TYPE_CHECKING:
    from gpuprof.readers.limits import InputLimitError, ReadLimits

REPORT_SCHEMA_PREFIX = "gpuprof.report/"
_FIRST_READ_BYTES = 64 * 1024
# Reading stops here when the top-level key "schema" was not met: no report is this large
# before its schema key, and what is (a JSON document of another kind) is not a report.
_SCAN_LIMIT_BYTES = 64 * 1024 * 1024
_WS = " \t\n\r"


def _open(path: Path) -> Iterator[bytes]:
    """The decompressed bytes of ``path`` in growing pieces."""
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    with opener(path, "rb") as fh:  # type: ignore[operator]
        size = _FIRST_READ_BYTES
        while True:
            piece = fh.read(size)
            if not piece:
                return
            yield piece
            size = min(size * 2, 8 * 1024 * 1024)


class _TopLevelKeys:
    """Reads the members of a top-level JSON object one at a time from a growing text.

    ``feed`` returns the value of the key ``"schema"`` once it is reached, ``False`` when the
    text is not a JSON object or a trace's ``traceEvents`` key comes first, or ``None`` when
    more text is needed. Values before the schema key are parsed only to skip them.
    """

    def __init__(self) -> None:
        self.text = ""
        self.pos = 0  # where the next member (or the object's start) begins
        self.started = False
        self.decoder = json.JSONDecoder()

    def _skip_ws(self, i: int) -> int:
        while i < len(self.text) and self.text[i] in _WS:
            i += 1
        return i

    def feed(self, more: str, final: bool) -> object | None:
        self.text += more
        try:
            return self._scan()
        except (ValueError, IndexError):
            # A value not complete in the text read so far (or malformed JSON).
            return False if final else None
        except RecursionError:  # absurdly nested: no report is
            return False

    def _scan(self) -> object | None:
        t = self.text
        if not self.started:
            i = self._skip_ws(0)
            if i < len(t) and t[i] == "\ufeff":
                i = self._skip_ws(i + 1)
            if i >= len(t):
                return None
            if t[i] != "{":
                return False
            self.started, self.pos = True, i + 1
        while True:
            i = self._skip_ws(self.pos)
            if i >= len(t):
                return None
            if t[i] == "}" or t[i] != '"':
                return False
            key, i = scanstring(t, i + 1)
            i = self._skip_ws(i)
            if t[i] != ":":
                return False
            i = self._skip_ws(i + 1)
            if key == "traceEvents":
                return False
            value, i = self.decoder.raw_decode(t, i)
            if key == "schema":
                return value
            i = self._skip_ws(i)
            if t[i] == "}":
                return False
            if t[i] != ",":
                return False
            self.pos = i + 1


def report_schema_of(path: Path) -> object | None:
    """The top-level ``"schema"`` value of the JSON object in ``path`` (``None`` when it has
    none within the scan limit, is no JSON object, or is a trace)."""
    scanner = _TopLevelKeys()
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    read = 0
    found: object | None = None
    for piece in _open(path):
        read += len(piece)
        found = scanner.feed(decoder.decode(piece), final=False)
        if found is not None or read >= _SCAN_LIMIT_BYTES:
            break
    else:
        found = scanner.feed(decoder.decode(b"", final=True), final=True)
    return None if found is False else found


def is_report_file(path: Path) -> bool:
    """True when ``path`` is a file holding a JSON object whose top-level ``"schema"`` names a
    gpuprof report (any version: reading it then says which versions this gpuprof reads)."""
    if not path.is_file():
        return False
    try:
        schema = report_schema_of(path)
    except (OSError, EOFError, zlib.error):
        # Not ours to explain: the trace readers report unreadable and damaged files (one
        # line naming the file), and recover what they can of a trace cut short.
        return False
    return isinstance(schema, str) and schema.startswith(REPORT_SCHEMA_PREFIX)


def report_files(folder: Path) -> list[Path]:
    """The saved reports directly inside ``folder`` (``*.json``, ``*.json.gz``), sorted by
    name: a folder of runs to pool as a baseline. None for a folder of traces."""
    try:
        children = sorted(folder.iterdir())
    except OSError:
        return []
    return [c for c in children if c.name.endswith((".json", ".json.gz")) and is_report_file(c)]


def read_report(path: Path, limits: ReadLimits | None = None) -> Report:
    """Load a saved JSON report; any problem becomes one :class:`GpuprofError` naming the
    file and, for a malformed report, the JSON path of the first problem.

    A saved report is untrusted like a trace, and bounded the same way (``limits``, by
    default :class:`~gpuprof.readers.limits.ReadLimits`): its decompressed text may not
    pass ``--max-input-gb``, and since it is parsed whole, not the longest text gpuprof
    holds whole either (``GPUPROF_MAX_EVENT_MB``). A 6 MB ``.json.gz`` holding a 6 GB
    string is refused when its text passes that, before it is held.
    """
    # The readers' limits and streaming, imported here: recognizing a report stays light.
    from gpuprof.readers.limits import InputLimitError, ReadLimits
    from gpuprof.readers.textstream import text_blocks

    limits = ReadLimits() if limits is None else limits
    if path.is_dir():
        raise GpuprofError("is a folder, not a saved report", path)
    held = min(limits.max_input_bytes, limits.max_event_bytes)
    try:
        pieces: list[bytes] = []
        size = 0
        damage: list[str] = []
        for block in text_blocks(path, damage, limits=limits):
            size += len(block)
            if size > held:
                raise _too_large(path, limits)
            pieces.append(block)
        if damage:  # a report is small and read whole: a damaged one is not read in part
            raise GpuprofError(damage[0])
        raw = b"".join(pieces)
        del pieces
    except GpuprofError as exc:
        if isinstance(exc, InputLimitError):
            raise
        raise GpuprofError(exc.message if exc.message == "no such file" else f"cannot read report: {exc.message}", path) from None
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise GpuprofError(f"not a JSON report: {exc}", path) from None
    except (ValueError, RecursionError) as exc:  # 5000-digit integers, absurd nesting
        raise GpuprofError(f"not a JSON report: {str(exc) or type(exc).__name__}", path) from None
    del raw
    try:
        return report_from_dict(data)
    except ReportFormatError as exc:
        hint = "" if isinstance(data, dict) and "schema" in data else " (make one with: gpuprof analyze TRACE --format json -o FILE)"
        raise GpuprofError(f"{exc}{hint}", path) from None
    except RecursionError:
        raise GpuprofError("not a gpuprof report: nested deeper than any report is", path) from None


def _too_large(path: Path, limits: ReadLimits) -> InputLimitError:
    from gpuprof.readers.limits import EVENT_LIMIT_ENV, MB, InputLimitError

    if limits.max_input_bytes <= limits.max_event_bytes:
        return limits.input_too_large(path)
    mb = limits.max_event_bytes / MB
    return InputLimitError(
        f"holds more than {mb:g} MB of JSON text (decompressed): a saved report is read whole, and no "
        f"report gpuprof writes comes near that; if this one really is that large, raise the limit "
        f"with {EVENT_LIMIT_ENV}={int(2 * mb)}",
        path,
    )
