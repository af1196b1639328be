"""``gpuprof annotate``: traces with lost-time tracks added, to open in Perfetto."""

from __future__ import annotations

from pathlib import Path

import typer

from gpuprof.cli.analyze import force_option, max_input_gb_option
from gpuprof.cli.console import say
from gpuprof.cli.outputs import check_outputs
from gpuprof.cli.root import app
from gpuprof.errors import GpuprofError
from gpuprof.util.atomic import is_stdout

OUT_EXTENSIONS = (".json", ".json.gz")


def _key(p: Path | str) -> Path:
    return Path(p).resolve()


@app.command()
def annotate(
    path: Path = typer.Argument(
        ..., help="A trace file (.json, .json.gz), or a folder or session of per-rank traces.", show_default=False
    ),
    output: Path = typer.Option(
        ...,
        "--output",
        "-o",
        metavar="FILE|DIR",
        help="For one trace: the file to write (.json, or .json.gz to compress; - for stdout). For several: a folder, "
        "which gets one annotated trace per input file, under the same name.",
        show_default=False,
    ),
    job: Path | None = typer.Option(
        None,
        "--job",
        metavar="DIR",
        help="Analyze the trace together with the other ranks' traces in this folder, so that waits on other "
        "ranks (straggler, pipeline bubble) are attributed as in the whole job's report.",
    ),
    steps: str | None = typer.Option(None, "--steps", metavar="STEPS", help="Steps to analyze: N, N:M, N: or :M (inclusive)."),
    max_input_gb: float | None = max_input_gb_option(),
    force: bool = force_option(),
) -> None:
    """Write the trace plus one track per cause of lost time, with a slice for every lost interval.

    For each rank a process "gpuprof: lost time (rank N)" is added, with a thread per
    cause, on the trace's own clock; the original events are copied unchanged. Open the
    result in https://ui.perfetto.dev or chrome://tracing to see each lost interval next
    to the kernels around it. Named REPORT.annotated.json.gz beside an HTML report
    REPORT.html that `gpuprof analyze -o` writes, it is linked from the report's timeline.
    """
    from gpuprof.accounting.window import StepSelection
    from gpuprof.cli.analyze import StderrProgress
    from gpuprof.pipeline import AnalyzeOptions, run_analysis
    from gpuprof.readers import discover
    from gpuprof.render.annotate import annotate_file

    skipped: list[str] = []  # files in the folder that are valid JSON but not traces
    files = [s.path for s in discover([path], skipped)]
    for line in skipped:
        say(line)
    inputs: list[Path] = [path]
    if job is not None:
        in_job = {_key(s.path) for s in discover([job])}
        missing = [f for f in files if _key(f) not in in_job]
        if missing:
            raise GpuprofError(f"not one of the traces in --job {job}", missing[0])
        inputs = [job]
    to_stdout = is_stdout(output)
    single = len(files) == 1 and (to_stdout or output.name.lower().endswith(OUT_EXTENSIONS))
    if single:
        check_outputs([("the input trace", files[0]), ("--job", job)], [("-o", output)])
    elif len(files) == 1:
        raise GpuprofError("the annotated trace must be written as .json or .json.gz", output)
    else:
        if to_stdout or (output.exists() and not output.is_dir()) or output.name.lower().endswith(OUT_EXTENSIONS):
            raise GpuprofError(f"{len(files)} traces need an output folder (one annotated trace per input), not a file", output)
        if any(_key(f.parent) == _key(output) for f in files):
            raise GpuprofError("refusing to write into the input folder; choose another -o", output)

    options = AnalyzeOptions(steps=StepSelection.parse(steps), max_input_gb=max_input_gb, force=force)
    with StderrProgress() as progress:
        analysis = run_analysis(inputs, options, progress=progress)
    ranks_of: dict[Path, list[int]] = {}
    for s in analysis.summaries:
        ranks_of.setdefault(_key(s.source), []).append(s.rank)
    if single and job is None and len(ranks_of) <= 1:
        ranks_of = {_key(files[0]): sorted(analysis.attributions)}  # the file is the whole input

    if not single:
        try:
            output.mkdir(exist_ok=True)
        except OSError as exc:
            raise GpuprofError(f"cannot create output folder: {exc.strerror or exc}", output) from None
    total = 0
    for f in files:
        dest = output if single else output / f.name
        done = annotate_file(f, dest, analysis.attributions, ranks=sorted(ranks_of.get(_key(f), [])))
        total += done.slices
        ranks = ", ".join(str(r) for r in done.ranks) or "none"
        say(f"wrote {dest}: {done.slices} lost-time slices for rank(s) {ranks}")
    if len(files) > 1:
        say(f"{len(files)} annotated traces, {total} slices in all")
    say("open them in https://ui.perfetto.dev or chrome://tracing")
