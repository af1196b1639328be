"""``gpuprof diff``: what got better or worse between two runs."""

from __future__ import annotations

from pathlib import Path

import typer

from gpuprof.cli.analyze import (
    choose_format,
    emit,
    force_option,
    jobs_option,
    max_input_gb_option,
    strict_option,
    text_style,
)
from gpuprof.cli.check import load_or_analyze
from gpuprof.cli.console import ColorMode, color_option, format_names
from gpuprof.cli.outputs import check_outputs
from gpuprof.cli.root import app
from gpuprof.util.atomic import is_stdout


@app.command()
def diff(
    base: Path = typer.Argument(
        ..., metavar="BASE", help="The earlier run: a saved JSON report, a trace, a folder or a session folder.", show_default=False
    ),
    current: Path = typer.Argument(
        ..., metavar="CURRENT", help="The run to compare with it (same kinds of input).", show_default=False
    ),
    fmt: str | None = typer.Option(
        None,
        "--format",
        "-f",
        metavar="FORMAT",
        autocompletion=format_names,
        help="text, json, markdown or html. Default: from -o's extension, else text.",
    ),
    output: Path | None = typer.Option(
        None, "--output", "-o", metavar="FILE", help="Write to FILE instead of stdout (- for stdout); .json, .md, .html or .txt pick the format."
    ),
    steps: str | None = typer.Option(None, "--steps", metavar="STEPS", help="Steps to analyze in traces: N, N:M, N: or :M."),
    max_input_gb: float | None = max_input_gb_option(),
    strict: bool = strict_option(),
    jobs: int = jobs_option(),
    force: bool = force_option(),
    color: ColorMode = color_option(),
    fail_on_worse: bool = typer.Option(
        False, "--fail-on-worse", help="Exit 1 when CURRENT is worse overall than BASE (for CI; the diff is written first)."
    ),
    min_effect_pct: float | None = typer.Option(
        None, "--min-effect-pct", help="The step verdict's floor, as for `gpuprof check` (%, finite, >= 0). [default: 5]"
    ),
    confidence: float | None = typer.Option(
        None, "--confidence", metavar="PCT", help="The step verdict's interval level, as for `gpuprof check`. [default: 99]"
    ),
) -> None:
    """What got better or worse between two runs: better or worse overall first (the step
    verdict of `gpuprof check` when it decides, else the mean step time, else the compute
    share), the verdict with its interval and the causes whose time per step moved, then
    compute and each cause's share, job-wide and per rank (in percentage points).

    Exit codes: 0 the diff was made (1 with --fail-on-worse when CURRENT is worse overall),
    2 bad usage or unreadable input."""
    from gpuprof.ci.diff import diff_reports
    from gpuprof.ci.diff_output import diff_html, diff_json, diff_markdown, diff_text
    from gpuprof.ci.verdict import GateSettings
    from gpuprof.cli.check_config import settings_from_options

    if is_stdout(output):
        output = None
    chosen = choose_format(fmt, output)
    check_outputs([("BASE", base), ("CURRENT", current)], [("-o", output)])
    given = settings_from_options(min_effect_pct=min_effect_pct, confidence_pct=confidence)  # validated as check's
    gate = GateSettings(
        min_effect_pct=GateSettings.min_effect_pct if given.min_effect_pct is None else given.min_effect_pct,
        confidence_pct=GateSettings.confidence_pct if given.confidence_pct is None else given.confidence_pct,
    )
    b = load_or_analyze([base], steps, max_input_gb, strict, jobs, force)
    c = load_or_analyze([current], steps, max_input_gb, strict, jobs, force)
    d = diff_reports(b, c, settings=gate)
    if chosen == "json":
        text = diff_json(d, b.inputs, c.inputs)
    elif chosen == "markdown":
        text = diff_markdown(d)
    elif chosen == "html":
        text = diff_html(d, b.inputs, c.inputs)
    else:
        width, colored, wrap = text_style(output, color)
        text = diff_text(d, width, color=colored, wrap=wrap)
    emit(text, output, what="diff")
    if fail_on_worse and d.overall == "worse":
        # SystemExit, not typer.Exit: in non-standalone mode click returns Exit's code.
        raise SystemExit(1)
