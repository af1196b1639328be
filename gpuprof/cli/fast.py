"""``gpuprof analyze`` without typer, for command lines of plain options.

Importing typer and building its app (typer brings pydantic) costs about as much as
analyzing a 1 MB trace. A command line that only names traces and gives the analyze
command's own options in their plain forms is parsed here, and then runs the very same
:func:`gpuprof.cli.reporting.analyze_command` as the typer command, inside the same error
handling (:func:`gpuprof.cli.main`). Anything else, ``--help``, shell completion, an
unknown or repeated-looking option, a value typer would convert or refuse (``--jobs 0``,
``--jobs +2``, ``--color AUTO``, an empty path), returns :data:`NOT_HANDLED` and typer
parses the command line as before: its messages and exit codes stay typer's, because no
command line that typer would refuse, or read differently, is taken here.

What typer does around a command is done here the same way: Ctrl-C is exit 130, an
``EOFError`` prints an empty line and exits 130 (typer's Abort), a broken pipe exits 1
with the streams quietened (``tests/cli/test_cli_fast.py`` runs both paths side by side).
"""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

# Returned when the command line is typer's to parse.
NOT_HANDLED: Any = object()

# Option name -> parameter, as the analyze command declares them (gpuprof/cli/analyze.py).
_OPTIONS = {
    "--format": "fmt",
    "-f": "fmt",
    "--output": "output",
    "-o": "output",
    "--steps": "steps",
    "--jobs": "jobs",
    "-j": "jobs",
    "--scheduler": "scheduler",
    "--max-input-gb": "max_input_gb",
    "--color": "color",
}
# Values taken only in forms every converter reads alike (no sign, no leading zero, no
# exponent, no "1." or ".5"); typer converts the rest.
_JOBS = re.compile(r"[1-9][0-9]{0,5}\Z")
_DECIMAL = re.compile(r"[0-9]{1,9}(?:\.[0-9]{1,9})?\Z")
_COLORS = ("auto", "always", "never")
MIN_INPUT_GB = 0.001  # the --max-input-gb option's min= (gpuprof/cli/analyze.py)


def parse(argv: Sequence[str]) -> dict[str, Any] | None:
    """The analyze command's parameters from ``argv`` (the words after ``analyze``), or
    ``None`` when the command line is not plain enough to be sure typer reads it so."""
    values: dict[str, str] = {}
    paths: list[str] = []
    words = list(argv)
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word == "--":
            paths.extend(words[i:])
            break
        if not word.startswith("-") or word == "-":
            paths.append(word)
            continue
        name, sep, value = word.partition("=") if word.startswith("--") else (word[:2], "", word[2:])
        param = _OPTIONS.get(name)
        if param is None:
            return None  # --help, -h, an unknown option, clustered short flags: typer's
        if not sep and not value:
            if i == len(words):
                return None  # the value is missing: typer says so
            value = words[i]
            i += 1
        if value.startswith("-") and value != "-":  # "-o -": stdout
            return None  # a value that looks like an option: leave the reading to typer
        values[param] = value  # click keeps the last of a repeated option, as here
    if not paths or any(p == "" or p.startswith("-") for p in paths):
        return None
    return _converted(values, paths)


def _converted(values: dict[str, str], paths: list[str]) -> dict[str, Any] | None:
    """The values as typer converts them, or ``None`` where typer might convert them
    otherwise or refuse them."""
    out: dict[str, Any] = {"paths": [Path(p) for p in paths]}
    for param in ("fmt", "steps", "scheduler"):
        if param in values:
            out[param] = values[param]
    if "output" in values:
        if values["output"] == "":
            return None
        out["output"] = Path(values["output"])
    # typer refuses a path that exists but cannot be read ("Path 'x' is not readable."),
    # the output file included.
    if any(os.path.exists(p) and not os.access(p, os.R_OK) for p in [*paths, values.get("output", "")]):
        return None
    if "jobs" in values:
        if not _JOBS.match(values["jobs"]):
            return None
        out["jobs"] = int(values["jobs"])
    if "max_input_gb" in values:
        if not _DECIMAL.match(values["max_input_gb"]) or float(values["max_input_gb"]) < MIN_INPUT_GB:
            return None
        out["max_input_gb"] = float(values["max_input_gb"])
    if "color" in values:
        if values["color"] not in _COLORS:
            return None
        from gpuprof.cli.console import ColorMode

        out["color"] = ColorMode(values["color"])
    return out


def analyze(argv: Sequence[str]) -> Any:
    """Run ``gpuprof ARGV`` when it is a plain analyze command line: its exit code (``None``
    for 0), else :data:`NOT_HANDLED`."""
    if argv[:1] != ["analyze"] or os.environ.get("_GPUPROF_COMPLETE"):
        return NOT_HANDLED
    params = parse(argv[1:])
    if params is None:
        return NOT_HANDLED
    with paused_gc():
        return _run(params)


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic GC off for the command, on again after it, error or not.

    Imports make most of a small analysis, and every object they create survives: the GC
    ran ~50 gen-0 collections during them for nothing (a 1 MB analyze: 0.181 -> 0.171 s
    of CPU, best of 9, with the GC off). The analysis itself leaves ~400 objects of cyclic
    garbage whatever the job's size (1 MB to 200 MB, 1 to 8 ranks, measured with
    ``gc.collect()`` after it), so memory does not grow for the GC being off."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _run(params: dict[str, Any]) -> Any:
    from gpuprof.cli.reporting import analyze_command

    try:
        analyze_command(**params)
    except EOFError:  # as typer does around a command: an empty line, then Abort (130)
        print(file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise
        sys.stdout = _Quiet(sys.stdout)  # type: ignore[assignment]
        sys.stderr = _Quiet(sys.stderr)  # type: ignore[assignment]
        sys.exit(1)
    return None


class _Quiet:
    """A stream whose flush ignores a broken pipe (the reader is gone), as click's
    ``PacifyFlushWrapper`` does, so that the interpreter's last flush stays silent."""

    def __init__(self, stream: TextIO | None) -> None:
        self.wrapped = stream

    def flush(self) -> None:
        try:
            if self.wrapped is not None:
                self.wrapped.flush()
        except OSError as exc:
            if exc.errno != errno.EPIPE:
                raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)
