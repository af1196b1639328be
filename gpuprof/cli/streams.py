"""gpuprof's own standard streams: the result on stdout, one-line messages on stderr.

The rules (docs/reliability.md, "Standard streams"):

- **stdout carries the result** (a report, a diff, the schema, the list of checks). When it
  cannot take it -- closed (``>&-``), a full disk (``>/dev/full``), an I/O error -- that is
  :class:`~gpuprof.errors.GpuprofError`: one line on stderr, exit 2, ``cannot write the
  report to standard output: No space left on device``. When its reader went away (``|
  head``, ``| true``) gpuprof stops writing and exits 141 (128 + SIGPIPE), as any program
  that a closed pipe ends does; ``gpuprof check`` exits with its verdict instead, since the
  verdict, not the listing, is its result (:class:`~gpuprof.util.atomic.OutputClosed`).
- **stderr carries messages, best effort.** Closed or broken, nothing is said there and
  nothing else changes: not the exit code, not the report, not ``gpuprof run``'s job.
  Every message is one line (:func:`gpuprof.cli.console.say`, wrapped on a terminal), passed
  through :func:`gpuprof.util.safetext.one_line`, so that no file name or trace string can write
  escape sequences or forge a second line.
- **File descriptors 0-2 closed at start** get ``/dev/null`` (:func:`protect_std_fds`): a
  file gpuprof opens then never takes descriptor 1 (where ``print`` or the job of ``gpuprof
  run`` would write into it). The job gets them closed again, as it would have without gpuprof.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, TextIO

from gpuprof.errors import GpuprofError
from gpuprof.util.atomic import OutputClosed, silence_fd, stdout_error
from gpuprof.util.safetext import visible_text

SIGPIPE_EXIT = 141  # 128 + SIGPIPE: how a shell reports a program a closed pipe ended

CLOSED_AT_START: frozenset[int] = frozenset()
"""Which of the descriptors 0, 1, 2 were closed when gpuprof started (see :func:`protect_std_fds`)."""


def protect_std_fds() -> frozenset[int]:
    """Give each closed descriptor 0-2 ``/dev/null``; returns (and remembers) which were closed."""
    global CLOSED_AT_START
    closed: set[int] = set()
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            try:
                null = os.open(os.devnull, os.O_RDWR)
            except OSError:
                continue
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            closed.add(fd)
    CLOSED_AT_START = CLOSED_AT_START | frozenset(closed)
    return frozenset(closed)


class BestEffort:
    """A text stream whose writes never fail: for stderr, where gpuprof's messages go.

    Everything else (``isatty``, ``encoding``, ``fileno``...) is the wrapped stream's, so
    rich sees a terminal as a terminal. After the first failure nothing more is written.
    """

    def __init__(self, stream: TextIO | None) -> None:
        self.stream = stream
        self.broken = stream is None

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                self.stream.write(text)  # type: ignore[union-attr]
            except (OSError, ValueError):
                self._break()
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self.stream.flush()  # type: ignore[union-attr]
            except (OSError, ValueError):
                self._break()

    def _break(self) -> None:
        self.broken = True
        silence_fd(self.stream)  # what is still buffered is dropped quietly at exit

    def isatty(self) -> bool:
        if self.broken:
            return False
        try:
            return bool(self.stream.isatty())  # type: ignore[union-attr]
        except (OSError, ValueError):
            return False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


@contextlib.contextmanager
def guarded_streams() -> Any:
    """For the length of a command: closed descriptors covered, stderr best effort."""
    protect_std_fds()
    saved = sys.stderr
    if not isinstance(saved, BestEffort):
        sys.stderr = BestEffort(saved)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stderr = saved


def say_text(text: str, keep_color: bool = False) -> None:
    """A document of many lines (a report) on stderr; line breaks kept; never fails.
    (One-line messages: :func:`gpuprof.cli.console.say`.)"""
    stream = sys.stderr
    if stream is None:
        return
    try:
        text = text if text.endswith("\n") else text + "\n"
        stream.write(printable(visible_text(text, keep_color=keep_color), stream))
        stream.flush()
    except (OSError, ValueError):
        pass


def write_stdout(text: str, what: str = "the report", keep_color: bool = False) -> None:
    """Write a command's result on stdout (see the module docstring for every failure).

    Raises :class:`GpuprofError` when stdout is closed or fails, :class:`OutputClosed` when
    its reader went away.
    """
    stream = sys.stdout
    if stream is None:
        raise GpuprofError(f"cannot write {what} to standard output: it is closed")
    text = printable(visible_text(text, keep_color=keep_color), stream)
    try:
        stream.write(text)
        stream.flush()
    except (OSError, ValueError) as exc:
        raise stdout_error(exc, stream, what) from None


# Characters the reports use that a legacy (non-UTF-8) terminal may not have, and what they
# become there: "µs" is written "us" rather than failing with UnicodeEncodeError.
_ASCII_STAND_INS = str.maketrans(
    {"µ": "u", "×": "x", "·": "-", "—": "-", "→": "->", "…": "...", "≤": "<=", "≥": ">="}
)


def printable(text: str, stream: object) -> str:
    """``text`` as ``stream``'s encoding can carry it."""
    encoding = getattr(stream, "encoding", None) or "utf-8"
    try:
        text.encode(encoding)
        return text
    except (UnicodeEncodeError, LookupError):
        return text.translate(_ASCII_STAND_INS).encode(encoding, errors="replace").decode(encoding)


__all__ = [
    "CLOSED_AT_START",
    "SIGPIPE_EXIT",
    "BestEffort",
    "OutputClosed",
    "guarded_streams",
    "printable",
    "protect_std_fds",
    "say_text",
    "write_stdout",
]
