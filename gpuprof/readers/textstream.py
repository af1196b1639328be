"""Trace file -> JSON text, gunzipped when it is gzip (told by content, not by name).

Two ways to get the text: :func:`text_blocks` hands it out a block at a time, so that a
trace of GBs is never held whole (see :func:`gpuprof.readers.jsonio.decode_trace`);
:func:`read_bytes` returns it whole, for the rare trace that must be decoded at once (a
cut-off file being recovered, a trace written on one line). Both share one gunzip loop,
so a corrupt or cut-off gzip stream reads the same either way: the text that came before
the damage plus a warning, or :class:`BadTraceError` when nothing came before it.
"""

from __future__ import annotations

import io
import os
import zlib
from collections.abc import Generator, Iterator
from pathlib import Path

from gpuprof.errors import BadTraceError

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
    path: Path, warnings: list[str], block_bytes: int | None = None
) -> Generator[bytes, None, None]:
    """The JSON text of ``path`` in blocks of about ``block_bytes`` (default :data:`BLOCK_BYTES`).

    Raises :class:`BadTraceError` for a file that cannot be read, is empty, or is gzip
    with no readable data. Damage to a gzip stream after some data ends the blocks early
    and appends a warning to ``warnings`` (check it once the blocks are exhausted).
    """
    n = BLOCK_BYTES if block_bytes is None else block_bytes
    with _open(path) as fh:
        head = _read(fh, max(n, 2), path)
        if not head:
            raise BadTraceError("file is empty", path)
        if head[:2] != GZIP_MAGIC:
            while head:
                yield head
                head = _read(fh, n, path)
            return

        def compressed() -> Iterator[bytes]:
            yield head
            while more := _read(fh, _IN_BYTES, path):
                yield more

        yield from gunzipped(compressed(), path, warnings)


def gunzipped(src: Iterator[bytes | memoryview], path: Path, warnings: list[str]) -> Iterator[bytes]:
    """Decompressed pieces of the gzip data in ``src`` (concatenated members as one text).

    Trailing bytes after the last member that do not start another are ignored, as gzip(1)
    does.
    """
    produced = 0
    data: bytes | memoryview = b""  # compressed bytes not yet fed to zlib
    while True:  # one gzip member per turn
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
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
        except zlib.error as exc:
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
            break
    if not produced:
        raise BadTraceError("gzip file holds no data", path)


def read_bytes(path: Path) -> tuple[bytearray, list[str]]:
    """The whole JSON text of ``path`` plus warnings (what was recovered of a damaged gzip).

    A mutable buffer, so that pieces of a large trace can be decoded in place (see
    :func:`gpuprof.readers.chunks.later_pieces`).
    """
    with _open(path) as fh:
        try:
            data = bytearray(os.fstat(fh.fileno()).st_size)
            n = fh.readinto(data)
        except OSError as exc:
            raise BadTraceError(f"cannot read: {exc.strerror or exc}", path) from None
        if n < len(data):  # the file shrank while being read
            del data[n:]
    if not data:
        raise BadTraceError("file is empty", path)
    if data[:2] != GZIP_MAGIC:
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


def _gunzip(data: bytearray, path: Path) -> tuple[bytearray, list[str]]:
    # ISIZE (the last 4 bytes) is the size of the last member mod 2**32; of a cut-off file
    # it is noise, hence the plausibility bound.
    isize = int.from_bytes(data[-4:], "little")
    sink = _Sink(isize if 0 < isize <= 200 * len(data) else 8 * len(data))
    warnings: list[str] = []
    view = memoryview(data)
    pieces = (view[i : i + _IN_BYTES] for i in range(0, len(data), _IN_BYTES))
    for out in gunzipped(pieces, path, warnings):
        sink.put(out)
    return sink.result(), warnings
