"""``gpuprof annotate TRACE -o OUT.json``: the trace with lost-time tracks, for Perfetto."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from gpuprof.cli import app
from gpuprof.errors import GpuprofError

OUT_EXTENSIONS = (".json", ".json.gz")


@app.command()
def annotate(
    trace: Path = typer.Argument(..., help="One trace file (.json or .json.gz): a Kineto trace or an op-level timeline.", show_default=False),
    output: Path = typer.Option(..., "--output", "-o", help="Annotated trace to write: .json, or .json.gz to compress.", show_default=False),
    steps: str | None = typer.Option(None, "--steps", help="Steps to analyze: N, N:M, N: or :M (inclusive)."),
) -> None:
    """Write TRACE plus one track per cause of lost time, with a slice for every lost interval.

    For each rank a process "gpuprof: lost time (rank N)" is added, with a thread per
    cause, on the trace's own clock. Open the result in https://ui.perfetto.dev or
    chrome://tracing to see each lost interval next to the kernels around it.
    """
    from gpuprof.analysis.window import StepSelection
    from gpuprof.annotate import annotate_file
    from gpuprof.cli.analyze import StderrProgress
    from gpuprof.pipeline import AnalyzeOptions, run_analysis

    if trace.is_dir():
        raise GpuprofError("annotate takes one trace file, not a folder; give one rank's trace", trace)
    if not output.name.lower().endswith(OUT_EXTENSIONS):
        raise GpuprofError("the annotated trace must be written as .json or .json.gz", output)
    if output.exists() and trace.exists() and output.resolve() == trace.resolve():
        raise GpuprofError("refusing to overwrite the input trace; choose another -o", output)
    analysis = run_analysis([trace], AnalyzeOptions(steps=StepSelection.parse(steps)), progress=StderrProgress())
    done = annotate_file(trace, output, analysis.attributions)
    ranks = ", ".join(str(r) for r in done.ranks) or "none"
    print(
        f"gpuprof: wrote {output}: {done.slices} lost-time slices for rank(s) {ranks}; "
        "open it in https://ui.perfetto.dev or chrome://tracing",
        file=sys.stderr,
    )
