"""``gpuprof analyze``: saved traces in, report out."""

from __future__ import annotations

from pathlib import Path
from typing import Any, List, Optional

import typer

from gpuprof.cli.console import ColorMode, ReadProgress, color_option, format_names

# The helpers other commands import from here live in gpuprof.cli.reporting (no typer).
from gpuprof.cli.reporting import (  # noqa: F401
    analyze_command,
    choose_format,
    emit,
    terminal_width,
    text_style,
    warn_skipped,
    write_output,
)
from gpuprof.cli.command import input_path
from gpuprof.cli.root import app

StderrProgress = ReadProgress  # the name the other commands import; use it as a context manager


def max_input_gb_option() -> Any:
    """``--max-input-gb``, shared by the commands that read traces."""
    return typer.Option(
        None,
        "--max-input-gb",
        min=0.001,
        metavar="GB",
        help="Refuse a trace file whose JSON (decompressed) passes GB gigabytes, a guard against "
        "decompression bombs. [default: 32, several times the largest real per-rank traces]",
        show_default=False,
    )


def strict_option() -> Any:
    """``--strict``, shared by the commands that read folders of traces."""
    return typer.Option(
        False,
        "--strict",
        help="Fail (exit 2) when a trace found in a folder cannot be read, instead of analyzing the "
        "other ranks without it (with a warning naming the file).",
    )


def jobs_option() -> Any:
    """``--jobs``, shared by the commands that analyze traces."""
    return typer.Option(1, "--jobs", "-j", min=1, metavar="N", help="Ranks to read and analyze in parallel (processes).")


def force_option() -> Any:
    """``--force``, shared by the commands that analyze traces."""
    return typer.Option(
        False,
        "--force",
        help="Analyze the inputs as one job even when they look like traces of different jobs (world "
        "size, GPU model, trace format or communication disagree); the report says so.",
    )


@app.command()
def analyze(
    paths: List[Path] = typer.Argument(
        ...,
        parser=input_path,
        metavar="PATH...",
        help="Kineto trace files (.json, .json.gz), folders of per-rank traces, gpuprof run "
        "session folders, op-level Chrome trace timelines, or a report saved with --format json "
        "(rendered again). A named pipe (FIFO) is read once, as a stream: gpuprof waits for its "
        "writer, as cat does.",
        show_default=False,
    ),
    fmt: Optional[str] = typer.Option(
        None,
        "--format",
        "-f",
        metavar="FORMAT",
        autocompletion=format_names,
        help="Report format: text, json, markdown or html. Default: from -o's extension, else text.",
    ),
    output: Optional[Path] = typer.Option(
        None, "--output", "-o", metavar="FILE", help="Write the report to FILE instead of stdout (- for stdout)."
    ),
    steps: Optional[str] = typer.Option(
        None, "--steps", metavar="STEPS", help="Steps to analyze, by step number: N, N:M, N: or :M (inclusive). Default: all complete steps."
    ),
    jobs: int = jobs_option(),
    scheduler: Optional[str] = typer.Option(
        None, "--scheduler", metavar="ADDRESS", help="Run per-rank work on a Dask distributed scheduler at ADDRESS (needs the dask extra: pip install 'gpuprof\\[dask]')."
    ),
    max_input_gb: Optional[float] = max_input_gb_option(),
    strict: bool = strict_option(),
    force: bool = force_option(),
    color: ColorMode = color_option(),
    brief: bool = typer.Option(
        False, "--brief", help="Only the headline and the ranked recommendations' titles and savings (text, markdown)."
    ),
    top: int | None = typer.Option(
        None, "--top", min=1, metavar="N", help="Show only the first N recommendations (text, markdown, html)."
    ),
) -> None:
    """Analyze saved traces: where each rank's GPU time went, and what to change.

    Every microsecond of each rank's window (the profiled steps, or first to last device
    activity) is either compute or lost time attributed to one cause: pipeline_bubble,
    communication, straggler, memory, dataloader, sync, host or other.
    """
    analyze_command(paths, fmt, output, steps, jobs, scheduler, max_input_gb, color, strict=strict, brief=brief, top=top, force=force)
