"""What ``gpuprof run`` makes of its session when the job ends: the report, the lines that
close the run, and the reports saved in the session folder.

Reads the session (:mod:`gpuprof.session`), calls the analysis (:mod:`gpuprof.pipeline`)
and the renderers; the command-line module only decides what goes where.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuprof.errors import GpuprofError
from gpuprof.model import notice
from gpuprof.model.notice import said
from gpuprof.model.report import Report, sort_recommendations
from gpuprof.pipeline.outcome import Outcome
from gpuprof.util.phrases import duration

if TYPE_CHECKING:
    from gpuprof.session.reader import Session

SAVED_FORMATS = ("json", "html")  # always saved in the session folder as report.<ext>


def _read(session: Session | Path) -> Session:
    """The session as read (one read per analysis: a caller that has it passes it on)."""
    if isinstance(session, (str, Path)):
        from gpuprof.session import read_session

        return read_session(session)
    return session


def samples_only_report(session: Session | Path, note: str | None = None) -> Report:
    """A report from the session's NVML samples alone (no trace was recorded)."""
    return _samples_only(_read(session), note).report


def _samples_only(session: Session, note: str | None) -> Outcome:
    from gpuprof.accounting.samples import summarize_samples
    from gpuprof.advice.samples import advise_samples
    from gpuprof.session.notices import session_notices

    session_dir = session.path
    findings = summarize_samples(session.samples) if session.samples is not None else None
    warnings = session_notices(session) + ((said(note),) if note else ())
    extra = {"samples": findings.to_dict()} if findings is not None else {}
    report = Report(
        inputs=(str(session_dir),),
        ranks=(),
        recommendations=sort_recommendations(advise_samples(findings)),
        warnings=notice.words(warnings),
        extra=extra,
    )
    return Outcome(report, warnings)


def no_trace_note(session: Session | Path) -> str:
    """Why the session holds no trace, as one report warning."""
    s = _read(session)
    session_dir = s.path
    h = s.hook_events
    # What the report stands on instead: the samples, where there are any.
    only = (
        "report from NVML samples only" if s.samples is not None and len(s.samples)
        else "and no NVML samples either (no GPU driver, or the job ended before the first sample): nothing was measured"
    )
    if not s.meta.get("hooks_enabled", True):
        return f"no trace: torch hooks were switched off (--no-hooks); {only}"
    if h is None or "kind" not in h or not (h["kind"] == "start").any():
        return f"no trace: no Python process of the job imported torch; {only}"
    steps = int(h["step"].max()) if "step" in h and h["step"].notna().any() else 0
    sched = s.meta.get("profile_schedule") or {}
    need = 1 + int(sched.get("wait", 0)) + int(sched.get("warmup", 0)) + int(sched.get("active", 0))
    if s.hook_errors:
        return f"no trace: a hook failed ({s.hook_errors[0]}); see {session_dir}/hooks"
    if "message" in h and (h["kind"] == "note").any():
        return f"no trace: {h[h['kind'] == 'note']['message'].iloc[0]}; {only}"
    return (
        f"no trace: the job ran {steps} optimizer step(s); the profiler window needs {need} "
        f"(lower --profile-wait); {only}"
    )


@dataclass(frozen=True)
class StepStats:
    """Optimizer steps as the hooks saw them (the job's own clock, every step)."""

    steps: int  # the most steps any process of the job took
    step_time_median_us: float | None
    step_time_mean_us: float | None = None  # the reports' one step statistic


def step_stats(hook_events: Any) -> StepStats | None:
    """From a session's hook records; ``None`` when no step was recorded."""
    h = hook_events
    if h is None or "kind" not in h or "step" not in h:
        return None
    steps = h[h["kind"] == "step"]
    if not len(steps):
        return None
    median = mean = None
    if "pid" in steps and "time_unix_s" in steps:
        dts = steps.groupby("pid")["time_unix_s"].diff().dropna()
        if len(dts):
            median = float(dts.median()) * 1e6
            mean = float(dts.mean()) * 1e6
    return StepStats(steps=int(steps["step"].max()), step_time_median_us=median, step_time_mean_us=mean)


def is_cpu_only(report: Report) -> bool:
    """True when nothing was measured on a GPU: traces without device activity, or no trace
    and no GPU samples (a CPU-only machine)."""
    if report.ranks:
        return all(r.window_us <= 0 for r in report.ranks)
    return not report.extra.get("samples")


def _first_host_figures(report: Report) -> dict[str, Any] | None:
    """The ``run`` key's host figures (kept for readers of older reports): the first rank
    that measured its steps on the host (every rank's are in its ``host_steps``)."""
    for r in report.ranks:
        h = r.extra.get("host_steps")
        if isinstance(h, dict) and h.get("profiled_steps"):
            return {"rank": r.rank, "profiled_steps": h["profiled_steps"], "host_step_us": h.get("step_us") or 0.0,
                    "host_op_us": h.get("op_us") or 0.0}
    return None


def session_report(session: Session | Path, options: Any = None, progress: Any = None) -> Report:
    """:func:`session_outcome`'s report."""
    return session_outcome(session, options, progress).report


def session_outcome(session: Session | Path, options: Any = None, progress: Any = None) -> Outcome:
    """The report of a session (its folder, or the session as read): traces and samples
    through the pipeline, or samples alone.

    ``options`` (a ``pipeline.AnalyzeOptions``) and ``progress`` go to the pipeline. The
    report gains a ``run`` key with the job's optimizer steps as the hooks counted them
    and, for a CPU-only run, the host time per profiled step. Without ``options`` (the
    report ``gpuprof run`` gives when the job ends), traces that look like different jobs
    are analyzed together with a warning saying so rather than leaving the run without a
    report: they came from one command. The warnings are also given as records (``notices``).
    """
    from gpuprof.pipeline import AnalyzeOptions, run_analysis
    from gpuprof.session.notices import session_notices

    session = _read(session)
    if not session.trace_paths:
        made = _samples_only(session, no_trace_note(session))
        report, warnings = made.report, made.notices
    else:
        analysis = run_analysis([session.path], options or AnalyzeOptions(force=True), progress, session=session)
        report, warnings = analysis.report, analysis.notices
        # The session's own warnings (no driver, killed run) belong in every format of the report.
        extra_warnings = tuple(n for n in session_notices(session) if n.text not in report.warnings)
        if extra_warnings:
            warnings += extra_warnings
            report = replace(report, warnings=notice.words(warnings))
    run: dict[str, Any] = {}
    stats = step_stats(session.hook_events)
    if stats is not None:
        run["optimizer_steps"] = stats.steps
        run["step_time_median_us"] = None if stats.step_time_median_us is None else round(stats.step_time_median_us, 3)
        run["step_time_mean_us"] = None if stats.step_time_mean_us is None else round(stats.step_time_mean_us, 3)
    if is_cpu_only(report):
        run["cpu_only"] = True
        host = _first_host_figures(report)
        if host is not None:
            run.update(host)
        # NVML's absence is news only for a job that used a GPU: this one ran on the CPU,
        # which the report says (and the run said when it started). Known by its code.
        quiet = notice.without(warnings, notice.NO_SAMPLING)
        if quiet != warnings:
            warnings = quiet
            report = replace(report, warnings=notice.words(warnings))
    if run:
        report = replace(report, extra={**report.extra, "run": run})
    from gpuprof.pipeline.runreport import run_section

    whole = run_section(session, report if session.trace_paths else None)  # the windows, phases and changes
    if whole:
        report = replace(report, extra={**report.extra, **whole})
    return Outcome(report, warnings)


def job_summary(session_dir: Path) -> str:
    """One line on what the job did, from the session (steps, step time, traces, samples)."""
    from gpuprof.session import read_session

    s = read_session(session_dir)
    parts = [f"exit code {s.meta.get('exit_code')}"]
    h = s.hook_events
    stats = step_stats(h)
    if stats is not None and h is not None:
        text = f"{stats.steps} optimizer step{'s' if stats.steps != 1 else ''}"
        if stats.step_time_median_us is not None:
            # The median: the profiler's pauses between steps skew a mean of these intervals.
            text += f" (median {duration(stats.step_time_median_us)} apart)"
        parts.append(text)
        steps = h[h["kind"] == "step"]
        for col, what in (("alloc_retries", "CUDA allocator retries"), ("ooms", "CUDA OOMs")):
            if col in steps and steps[col].notna().any():
                # Cumulative per process: the job's total is the sum of each process's last value.
                total = int(steps.groupby("pid")[col].max().sum()) if "pid" in steps else int(steps[col].max())
                parts.append(f"{total} {what}")
    parts.append(f"{len(s.trace_paths)} trace{'s' if len(s.trace_paths) != 1 else ''}")
    n_gpus = len(s.meta.get("gpus") or [])
    parts.append(f"{n_gpus} GPU{'s' if n_gpus != 1 else ''} sampled" if s.samples is not None else "no GPU samples")
    return "job: " + ", ".join(parts)


def save_session_reports(report: Report, session_dir: Path) -> tuple[list[Path], str | None]:
    """Write ``report.json`` and ``report.html`` into the session folder.

    Returns the files written and, when one could not be (a full disk), one line saying
    which and why; never raises for a write error.
    """
    from gpuprof.render import render
    from gpuprof.util.atomic import write_text_atomic

    written: list[Path] = []
    for fmt in SAVED_FORMATS:
        path = session_dir / f"report.{fmt}"
        try:
            write_text_atomic(path, render(report, fmt))
        except (OSError, GpuprofError) as exc:
            why = exc.message if isinstance(exc, GpuprofError) else (exc.strerror or str(exc))
            return written, f"report not saved in the session: {path}: {why}"
        written.append(path)
    return written, None
