"""``gpuprof run``: run a training command unchanged, record a session, report when it ends."""

from __future__ import annotations

import difflib
import os
import re
import shutil
import sys
import time
from pathlib import Path

import typer

from gpuprof.cli import streams
from gpuprof.cli.console import ColorMode, is_terminal, say, terminal_width, use_color
from gpuprof.cli.root import app
from gpuprof.cli.streams import say_text, write_stdout
from gpuprof.errors import GpuprofError
from gpuprof.pipeline.session_report import (
    is_cpu_only,
    job_summary,
    samples_only_report,
    save_session_reports,
    session_report,
)
from gpuprof.record.jobsignals import LateSignal, SignalRelay
from gpuprof.record.runner import RunObserver, RunOptions, RunResult, run_command
from gpuprof.record.sampler import DEFAULT_INTERVAL_MS
from gpuprof.record.windowplan import DEFAULT_KEEP, WindowOptions, parse_duration_s, parse_every
from gpuprof.session.writer import SessionDirTaken, claim_session_dir, describe_os_error
from gpuprof.util.atomic import silence_fd

RUN_HELP = f"""Run a training command under gpuprof: CMD runs unchanged with your environment,
stdin/stdout/stderr pass through, and gpuprof exits with CMD's exit code (128+N if signal N
killed it).

While CMD runs, every visible GPU (CUDA_VISIBLE_DEVICES) is sampled through NVML every
--interval-ms (default {DEFAULT_INTERVAL_MS} ms). Python children (python, python -m,
torchrun workers) get torch hooks without any code change: the optimizer step marks step
boundaries, torch.cuda.memory_stats() is recorded per step, and a torch.profiler window
(--profile-wait/--profile-warmup/--profile-active optimizer steps) writes one trace per
rank. Everything goes to a session folder (--session-dir) that `gpuprof analyze DIR` reads again,
even if the run was killed. When stderr is a terminal, a status line at its bottom shows
the elapsed time, steps and steps/s, the profiler phase and each GPU's utilization, memory
and power; CMD's own output scrolls above it.

Long runs: besides that first window, gpuprof profiles the same few steps on every rank again
when the step time shifts beyond its own noise (--trigger, on by default; at most one
such window per --trigger-gap), every --profile-every N steps or duration (e.g. 500, 10m), and
on demand (`gpuprof trigger DIR`, or `kill -s RTMIN+1` of gpuprof: USR1 and USR2 are the
job's, forwarded to it). Each window is diagnosed while
the job runs, in a low-priority process; the status line shows the latest window's top cause
and a rank that is consistently slowest. --keep K windows keep their traces (plus the first
and the worst); the others keep their diagnosis and report only.

When CMD ends, the report is saved in the session folder (report.json, report.html) and
printed on stderr (--format text or markdown); stdout stays CMD's. -o FILE writes it
elsewhere too (format from FILE's extension; '-' is stdout; --save-report FILE is the same).

Put `--` before CMD so that its options are never taken for gpuprof's:

    gpuprof run --interval-ms 200 -- torchrun --nproc-per-node 8 train.py --lr 3e-4
"""

TERMINAL_FORMATS = ("text", "markdown")  # what may be printed on stderr beside the job's output


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


def claim_session(out: Path | None, argv: list[str]) -> tuple[Path, bool]:
    """The session folder, claimed for this run, and whether it could be made at all.

    ``--out`` taken by another run (or not empty) is a :class:`GpuprofError`: exit 2 before
    the command runs. A default folder taken at the same second by a concurrent run moves
    on to the next free name. A disk that cannot take the folder (full, read-only, not
    permitted, an I/O error) is not a reason to keep the job from running: it runs
    unrecorded (False), with one line saying why.
    """
    for _ in range(1000):
        session_dir = out if out is not None else default_session_dir(argv)
        try:
            claim_session_dir(session_dir)
            return session_dir, True
        except SessionDirTaken:
            if out is not None:
                raise
        except OSError as exc:
            say(f"cannot create the session in {session_dir}: {describe_os_error(exc)}; the command runs unrecorded")
            return session_dir, False
    raise GpuprofError("no free session folder name", session_dir)


def _emit(text: str, dest: Path) -> None:
    """``--save-report``: a file (atomically), or stdout for ``-``."""
    if str(dest) == "-":
        write_stdout(text if text.endswith("\n") else text + "\n")
        return
    from gpuprof.cli.reporting import write_output

    write_output(text, dest)
    say(f"report written to {dest}")


def report_run(session_dir: Path, fmt: str, save_report: Path | None, result: RunResult) -> None:
    """Analyze the session, save the reports in it, and say what the run found.

    Never changes the job's exit code: a failure here is one line on stderr. The report
    printed on stderr leaves out the warnings the run already printed while it ran.
    """
    from dataclasses import replace

    from gpuprof.render import format_for_path, render

    try:
        report = session_report(session_dir)
    except GpuprofError as exc:
        say(f"no report: {exc}")
        return
    except Exception as exc:  # the job's exit code matters more than our report
        say(f"no report (internal error: {exc!r}); run `gpuprof analyze {session_dir}`")
        return
    saved, problem = save_session_reports(report, session_dir)
    if problem:
        say(problem)
    try:
        if fmt in TERMINAL_FORMATS:
            shown = set(result.warnings)
            fresh = replace(report, warnings=tuple(w for w in report.warnings if w not in shown))
            if fmt == "text":
                from gpuprof.render.text import render_text

                terminal = is_terminal(sys.stderr)
                width = terminal_width() if terminal else 100
                colored = use_color(ColorMode.auto, sys.stderr)
                text = render_text(fresh, width, color=colored, wrap=terminal)
            else:
                colored = False
                text = render(fresh, fmt)
            say_text(text, keep_color=colored)
        if save_report is not None:
            chosen = format_for_path(str(save_report)) if str(save_report) != "-" else None
            _emit(render(report, chosen or fmt), save_report)
    except GpuprofError as exc:  # OutputClosed too: the job's exit code is the answer
        say(f"report not written: {exc}")
    except OSError as exc:
        say(f"report not written: {save_report}: {describe_os_error(exc)}")
    if fmt == "text" and not is_cpu_only(report):  # a CPU-only report already says what the job did
        try:
            say(job_summary(session_dir))
        except GpuprofError:
            pass
    where = f"report in {saved[-1]}" if saved else "no report saved"
    say(f"session saved in {session_dir} ({where}; gpuprof analyze {session_dir})")


def _unknown_option(ctx: typer.Context, word: str) -> GpuprofError:
    """An option of gpuprof's before ``--`` that run does not have: a usage error, never the
    command to run (it would be tried as a program and fail with 127)."""
    names = [n for p in ctx.command.params if not getattr(p, "hidden", False) for n in p.opts if n.startswith("--")]
    near = difflib.get_close_matches(word.split("=", 1)[0], names, n=1, cutoff=0.75)
    hint = f" (did you mean {near[0]}?)" if near else ""
    return GpuprofError(
        f"run: no such option: {word}{hint}; gpuprof's options go before --, the command after it: "
        "gpuprof run [OPTIONS] -- CMD [ARGS...]"
    )


def _cannot_run(cmd: str) -> tuple[int, str] | None:
    """Why ``cmd`` cannot be started, with the shell's exit code for it (127 not found,
    126 not executable), or ``None``: found out before a session folder is made for it."""
    if os.sep in cmd or (os.altsep and os.altsep in cmd):
        path = Path(cmd)
        if not path.exists():
            return 127, "No such file or directory"
        if path.is_dir() or not os.access(path, os.X_OK):
            return 126, "Permission denied" if not path.is_dir() else "Is a directory"
        return None
    return None if shutil.which(cmd) is not None else (127, "No such file or directory")


def _output_options(out: Path | None, output: Path | None, save_report: Path | None) -> tuple[Path | None, Path | None]:
    """``(session folder, report file)`` from --session-dir/--out, -o/--output and
    --save-report. ``-o`` names the report file, as for every other command; a name that
    names no report format (``-o baseline-session``) is the session folder, as ``-o`` meant
    for ``run`` before, with a note saying so."""
    from gpuprof.render import format_for_path

    if output is not None and save_report is not None:
        raise GpuprofError("give the report file once: -o/--output and --save-report are the same option")
    if output is not None and str(output) != "-" and format_for_path(str(output)) is None:
        if out is not None:
            raise GpuprofError("the file name names no report format (.json, .html, .md, .txt)", output)
        say(f"-o {output}: a name with no report extension is taken as the session folder (the old meaning of "
            "-o for run); write --session-dir DIR for the folder and -o FILE for a report file")
        return output, None
    return out, output if output is not None else save_report


@app.command(
    help=RUN_HELP,
    options_metavar="[OPTIONS] -- CMD [ARGS]...",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "allow_interspersed_args": False},
)
def run(
    ctx: typer.Context,
    interval_ms: int = typer.Option(DEFAULT_INTERVAL_MS, "--interval-ms", min=10,
                                    help="NVML polling interval in milliseconds."),
    out: Path | None = typer.Option(None, "--session-dir", "--out", metavar="DIR",
                                    help="Session folder, new or empty. [default: a new DATE-TIME-COMMAND folder in ./gpuprof-sessions]"),
    output: Path | None = typer.Option(None, "--output", "-o", metavar="FILE",
                                       help="Also write the report to FILE, as -o does for every command (format from "
                                       "its extension, else --format); '-' prints it on stdout after CMD's output."),
    no_hooks: bool = typer.Option(False, "--no-hooks",
                                  help="Do not inject torch hooks (no step records, no profiler trace)."),
    profile_wait: int = typer.Option(5, "--profile-wait", min=0,
                                     help="Optimizer steps to skip before the profiler warms up."),
    profile_warmup: int = typer.Option(2, "--profile-warmup", min=0, help="Profiler warm-up steps (not recorded)."),
    profile_active: int = typer.Option(3, "--profile-active", min=0,
                                       help="Steps recorded into the trace; 0 = no profiler."),
    no_report: bool = typer.Option(False, "--no-report",
                                   help="Do not analyze when CMD ends (no report printed or saved; "
                                   "`gpuprof analyze DIR` makes it later)."),
    report_format: str = typer.Option("text", "--format", "-f", metavar="FORMAT",
                                      help="Report format: text or markdown are printed on stderr; json and html "
                                      "only go to the session folder and -o."),
    # The name run had before -o meant the same for every command: kept working, not listed.
    save_report: Path | None = typer.Option(None, "--save-report", metavar="FILE", hidden=True),
    no_live: bool = typer.Option(False, "--no-live",
                                 help="No live status line (it is drawn only when stderr is a terminal)."),
    profile_every: str | None = typer.Option(None, "--profile-every", metavar="N|DURATION",
                                             help="Also profile a window every N optimizer steps (500) or every "
                                             "DURATION (90s, 10m, 2h)."),
    trigger_on_change: bool = typer.Option(True, "--trigger/--no-trigger",
                                           help="Profile a window when the step time shifts beyond its own noise."),
    trigger_gap: str = typer.Option("5m", "--trigger-gap", metavar="DURATION",
                                    help="At most one window triggered by a change per DURATION (0s: no limit)."),
    keep: int = typer.Option(DEFAULT_KEEP, "--keep", min=0, metavar="K",
                             help="Windows after the first whose traces are kept, besides the worst one; older "
                             "ones keep their diagnosis and report only."),
) -> None:
    from gpuprof import render

    argv = [a for a in ctx.args]
    if argv and argv[0] == "--":
        argv = argv[1:]
    elif argv and argv[0].startswith("-"):
        raise _unknown_option(ctx, argv[0])
    if not argv:
        raise GpuprofError("no command given: gpuprof run [OPTIONS] -- CMD [ARGS...]")
    render.get(report_format)  # an unknown format is a usage error before the job runs
    out, save_report = _output_options(out, output, save_report)
    if save_report is not None and str(save_report) != "-":
        # Found out now, not after a long job: where the report cannot go.
        if save_report.is_dir():
            raise GpuprofError("is a folder; give a file name for --save-report", save_report)
        if not save_report.parent.is_dir():
            raise GpuprofError("--save-report: folder does not exist", save_report.parent)
    cannot = _cannot_run(argv[0])
    if cannot is not None:
        # As a shell says it, and before a session folder is made for a job that never runs.
        say(f"cannot run {argv[0]!r}: {cannot[1]}")
        sys.exit(cannot[0])
    windows = window_options(profile_every, trigger_on_change, trigger_gap, keep, profile_warmup, profile_active)
    session_dir, recorded = claim_session(out, argv)
    opts = RunOptions(interval_ms=interval_ms, hooks=not no_hooks, profile_wait=profile_wait,
                      profile_warmup=profile_warmup, profile_active=profile_active,
                      windows=windows if not no_hooks and recorded else None)
    schedule = (profile_wait, profile_warmup, profile_active) if opts.hooks else None
    controller = None
    if opts.windows is not None:
        from gpuprof.record.windows import WindowController

        controller = WindowController(session_dir, opts.windows, schedule)
    live = None
    if recorded and not no_live:
        from gpuprof.record.live import terminal_live_status

        live = terminal_live_status(session_dir, schedule, windows=controller.status if controller else None)
    observer: RunObserver | None = live
    if controller is not None:
        from gpuprof.record.windows import Observers

        if live is None:
            controller.note = lambda line: say(line)  # no status line: a line per diagnosed window
        observer = Observers(controller, live)
    if recorded:
        say(f"recording {argv[0]} into {session_dir}")
    # Installed for good: after the job ended, its exit code is gpuprof's whatever arrives
    # (gpuprof/record/jobsignals.py); the process ends below.
    relay = SignalRelay().install()
    result = run_command(argv, session_dir, opts, observer=observer, claimed=True, recorded=recorded,
                         warn=say, closed_fds=streams.CLOSED_AT_START, relay=relay)
    # A command that could not start ran nothing to report on: its error was the last word.
    if result.recorded and result.finished and result.launched and not no_report:  # else a line said why
        try:
            with relay.interrupting():
                report_run(session_dir, report_format, save_report, result)
        except Exception as exc:  # whatever fails in the report, the job's exit code is the answer
            say(f"no report (internal error: {exc!r}); run `gpuprof analyze {session_dir}`")
        except LateSignal as late:
            say(f"{late.name} arrived after the job ended: no report; the session is saved in {session_dir} "
                f"(gpuprof analyze {session_dir})")
    if sys.stdout is not None:
        try:
            sys.stdout.flush()
        except (OSError, ValueError):  # stdout is the job's; gpuprof's own output is best effort
            silence_fd(sys.stdout)
    relay.settle()
    # SystemExit, not typer.Exit: in non-standalone mode click turns Exit into a return value.
    sys.exit(result.exit_code)


def window_options(every: str | None, on_change: bool, gap: str, keep: int, warmup: int,
                   active: int) -> WindowOptions | None:
    """The windows after the first, from ``run``'s options; ``None`` without a profiler
    (``--profile-active 0``). A bad value is a usage error before the job runs."""
    try:
        every_steps, every_s = parse_every(every) if every is not None else (None, None)
        gap_s = 0.0 if gap.strip() in ("0", "0s") else parse_duration_s(gap)
    except ValueError as exc:
        raise GpuprofError(str(exc)) from None
    if active <= 0:
        if every is not None:
            raise GpuprofError("--profile-every needs a profiler window: --profile-active 0 switches it off")
        return None
    return WindowOptions(every_steps=every_steps, every_s=every_s, on_change=on_change, keep=keep,
                         trigger_gap_s=gap_s, warmup=warmup, active=active)


__all__ = ["claim_session", "default_session_dir", "report_run", "run", "samples_only_report", "session_report"]
