"""Trace file -> JSON text, gunzipped when it is gzip (told by content, not by name).

:func:`text_blocks` hands the text out a block at a time, so that a trace of GBs is never
held whole (see :func:`gpuprof.readers.jsonio.decode_trace`), and stops at the
``--max-input-gb`` limit. A corrupt or cut-off gzip stream gives the text that came
before the damage plus a warning, or :class:`BadTraceError` when nothing came before it.
"""

from __future__ import annotations

import importlib
import io
import os
import zlib
from collections.abc import Generator, Iterator
from pathlib import Path
from types import ModuleType

from gpuprof.errors import BadTraceError
from gpuprof.readers.limits import ReadLimits

GZIP_MAGIC = b"\x1f\x8b"
_IN_BYTES = 1 << 20  # compressed bytes fed to zlib at a time
_OUT_BYTES = 1 << 23  # most decompressed bytes zlib returns at a time
# Bytes of a plain file read at a time when streaming: large enough that per-read costs
# vanish, small next to the columns a reader keeps (about a third of the JSON size).
BLOCK_BYTES = 8 << 20


def _open(path: Path) -> io.BufferedReader:
    try:
        return path.open("rb")
    except FileNotFoundError:
        raise BadTraceError("no such file", path) from None
    except IsADirectoryError:
        raise BadTraceError("is a directory, not a trace file", path) from None
    except OSError as exc:
        raise BadTraceError(f"cannot read: {exc.strerror or exc}", path) from None


def _read(fh: io.BufferedReader, n: int, path: Path) -> bytes:
    try:
        return fh.read(n)
    except OSError as exc:
        raise BadTraceError(f"cannot read: {exc.strerror or exc}", path) from None


def text_blocks(
    path: Path, warnings: list[str], block_bytes: int | None = None, limits: ReadLimits | None = None
) -> Generator[bytes, None, None]:
    """The JSON text of ``path`` in blocks of about ``block_bytes`` (default :data:`BLOCK_BYTES`).

    Raises :class:`BadTraceError` for a file that cannot be read, is empty, or is gzip
    with no readable data, and :class:`InputLimitError` as soon as the text passes
    ``limits.max_input_bytes`` (a plain file: before reading it). Damage to a gzip stream
    after some data ends the blocks early and appends a warning to ``warnings`` (check it
    once the blocks are exhausted).
    """
    n = BLOCK_BYTES if block_bytes is None else block_bytes
    limit = None if limits is None else limits.max_input_bytes
    with _open(path) as fh:
        head = _read(fh, max(n, 2), path)
        if not head:
            raise BadTraceError("file is empty", path)
        if head[:2] != GZIP_MAGIC:
            if limits is not None and limit is not None and _size(fh) > limit:
                raise limits.input_too_large(path)
            while head:
                yield head
                head = _read(fh, n, path)
            return

        def compressed() -> Iterator[bytes]:
            yield head
            while more := _read(fh, _IN_BYTES, path):
                yield more

        total = 0
        for out in gunzipped(compressed(), path, warnings):
            total += len(out)
            if limits is not None and limit is not None and total > limit:
                raise limits.input_too_large(path)
            yield out


def _size(fh: io.BufferedReader) -> int:
    try:
        return os.fstat(fh.fileno()).st_size
    except OSError:
        return 0


def inflate_module() -> ModuleType:
    """The zlib-compatible module that inflates gzip traces: zlib-ng's (``zlib_ng``, a
    dependency: 2.3x the standard library's speed on the real traces, the same
    ``decompressobj`` API, errors and messages), else the standard library's ``zlib`` where
    its wheel is missing. Imported on the first gzip file only (a plain trace never pays
    its import)."""
    global _inflate
    if _inflate is None:
        try:
            _inflate = importlib.import_module("zlib_ng.zlib_ng")
        except ImportError:
            _inflate = zlib
    return _inflate


_inflate: ModuleType | None = None


def gunzipped(src: Iterator[bytes | memoryview], path: Path, warnings: list[str]) -> Iterator[bytes]:
    """Decompressed pieces of the gzip data in ``src`` (concatenated members as one text).

    Trailing bytes after the last member that do not start another are ignored, as gzip(1)
    does, with a warning unless they are zeros (padding).
    """
    z = inflate_module()
    produced = 0
    data: bytes | memoryview = b""  # compressed bytes not yet fed to zlib
    while True:  # one gzip member per turn
        d = z.decompressobj(16 + z.MAX_WBITS)
        try:
            # Fed in pieces so that a corrupt or cut tail still leaves the good prefix.
            while not d.eof:
                if not data:
                    data = next(src, b"")
                    if not data:
                        break
                out = d.decompress(data, _OUT_BYTES)
                data = d.unused_data if d.eof else d.unconsumed_tail
                if out:
                    produced += len(out)
                    yield out
            out = d.flush()
            if out:
                produced += len(out)
                yield out
        except z.error as exc:
            if not produced:
                raise BadTraceError(f"not a valid gzip file ({exc})", path) from None
            warnings.append(f"gzip data is corrupt after {produced} bytes ({exc}); read what came before")
            return
        if not d.eof:
            if not produced:
                raise BadTraceError("gzip file is cut off before any data", path)
            warnings.append(
                "gzip file is cut off (the run may have been killed while writing); read what was complete"
            )
            return
        while len(data) < 2:  # enough to tell whether another member follows
            more = next(src, b"")
            if not more:
                break
            data = bytes(data) + bytes(more)
        if data[:2] != GZIP_MAGIC:
            if bytes(data).strip(b"\0"):  # zero padding (tape blocks) is no news; other bytes are
                warnings.append("bytes after the end of the gzip data were ignored (not part of the trace)")
            break
    if not produced:
        raise BadTraceError("gzip file holds no data", path)
