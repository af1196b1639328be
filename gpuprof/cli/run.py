"""``gpuprof run``: run a training command unchanged, record a session, print the report."""

from __future__ import annotations

import re
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

import typer

from gpuprof.cli import app
from gpuprof.errors import GpuprofError
from gpuprof.model.report import Report, sort_recommendations
from gpuprof.record.runner import RunOptions, run_command
from gpuprof.record.sampler import DEFAULT_INTERVAL_MS

RUN_HELP = f"""Run a training command under gpuprof: CMD runs unchanged with your environment,
stdin/stdout/stderr pass through, and gpuprof exits with CMD's exit code (128+N if signal N
killed it).

While CMD runs, every visible GPU (CUDA_VISIBLE_DEVICES) is sampled through NVML every
--interval-ms (default {DEFAULT_INTERVAL_MS} ms). Python children (python, python -m,
torchrun workers) get torch hooks without any code change: the optimizer step marks step
boundaries, torch.cuda.memory_stats() is recorded per step, and a torch.profiler window
(--profile-wait/--profile-warmup/--profile-active optimizer steps) writes one trace per
rank. Everything goes to a session folder (--out) that `gpuprof analyze DIR` reads again,
even if the run was killed. The report is printed on stderr when CMD ends.

Put `--` before CMD so that its options are never taken for gpuprof's:

    gpuprof run --interval-ms 200 -- torchrun --nproc-per-node 8 train.py --lr 3e-4
"""


def default_session_dir(argv: list[str], now: float | None = None, base: Path = Path("gpuprof-sessions")) -> Path:
    """``gpuprof-sessions/<YYYYmmdd-HHMMSS>-<command>``, made unique with a suffix."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(argv[0]).name)[:40] or "cmd"
    # For `python train.py` / `python -m pkg`, the script says more than the interpreter.
    if name.startswith("python") and len(argv) > 1:
        if argv[1] == "-m" and len(argv) > 2:
            target = argv[2].rsplit(".", 1)[-1]  # python -m pkg.train -> train
        else:
            target = Path(argv[1]).stem
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", target)[:40] or name
    candidate = base / f"{stamp}-{name}"
    n = 2
    while candidate.exists():
        candidate = base / f"{stamp}-{name}-{n}"
        n += 1
    return candidate


def samples_only_report(session_dir: Path, note: str | None = None) -> Report:
    """A report from the session's NVML samples alone (no trace was recorded)."""
    from gpuprof.advice.samples import advise_samples
    from gpuprof.analysis.samples import summarize_samples
    from gpuprof.session import read_session

    session = read_session(session_dir)
    findings = summarize_samples(session.samples) if session.samples is not None else None
    warnings = list(session.warnings)
    if note:
        warnings.append(note)
    extra = {"samples": findings.to_dict()} if findings is not None else {}
    return Report(
        inputs=(str(session_dir),),
        ranks=(),
        recommendations=sort_recommendations(advise_samples(findings)),
        warnings=tuple(warnings),
        extra=extra,
    )


def _no_trace_note(session_dir: Path) -> str:
    from gpuprof.session import read_session

    s = read_session(session_dir)
    h = s.hook_events
    if not s.meta.get("hooks_enabled", True):
        return "no trace: torch hooks were switched off (--no-hooks); report from NVML samples only"
    if h is None or "kind" not in h or not (h["kind"] == "start").any():
        return "no trace: no Python process of the job imported torch; report from NVML samples only"
    steps = int(h["step"].max()) if "step" in h and h["step"].notna().any() else 0
    sched = s.meta.get("profile_schedule") or {}
    need = 1 + int(sched.get("wait", 0)) + int(sched.get("warmup", 0)) + int(sched.get("active", 0))
    if s.hook_errors:
        return f"no trace: a hook failed ({s.hook_errors[0]}); see {session_dir}/hooks"
    if "message" in h and (h["kind"] == "note").any():
        return f"no trace: {h[h['kind'] == 'note']['message'].iloc[0]}; report from NVML samples only"
    return (
        f"no trace: the job ran {steps} optimizer step(s); the profiler window needs {need} "
        "(lower --profile-wait); report from NVML samples only"
    )


def session_report(session_dir: Path, options: Any = None, progress: Any = None) -> Report:
    """The report of a session: traces and samples through the pipeline, or samples alone.

    ``options`` (a ``pipeline.AnalyzeOptions``) and ``progress`` go to the pipeline.
    """
    from gpuprof.pipeline import AnalyzeOptions, analyze_paths
    from gpuprof.session import read_session

    session = read_session(session_dir)
    if not session.trace_paths:
        return samples_only_report(session_dir, _no_trace_note(session_dir))
    report = analyze_paths([session_dir], options or AnalyzeOptions(), progress)
    # The session's own warnings (no driver, killed run) belong in every format of the report.
    extra = tuple(w for w in session.warnings if w not in report.warnings)
    return replace(report, warnings=report.warnings + extra) if extra else report


def job_summary(session_dir: Path) -> str:
    """One line on what the job did, from the session (steps, step time, traces, samples)."""
    from gpuprof.session import read_session

    s = read_session(session_dir)
    parts = [f"exit code {s.meta.get('exit_code')}"]
    h = s.hook_events
    if h is not None and "kind" in h and "step" in h:
        steps = h[h["kind"] == "step"]
        if len(steps):
            per_proc = steps.groupby("pid")["time_unix_s"] if "pid" in steps else None
            n = int(steps["step"].max())
            text = f"{n} optimizer step{'s' if n != 1 else ''}"
            if per_proc is not None:
                dts = per_proc.diff().dropna()
                if len(dts):
                    text += f" (median {dts.median() * 1000:.2f} ms per step)"
            parts.append(text)
        for col, what in (("alloc_retries", "CUDA allocator retries"), ("ooms", "CUDA OOMs")):
            if col in steps and steps[col].notna().any():
                # Cumulative per process: the job's total is the sum of each process's last value.
                total = int(steps.groupby("pid")[col].max().sum()) if "pid" in steps else int(steps[col].max())
                parts.append(f"{total} {what}")
    parts.append(f"{len(s.trace_paths)} trace{'s' if len(s.trace_paths) != 1 else ''}")
    n_gpus = len(s.meta.get("gpus") or [])
    parts.append(f"{n_gpus} GPU{'s' if n_gpus != 1 else ''} sampled" if s.samples is not None else "no GPU samples")
    return "job: " + ", ".join(parts)


def print_report(session_dir: Path, fmt: str) -> None:
    """Print the report on stderr; a failure here is one line, never the job's exit code."""
    from gpuprof.render import render

    try:
        text = render(session_report(session_dir), fmt)
    except GpuprofError as exc:
        print(f"gpuprof: no report: {exc}", file=sys.stderr)
        return
    except Exception as exc:  # the job's exit code matters more than our report
        print(f"gpuprof: no report (internal error: {exc!r}); run `gpuprof analyze {session_dir}`",
              file=sys.stderr)
        return
    sys.stderr.write(text if text.endswith("\n") else text + "\n")
    if fmt == "text":
        try:
            print(f"gpuprof: {job_summary(session_dir)}", file=sys.stderr)
        except GpuprofError:
            pass
    print(f"gpuprof: session saved in {session_dir} (gpuprof analyze {session_dir})", file=sys.stderr)


@app.command(
    help=RUN_HELP,
    options_metavar="[OPTIONS] -- CMD [ARGS]...",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "allow_interspersed_args": False},
)
def run(
    ctx: typer.Context,
    interval_ms: int = typer.Option(DEFAULT_INTERVAL_MS, "--interval-ms", min=10,
                                    help="NVML polling interval in milliseconds."),
    out: Optional[Path] = typer.Option(None, "--out", "-o",
                                       help="Session folder (default ./gpuprof-sessions/DATE-TIME-COMMAND)."),
    no_hooks: bool = typer.Option(False, "--no-hooks",
                                  help="Do not inject torch hooks (no step records, no profiler trace)."),
    profile_wait: int = typer.Option(5, "--profile-wait", min=0,
                                     help="Optimizer steps to skip before the profiler warms up."),
    profile_warmup: int = typer.Option(2, "--profile-warmup", min=0, help="Profiler warm-up steps (not recorded)."),
    profile_active: int = typer.Option(3, "--profile-active", min=0,
                                       help="Steps recorded into the trace; 0 = no profiler."),
    no_report: bool = typer.Option(False, "--no-report", help="Do not print the report when CMD ends."),
    report_format: str = typer.Option("text", "--format", "-f", help="Report format: text, json, markdown, html."),
) -> None:
    argv = [a for a in ctx.args]
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise GpuprofError("no command given: gpuprof run [OPTIONS] -- CMD [ARGS...]")
    session_dir = out if out is not None else default_session_dir(argv)
    if session_dir.exists() and (not session_dir.is_dir() or any(session_dir.iterdir())):
        raise GpuprofError("session folder already exists and is not empty", session_dir)
    try:
        session_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise GpuprofError(f"cannot create session folder: {exc.strerror or exc}", session_dir) from None
    opts = RunOptions(interval_ms=interval_ms, hooks=not no_hooks, profile_wait=profile_wait,
                      profile_warmup=profile_warmup, profile_active=profile_active)
    print(f"gpuprof: recording {argv[0]} into {session_dir}", file=sys.stderr, flush=True)
    result = run_command(argv, session_dir, opts)
    if not no_report:
        print_report(session_dir, report_format)
    sys.stdout.flush()
    # SystemExit, not typer.Exit: in non-standalone mode click turns Exit into a return value.
    sys.exit(result.exit_code)


__all__ = ["run", "session_report", "samples_only_report", "default_session_dir", "print_report"]
