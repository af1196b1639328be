"""``gpuprof check``: the CI gate (``gpuprof diff``, in :mod:`gpuprof.cli.diff`, reads its
inputs the same way).

Both accept traces (files, folders, session folders) or a report that ``gpuprof analyze
--format json`` wrote; a report is recognized by its content (``"schema":
"gpuprof.report/1"``), not by its name. Thresholds come from options and from
``[tool.gpuprof.check]`` in the nearest ``pyproject.toml`` (options win).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import typer

from gpuprof.cli.analyze import (
    StderrProgress,
    force_option,
    jobs_option,
    max_input_gb_option,
    terminal_width,
    warn_skipped,
    write_output,
)
from gpuprof.cli.check_config import find_pyproject, load_settings, merged, settings_from_options
from gpuprof.cli.command import input_path
from gpuprof.cli.console import ColorMode, color_option, is_terminal, say, use_color
from gpuprof.cli.outputs import check_outputs
from gpuprof.cli.root import app
from gpuprof.cli.streams import OutputClosed, write_stdout
from gpuprof.errors import GpuprofError
from gpuprof.model.report import Report
from gpuprof.readers.limits import ReadLimits
from gpuprof.readers.saved import is_report_file, read_report
from gpuprof.util.safetext import visible_text

__all__ = ["check", "is_report_file", "load_or_analyze", "read_report"]


def load_or_analyze(
    paths: list[Path],
    steps: str | None = None,
    max_input_gb: float | None = None,
    strict: bool = False,
    jobs: int = 1,
    force: bool = False,
) -> Report:
    """A report from a saved report file, a session, or by analyzing traces (``jobs``
    processes): the inputs as ``gpuprof analyze`` reads them (:mod:`gpuprof.pipeline.inputs`).
    ``steps`` and ``jobs`` apply to traces: a saved report beside traces on the other side
    of a diff, or as a baseline, is read as saved."""
    from gpuprof.accounting.window import StepSelection
    from gpuprof.pipeline import AnalyzeOptions
    from gpuprof.pipeline.inputs import outcome_of, report_of, route

    inp = route(paths)
    if inp.saved is not None:
        return report_of(inp, AnalyzeOptions(max_input_gb=max_input_gb))
    options = AnalyzeOptions(
        steps=StepSelection.parse(steps), jobs=jobs, max_input_gb=max_input_gb, strict=strict, force=force
    )
    with StderrProgress() as progress:
        outcome = outcome_of(inp, options, progress)
    warn_skipped(outcome)
    return outcome.report


def _limits(max_input_gb: float | None) -> ReadLimits:
    return ReadLimits.from_gb(max_input_gb)


def _append_step_summary(markdown: str, inputs: Sequence[tuple[str, Path | None]] = ()) -> None:
    """Add to the GitHub Actions job summary when running there (best effort, never fatal).

    Never into one of the inputs (a misconfigured ``GITHUB_STEP_SUMMARY`` naming the trace),
    and never waiting: a FIFO nobody reads is opened without blocking, and skipped.
    """
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return
    try:
        check_outputs(inputs, [("$GITHUB_STEP_SUMMARY", Path(target))])
    except GpuprofError as exc:
        say(f"job summary not written: {exc}")
        return
    try:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(target, flags, 0o666)
        os.set_blocking(fd, True)  # opened without waiting for a reader; written as usual
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(visible_text(markdown) + "\n")
    except OSError as exc:
        say(f"could not write the job summary {target}: {exc.strerror or exc}")


CHECK_HELP = """CI gate: analyze, compare with thresholds and/or a baseline, exit 1 on failure.

PATH is a trace file, a folder of per-rank traces, a `gpuprof run` session folder, or a
report saved by `gpuprof analyze --format json`.

Against a baseline (--baseline: a saved report, a folder of them, or traces; repeat it to
pool several runs) or a history of runs (--history), the verdict comes from the step-time
distributions: regression, improvement, no significant change, inconclusive (too few
steps: passes unless --strict) or not comparable (another world size, device, parallel
layout or kernel mix), with the step's change and its interval, and the causes whose time
per step moved. A regression is significant at --confidence and could reach the floor
--min-effect-pct. docs/gate.md says how.

Thresholds are listed with their measured and allowed value. Shares are % of the analysis
window summed over ranks; step time is the slowest rank's mean step, as the report says it.

Thresholds can also live in the project's pyproject.toml (searched from the current folder
upwards; options override it):

    [tool.gpuprof.check]
    min_compute_pct = 60
    max_step_ms = 250
    max_lost_pct = { dataloader = 10, communication = 25 }
    baseline = "ci/baseline.json"  # relative to pyproject.toml (a folder or a list pools runs)
    history = "ci/gpuprof-history.jsonl"
    min_effect_pct = 5      # the floor: the smallest change of the step that matters
    confidence_pct = 99     # the intervals' level
    tolerance_pct = 5       # opt-in: pp a share may worsen vs baseline
    step_tolerance_pct = 5  # opt-in: % the mean step may grow (the fixed rule)

With no threshold, no baseline and no history there is nothing to check: that is a usage
error (exit 2), so a misconfigured CI job never passes silently.

Exit codes: 0 all checks passed, 1 a check failed, 2 bad usage or unreadable input.
"""


@app.command(help=CHECK_HELP)
def check(
    paths: list[Path] = typer.Argument(
        ...,
        metavar="PATH...",
        parser=input_path,
        help="Traces, folders, session folders, or one saved JSON report.",
        show_default=False,
    ),
    min_compute_pct: float | None = typer.Option(
        None, "--min-compute-pct", help="Fail when compute is less than PCT % of the window (0-100)."
    ),
    max_lost_pct: list[str] | None = typer.Option(
        None, "--max-lost-pct", metavar="CAUSE=PCT", help="Fail when CAUSE loses more than PCT % of the window (repeatable)."
    ),
    max_step_ms: float | None = typer.Option(None, "--max-step-ms", help="Fail when the step time exceeds MS (a finite number >= 0)."),
    baseline: list[Path] | None = typer.Option(
        None, "--baseline", metavar="PATH",
        help="Compare with this run: a saved JSON report, a folder of them, or traces (repeatable: runs are pooled).",
    ),
    history: Path | None = typer.Option(
        None, "--history", metavar="FILE_OR_DIR",
        help="A history of runs (JSON lines; a folder holds gpuprof-history.jsonl): without --baseline, compare "
        "with its last stable segment; this run is appended.",
    ),
    min_effect_pct: float | None = typer.Option(
        None, "--min-effect-pct", help="The floor: the smallest change of the step that counts (%, finite, >= 0). [default: 5]"
    ),
    confidence: float | None = typer.Option(
        None, "--confidence", metavar="PCT", help="Level of the intervals; the test's false-alarm rate is 100 - PCT %. [default: 99]"
    ),
    commit: str | None = typer.Option(
        None, "--commit", help="Name this run in the history (default: $GITHUB_SHA, $CI_COMMIT_SHA, ... when set)."
    ),
    tolerance_pct: float | None = typer.Option(
        None, "--tolerance-pct", help="Also check shares against the baseline: percentage points a share may worsen by (0-100)."
    ),
    step_tolerance_pct: float | None = typer.Option(
        None, "--step-tolerance-pct", help="Also apply the fixed rule: % the mean step may grow by (finite, >= 0)."
    ),
    junit: Path | None = typer.Option(None, "--junit", metavar="FILE", help="Also write the checks as JUnit XML to FILE."),
    json_out: Path | None = typer.Option(None, "--json", metavar="FILE", help="Also write the checks and the verdict as JSON to FILE."),
    save_report: Path | None = typer.Option(
        None, "--output", "-o", "--save-report", metavar="FILE",
        help="Also write the analyzed report to FILE (format from its extension: .json, .md, .html, .txt).",
    ),
    config: Path | None = typer.Option(
        None, "--config", metavar="FILE", help="Read [tool.gpuprof.check] from FILE, a pyproject.toml."
    ),
    no_config: bool = typer.Option(False, "--no-config", help="Ignore pyproject.toml."),
    steps: str | None = typer.Option(None, "--steps", metavar="STEPS", help="Steps to analyze: N, N:M, N: or :M (inclusive)."),
    max_input_gb: float | None = max_input_gb_option(),
    strict: bool = typer.Option(
        False, "--strict", help="Fail what would otherwise pass with a warning: an inconclusive verdict, and (exit 2) "
        "a trace found in a folder that cannot be read.",
    ),
    jobs: int = jobs_option(),
    force: bool = force_option(),
    color: ColorMode = color_option(),
) -> None:
    from gpuprof.ci import gate
    from gpuprof.ci.gate_output import checks_json, checks_junit, checks_markdown, checks_text
    from gpuprof.ci.history import append_run, history_file, read_history
    from gpuprof.cli.check_gate import commit_from_env, load_baselines, run_gate
    from gpuprof.render import format_for_path, render
    from gpuprof.render.figures import saving_phrase
    from gpuprof.render.markdown import md_escape

    # Options are validated exactly as [tool.gpuprof.check] is, then override it.
    settings = settings_from_options(
        min_compute_pct=min_compute_pct,
        max_lost_pct=max_lost_pct or [],
        max_step_ms=max_step_ms,
        baseline=baseline or [],
        tolerance_pct=tolerance_pct,
        step_tolerance_pct=step_tolerance_pct,
        min_effect_pct=min_effect_pct,
        confidence_pct=confidence,
        history=history,
    )
    pyproject = None
    if not no_config:
        pyproject = config if config is not None else find_pyproject()
        if pyproject is not None:
            settings = merged(load_settings(pyproject), settings)
    limits = settings.thresholds
    hist_path = history_file(settings.history) if settings.history is not None else None
    baselines = [("the baseline report" if is_report_file(b) else "the baseline", b) for b in settings.baselines]
    inputs = [*(("an input", p) for p in paths), *baselines, ("the history", hist_path), ("the configuration", pyproject)]
    check_outputs(inputs, [("--save-report", save_report), ("--junit", junit), ("--json", json_out)])
    if limits.empty and not settings.baselines and hist_path is None:
        raise GpuprofError(
            "nothing to check: give thresholds (--min-compute-pct, --max-lost-pct CAUSE=PCT, --max-step-ms), "
            "--baseline REPORT.json, --history FILE, or set them in [tool.gpuprof.check] of pyproject.toml"
        )
    # A bad baseline or history fails before the run is analyzed.
    past = read_history(hist_path) if hist_path is not None else None
    base_reports = load_baselines(
        settings.baselines, _limits(max_input_gb), lambda p: load_or_analyze(p, steps, max_input_gb, strict, jobs, force)
    )
    report = load_or_analyze(paths, steps, max_input_gb, strict, jobs, force)
    outcome = run_gate(report, settings, base_reports, past, strict=strict, commit=commit or commit_from_env())
    results = outcome.results

    if save_report is not None:
        write_output(render(report, format_for_path(str(save_report)) or "json"), save_report)
    if junit is not None:
        write_output(checks_junit(results, subject=", ".join(str(p) for p in paths)), junit)
    if json_out is not None:
        write_output(checks_json(results, outcome.extra), json_out)
    notes_md = "".join(f"- {md_escape(n)}\n" for n in outcome.notes) + ("\n" if outcome.notes else "")
    _append_step_summary(checks_markdown(results) + "\n" + notes_md + render(report, "markdown"), inputs)
    colored = use_color(color)
    text = "".join(f"note: {n}\n" for n in outcome.notes) + checks_text(
        results, terminal_width(), wrap=is_terminal(), color=colored
    )
    if gate.failed(results) and report.recommendations:
        # A failing gate should say where to look next, not only what failed.
        text += "\nWhat to change first (gpuprof analyze for the evidence):\n"
        for i, rec in enumerate(report.recommendations[:3], 1):
            text += f"  {i}. {rec.title} [{rec.category.value}, {saving_phrase(rec, report)}]\n"
    if hist_path is not None and outcome.history_line is not None:
        append_run(hist_path, outcome.history_line)  # after every output: a failed write of one is exit 2, unrecorded
    try:
        write_stdout(text, "the checks", keep_color=colored)
    except OutputClosed:
        pass  # the verdict, not the listing, is the result: `check ... | head` still gates
    if gate.failed(results):
        # SystemExit, not typer.Exit: in non-standalone mode click returns Exit's code
        # instead of exiting, and the gate must fail the CI step.
        raise SystemExit(1)
