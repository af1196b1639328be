"""Terminal conventions every command shares: colour, wrapping, progress on stderr.

- Colour: ``--color auto|always|never``. ``auto`` lets rich decide from the stream: colour
  on a terminal, none when ``NO_COLOR`` is set, ``TERM=dumb`` or the output is a pipe or a
  file (``FORCE_COLOR`` forces it, as rich reads it). ``always`` and ``never`` win over the
  environment, as the NO_COLOR convention asks of an explicit option.
- Wrapping: text is wrapped to the terminal's width only on a terminal; in a CI log or a
  file one finding stays on one line, whatever its length.
- Progress: reading many traces shows one rich progress bar on stderr on a terminal (files
  read, ranks analyzed, time left), and on a pipe or in a CI log at most a line every 10 s,
  and nothing for work that ends within 5 s. stdout carries only the report.
"""

from __future__ import annotations

import os
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable, TextIO

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

# rich and typer are imported where they are used: rich only for a stream that may be a
# terminal (see _may_be_terminal), typer only to declare options. A report piped or
# written to a file never pays their imports (~0.04 s).

from gpuprof.util.safetext import one_line


class ColorMode(str, Enum):
    auto = "auto"
    always = "always"
    never = "never"


def color_option() -> Any:
    import typer

    return typer.Option(
        ColorMode.auto,
        "--color",
        metavar="[auto|always|never]",
        case_sensitive=False,
        help="Colour in the text report: auto (on a terminal, unless NO_COLOR is set or TERM=dumb), always or never.",
    )


def format_names(incomplete: str = "") -> list[str]:
    """Report formats, for shell completion of ``--format``."""
    from gpuprof import render

    return [n for n in render.names() if n.startswith(incomplete)]


def cause_names(incomplete: str = "") -> list[str]:
    """``CAUSE=`` for each cause, for shell completion of ``--max-lost-pct``."""
    from gpuprof.model.report import CAUSES

    return [f"{c.value}=" for c in CAUSES if c.value.startswith(incomplete)]


def _may_be_terminal(stream: TextIO | None) -> bool:
    """False where rich would say "no terminal" for sure: the stream is no TTY and neither
    of the variables that make rich call a stream a terminal (``FORCE_COLOR``,
    ``TTY_COMPATIBLE``) is set. Then rich is not imported at all; otherwise it decides."""
    if "FORCE_COLOR" in os.environ or "TTY_COMPATIBLE" in os.environ:
        return True
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty is not None and isatty())
    except ValueError:  # closed
        return False


def use_color(mode: ColorMode, stream: TextIO | None = None) -> bool:
    """Whether to write ANSI colour to ``stream`` (stdout by default)."""
    if mode is ColorMode.never:
        return False
    if mode is ColorMode.always:
        return True
    out = stream or sys.stdout
    if not _may_be_terminal(out):
        return False
    from rich.console import Console

    console = Console(file=out)
    return console.is_terminal and not console.no_color and not console.is_dumb_terminal


def is_terminal(stream: TextIO | None = None) -> bool:
    """A terminal a person reads (rich's view: FORCE_COLOR and TERM=dumb count)."""
    out = stream or sys.stdout
    if not _may_be_terminal(out):
        return False
    from rich.console import Console

    console = Console(file=out)
    return console.is_terminal and not console.is_dumb_terminal


def terminal_width(stream: TextIO | None = None) -> int:
    """Columns of the terminal ``stream`` (stdout by default) is on, within 60-160; 100 off
    a terminal."""
    try:
        fd = (stream or sys.stdout).fileno()
        return max(60, min(os.get_terminal_size(fd).columns, 160))
    except (OSError, ValueError, AttributeError):
        return 100


def wrap_line(text: str, width: int, prefix: str = "gpuprof: ") -> str:
    """``prefix + text`` broken on word boundaries to ``width`` columns, later lines
    hanging under the text (never inside a word or a path)."""
    return textwrap.fill(
        text, width=max(20, width), initial_indent=prefix, subsequent_indent=" " * len(prefix),
        break_long_words=False, break_on_hyphens=False,
    )


def say(text: object, stream: TextIO | None = None, prefix: str = "gpuprof: ") -> None:
    """One of gpuprof's own lines on stderr: wrapped with a hanging indent on a terminal,
    one unbroken line anywhere else (a CI log keeps each message on one line).

    Every control character of ``text`` (a file name's escape sequence, a newline that
    would forge a second line) is shown escaped (:func:`gpuprof.util.safetext.one_line`), and a
    closed or broken stderr says nothing rather than fail (docs/reliability.md)."""
    out = stream if stream is not None else sys.stderr
    if out is None:  # started with stderr closed: print() would write to stdout instead
        return
    safe = one_line(text)
    try:
        line = wrap_line(safe, terminal_width(out), prefix) if is_terminal(out) else prefix + safe
        out.write(line + "\n")
        out.flush()
    except (OSError, ValueError):
        pass


class ReadProgress:
    """The pipeline's progress callback for a command (a context manager around the work).

    Called as ``progress(message, done=, total=, ranks=)``: ``done`` of ``total`` trace
    files read, ``ranks`` summarized so far; a message without counts names the next stage.
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        delay_s: float = 5.0,
        every_s: float = 10.0,
        live: bool | None = None,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.start = clock()
        self.delay_s = delay_s
        self.every_s = every_s
        self.live = is_terminal(self.stream) if live is None else live
        self._bar: Progress | None = None
        self._task: TaskID | None = None
        self._last_line: float | None = None
        self._pending: str | None = None

    def __enter__(self) -> "ReadProgress":
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def __call__(self, message: str, done: int | None = None, total: int | None = None, ranks: int | None = None) -> None:
        if self.live:
            self._update_bar(message, done, total, ranks)
        else:
            self._line(message, done, total, ranks)

    # -- a terminal: one bar ------------------------------------------------------------------

    def _update_bar(self, message: str, done: int | None, total: int | None, ranks: int | None) -> None:
        if self._bar is None:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total} files"),
                TextColumn("{task.fields[ranks]} ranks"),
                TimeRemainingColumn(),
                TimeElapsedColumn(),
                console=Console(file=self.stream),
                transient=True,
            )
            self._bar.start()
            self._task = self._bar.add_task("Reading traces", total=total or None, ranks=0)
        assert self._task is not None
        if ranks is not None:
            self._bar.update(self._task, ranks=ranks)
        if total is not None:
            self._bar.update(self._task, total=total, completed=done or 0)
        else:
            self._bar.update(self._task, description=one_line(message[:1].upper() + message[1:]))

    # -- a pipe or a file: a line now and then ----------------------------------------------

    def _line(self, message: str, done: int | None, total: int | None, ranks: int | None) -> None:
        now = self.clock()
        text = message
        if total:
            text = f"read {done or 0}/{total} files" + (f", {ranks} ranks" if ranks is not None else "")
            elapsed = now - self.start
            if done and done < total and elapsed > 0:
                left = elapsed * (total - done) / done
                text += f", about {_fmt_left(left)} left"
        if now - self.start < self.delay_s:
            self._pending = text
            return
        final = total is None or done == total
        if self._last_line is not None and now - self._last_line < self.every_s and not (final and total is None):
            self._pending = text
            return
        try:
            self.stream.write(f"gpuprof: {one_line(text)}\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass  # progress is best effort
        self._last_line = now
        self._pending = None


def _fmt_left(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


@contextmanager
def working(what: str, stream: TextIO | None = None) -> Iterator[None]:
    """A spinner with the elapsed time on stderr while ``what`` runs, on a terminal only
    (work whose length is not known in advance: no bar to fill)."""
    out = stream if stream is not None else sys.stderr
    if not is_terminal(out):
        yield
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    console = Console(file=out)
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console, transient=True) as bar:
        bar.add_task(what[:1].upper() + what[1:], total=None)
        yield
