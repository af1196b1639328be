"""An append-only log of JSON lines that several processes may write at once.

``gpuprof check --history`` appends one line per run, and CI jobs of one project may run
at the same moment on one shared file. Each line reaches the file whole and alone:

- the file is opened with ``O_APPEND``, so every write lands at the file's end, wherever
  another process has moved it;
- the whole line is handed to the kernel in one ``write`` (a short write is finished
  before the lock is let go), under an exclusive ``flock`` on the file, so that two lines
  never interleave even where a write may be split (network file systems lock too);
- a last line left without its newline (a writer killed mid-line outside gpuprof, a full
  disk) is ended first, so the new line never glues onto it.

Reading never takes the lock: a reader sees whole lines, or a last line without newline,
which :func:`read_lines` leaves out.
"""

from __future__ import annotations

import os
from pathlib import Path

from gpuprof.errors import GpuprofError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: O_APPEND alone
    fcntl = None  # type: ignore[assignment]

MAX_LOG_BYTES = 1 << 30  # a history past this is not read (a wrong file, most likely)


def append_line(path: Path, line: str) -> None:
    """Append ``line`` (no newline inside) and a newline to ``path``, created if absent.

    A failure is a :class:`GpuprofError` naming the file."""
    if "\n" in line or "\r" in line:
        raise ValueError("a log line cannot hold a line break")
    data = (line + "\n").encode("utf-8")
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
    except OSError as exc:
        raise GpuprofError(f"cannot open for appending: {exc.strerror or exc}", path) from None
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size > 0 and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data  # end a torn last line first
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    except OSError as exc:
        raise GpuprofError(f"cannot append: {exc.strerror or exc}", path) from None
    finally:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            except OSError:
                pass
        os.close(fd)


def read_lines(path: Path) -> list[str]:
    """The complete lines of ``path`` (a last line without its newline is being written, or
    was torn: left out; :func:`read_tail` has it). A missing file has no lines. Too large a
    file, or one that cannot be read or decoded, is a :class:`GpuprofError` naming it."""
    return read_tail(path)[0]


def read_tail(path: Path) -> tuple[list[str], str]:
    """The complete lines of ``path`` and what follows the last newline ("" when the file
    ends with one)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return [], ""
    except OSError as exc:
        raise GpuprofError(f"cannot read: {exc.strerror or exc}", path) from None
    if size > MAX_LOG_BYTES:
        raise GpuprofError(f"is {size / 1e9:.1f} GB, more than the {MAX_LOG_BYTES / 1e9:.1f} GB a history may hold", path)
    try:
        raw = path.read_bytes()
    except IsADirectoryError:
        raise GpuprofError("is a folder, not a history file", path) from None
    except OSError as exc:
        raise GpuprofError(f"cannot read: {exc.strerror or exc}", path) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise GpuprofError(f"is not UTF-8 text (byte {exc.start}): not a gpuprof history", path) from None
    lines = text.split("\n")
    return lines[:-1], lines[-1]  # the part after the last newline is incomplete (or empty)
