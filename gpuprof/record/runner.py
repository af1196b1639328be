"""Running the user's command under gpuprof: child process, signals, sampler, metadata.

The child gets the user's environment (plus gpuprof's hook variables), stdin, stdout and
stderr untouched, and its own process group so that gpuprof can forward signals to the
whole group (the job and the workers it starts). What the job inherits, what gpuprof
forwards, and why the job never outlives gpuprof: :mod:`gpuprof.record.jobsignals`.

Terminal signals. When gpuprof runs in the foreground of a terminal, the child's process
group is made the terminal's foreground group for the duration of the run, exactly as a
shell does for a job: Ctrl-C, Ctrl-\\ and Ctrl-Z reach the job once (not gpuprof and the
job twice), and the job can read the terminal (``breakpoint()`` works). gpuprof takes the
terminal back when the job ends or stops. The signals sent to gpuprof itself (``kill``,
a scheduler) are forwarded to the job's group, except those gpuprof was started ignoring;
gpuprof keeps running to close the session and print the report.

The job's result comes first. The session folder is claimed exclusively before the job
starts (a second run given the same folder is refused, and its command does not run);
from then on nothing gpuprof writes can stop the job or change its exit code: a full disk
leaves a session that says what could not be written (:attr:`RunResult.problems`), and
with no room even for the folder (full, read-only) the job runs unrecorded.
"""

from __future__ import annotations

import contextlib
import os
import platform
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from gpuprof.model import notice
from gpuprof.record.backend import BackendUnavailable, GpuBackend
from gpuprof.record.jobsignals import SignalRelay, Watchdog
from gpuprof.record.sampler import DEFAULT_INTERVAL_MS, Sampler, process_tree_pids
from gpuprof.record.windowplan import WindowOptions
from gpuprof.session.layout import NO_SAMPLING, SESSION_REVISION, SESSION_SCHEMA
from gpuprof.session.writer import RESERVE_BYTES, SessionWriter, claim_session_dir, describe_os_error

HOOKS_DIR = Path(__file__).resolve().parent / "hooks"


@dataclass(frozen=True)
class RunOptions:
    """What ``gpuprof run`` was asked to do. Profile schedule values are optimizer steps."""

    interval_ms: int = DEFAULT_INTERVAL_MS
    hooks: bool = True
    profile_wait: int = 5
    profile_warmup: int = 2
    profile_active: int = 3
    # Windows after the first (the hooks read their requests; gpuprof.record.windows asks).
    windows: WindowOptions | None = None


@dataclass(frozen=True)
class RunResult:
    exit_code: int  # the child's code, or 128 + N when signal N ended it
    signal: int | None
    session_dir: Path
    warnings: tuple[str, ...] = field(default=())
    # Session files that could not be (fully) written: "PATH: error (N records lost)".
    problems: tuple[str, ...] = field(default=())
    recorded: bool = True  # False when not even the session folder could be made
    finished: bool = True  # False when session.json could not be written "finished" (disk full)
    launched: bool = True  # False when the command could not be started (not found, not executable)

    def problem_line(self) -> str | None:
        """One line naming the first file that could not be written and the error, if any."""
        if not self.problems:
            return None
        more = len(self.problems) - 1
        tail = f" (and {more} more session file{'s' if more != 1 else ''})" if more else ""
        return f"session incomplete: {self.problems[0]}{tail}"


class RunObserver:
    """Told what the run does, e.g. to draw a live status line; every method may do nothing."""

    def started(self, pid: int, sampler: Sampler | None) -> None:
        """The job runs as process ``pid``; ``sampler`` polls the GPUs (None without GPUs)."""

    def paused(self) -> None:
        """The job was stopped (Ctrl-Z): gpuprof is about to stop too; leave the terminal clean."""

    def resumed(self) -> None:
        """The job was continued after a stop."""

    def finished(self) -> None:
        """The job ended; nothing may be drawn any more."""


def _say(line: str) -> None:
    """A line on stderr, best effort: a closed or broken stderr never costs the job its result."""
    stream = sys.stderr
    if stream is None:  # started with stderr closed; print() would write to stdout instead
        return
    try:
        stream.write(line + "\n")
        stream.flush()
    except (OSError, ValueError):
        pass


def exit_code_of(returncode: int) -> tuple[int, int | None]:
    """Shell convention: a child killed by signal N exits gpuprof with 128 + N."""
    if returncode < 0:
        return 128 - returncode, -returncode
    return returncode, None


def child_env(base: dict[str, str], session_dir: Path, opts: RunOptions) -> dict[str, str]:
    """The user's environment plus gpuprof's hook variables (PYTHONPATH gets the hook dir first)."""
    env = dict(base)
    try:
        env["GPUPROF_SESSION_DIR"] = str(session_dir.resolve())
    except OSError:  # a relative folder under a current folder that was deleted: unrecorded anyway
        env["GPUPROF_SESSION_DIR"] = str(session_dir)
    if opts.hooks:
        env["GPUPROF_HOOKS"] = "1"
        env["GPUPROF_PROFILE"] = f"{opts.profile_wait},{opts.profile_warmup},{opts.profile_active}"
        if opts.windows is not None:
            env["GPUPROF_WINDOWS"] = "1"
        old = env.get("PYTHONPATH")
        env["PYTHONPATH"] = str(HOOKS_DIR) + (os.pathsep + old if old else "")
    else:
        env["GPUPROF_HOOKS"] = "0"
    return env


def _cwd() -> str | None:
    """The current folder, or None when it was deleted (the job still runs there, as under ``sh``)."""
    try:
        return os.getcwd()
    except OSError:
        return None


def _versions() -> dict[str, Any]:
    from importlib import metadata

    from gpuprof.util.version import __version__

    out: dict[str, Any] = {"gpuprof": __version__, "python": platform.python_version(), "nvidia-ml-py": None}
    try:
        out["nvidia-ml-py"] = metadata.version("nvidia-ml-py")
    except metadata.PackageNotFoundError:
        pass
    return out


@contextlib.contextmanager
def _relay_for(relay: SignalRelay | None) -> Iterator[SignalRelay]:
    """The caller's relay, or one of our own for the time of the run."""
    if relay is not None:
        yield relay
        return
    with SignalRelay() as own:
        yield own


class _ChildSignals:
    """SIGCHLD at its default while gpuprof waits for the job.

    A supervisor may start gpuprof with SIGCHLD ignored; children are then reaped by the
    kernel and ``waitpid`` has no status to return (the job's exit code would be lost). The
    job itself gets the disposition gpuprof was started with, as it would have without gpuprof.
    """

    def __init__(self) -> None:
        self._old: Any = None

    def __enter__(self) -> _ChildSignals:
        try:
            self._old = signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        except (ValueError, OSError):  # not the main thread: nothing to restore
            self._old = None
        return self

    def in_child(self) -> None:
        if self._old is signal.SIG_IGN:
            signal.signal(signal.SIGCHLD, signal.SIG_IGN)

    def __exit__(self, *exc: object) -> None:
        if self._old is not None:
            with contextlib.suppress(ValueError, OSError):
                signal.signal(signal.SIGCHLD, self._old)


class _Terminal:
    """Hands the controlling terminal to the child's group while it runs, if we own it."""

    def __init__(self) -> None:
        self.fd: int | None = None
        try:
            fd = sys.stdin.fileno()
            if os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp():
                self.fd = fd
        except (OSError, ValueError, AttributeError):
            self.fd = None

    def child_setup(self) -> None:
        """Runs in the child between fork and exec: own group, and the terminal if we have it.

        Doing it in the child (as shells do) closes the race where the job reads the
        terminal before the parent handed it over.
        """
        os.setpgid(0, 0)
        if self.fd is not None:
            signal.signal(signal.SIGTTOU, signal.SIG_IGN)
            try:
                os.tcsetpgrp(self.fd, os.getpgrp())
            except OSError:
                pass
            signal.signal(signal.SIGTTOU, signal.SIG_DFL)

    def give(self, pgid: int) -> None:
        self._set(pgid)

    def take_back(self) -> None:
        self._set(os.getpgrp())

    def _set(self, pgid: int) -> None:
        if self.fd is None:
            return
        # A background process calling tcsetpgrp gets SIGTTOU: ignore it for the call.
        old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
        try:
            os.tcsetpgrp(self.fd, pgid)
        except OSError:
            pass
        finally:
            signal.signal(signal.SIGTTOU, old)


# What gpuprof exits with when the job's status was taken by someone else (a process that
# reaps every child): never 0, which would report a success nobody saw.
STATUS_LOST = 1


def _wait_child(pid: int, pgid: int, terminal: _Terminal, observer: RunObserver,
                warn: Callable[[str], None] = lambda msg: None) -> int:
    """Wait for the child; mirror a job-control stop (Ctrl-Z) onto gpuprof. Returns a Popen-style code."""
    flags = os.WUNTRACED if terminal.fd is not None else 0
    while True:
        try:
            _, status = os.waitpid(pid, flags)
        except ChildProcessError:
            warn(f"the job's exit status was lost (another process reaped it); exiting {STATUS_LOST}")
            return STATUS_LOST
        if os.WIFSTOPPED(status):
            # The job was stopped (Ctrl-Z): take the terminal back and stop ourselves so the
            # shell sees the job stopped; on `fg`/`bg` (SIGCONT) resume the job.
            observer.paused()
            terminal.take_back()
            os.kill(os.getpid(), signal.SIGSTOP)
            observer.resumed()
            terminal.give(pgid)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGCONT)
            continue
        if os.WIFSIGNALED(status):
            return -os.WTERMSIG(status)
        return os.WEXITSTATUS(status)


def run_command(
    argv: Sequence[str],
    session_dir: Path,
    opts: RunOptions = RunOptions(),
    backend_factory: Callable[[], GpuBackend] | None = None,
    warn: Callable[[str], None] = lambda msg: _say(f"gpuprof: {msg}"),
    observer: RunObserver | None = None,
    claimed: bool = False,
    recorded: bool = True,
    closed_fds: frozenset[int] = frozenset(),
    relay: SignalRelay | None = None,
) -> RunResult:
    """Run ``argv`` to completion under gpuprof and close the session. Never raises for the job's failure.

    ``session_dir`` is claimed here (see :func:`claim_session_dir`) unless the caller did
    (``claimed``, and ``recorded`` False when the disk had no room for it); a folder another
    run holds raises :class:`GpuprofError` before the job starts. After that, nothing gpuprof
    fails to write keeps the job from running or changes its exit code.

    ``closed_fds``: which of the descriptors 0-2 gpuprof was started with closed (and then
    covered with ``/dev/null``, see :mod:`gpuprof.cli.streams`): the job gets them closed.

    ``relay``: gpuprof's signal handlers (:class:`~gpuprof.record.jobsignals.SignalRelay`),
    installed by a caller that keeps them past the job's end (the command line, for the
    report); without it they are installed here and restored on return.
    """
    import subprocess

    if not argv:
        raise ValueError("no command to run")
    observer = observer or RunObserver()
    warnings: list[str] = []
    codes: dict[str, str] = {}  # warning -> its notice code (gpuprof.model.notice), where it has one
    if not claimed:
        try:
            claim_session_dir(session_dir)
        except OSError as exc:  # the disk is full or read-only: run the job anyway, unrecorded
            recorded = False
            msg = f"cannot create the session in {session_dir}: {describe_os_error(exc)}; the command runs unrecorded"
            warnings.append(msg)
            warn(msg)
    writer = SessionWriter(session_dir, reserve_bytes=RESERVE_BYTES if recorded else 0)
    backend: GpuBackend | None = None
    factory = backend_factory
    if factory is None:
        from gpuprof.record.nvml import open_backend

        factory = open_backend
    try:
        backend = factory()
    except BackendUnavailable as exc:
        msg = f"{NO_SAMPLING}: {exc}; the command runs and traces are still collected"
        warnings.append(msg)
        codes[msg] = notice.NO_SAMPLING
        warn(msg)
    except Exception as exc:  # sampling is never a reason not to run the user's job
        msg = f"{NO_SAMPLING}: the NVML backend failed to start ({exc!r}); the command runs"
        warnings.append(msg)
        codes[msg] = notice.NO_SAMPLING
        warn(msg)
    gpus = [g.to_meta() for g in backend.devices()] if backend is not None else []
    if backend is not None and not gpus:
        msg = "no GPU visible to the job (CUDA_VISIBLE_DEVICES); no GPU samples"
        warnings.append(msg)
        warn(msg)
    versions = _versions()
    if backend is not None:
        versions.update(backend.versions())
    meta: dict[str, Any] = {
        "schema": SESSION_SCHEMA,
        "revision": SESSION_REVISION,
        "status": "running",
        "command": list(argv),
        "cwd": _cwd(),
        "host": socket.gethostname(),
        "start_time_unix_s": time.time(),
        "end_time_unix_s": None,
        "exit_code": None,
        "signal": None,
        "pid": None,
        "sample_interval_ms": opts.interval_ms,
        "hooks_enabled": opts.hooks,
        "profile_schedule": {"wait": opts.profile_wait, "warmup": opts.profile_warmup, "active": opts.profile_active},
        "windows": opts.windows.to_meta() if opts.windows is not None and opts.hooks else None,
        "gpus": gpus,
        "versions": versions,
        "warnings": warnings,
    }
    writer.write_meta(meta)
    for w in warnings:
        # The code lets a report recognise the warning (session.notices) whatever its words.
        if w in codes:
            writer.event("warning", w, code=codes[w])
        else:
            writer.event("warning", w)

    # Hooks with nowhere to write would only fail in every process: off when unrecorded.
    env = child_env(dict(os.environ), session_dir, opts if recorded else RunOptions(hooks=False))
    terminal = _Terminal()
    sampler: Sampler | None = None
    with _relay_for(relay) as forwarder, _ChildSignals() as child_signals:
        def child_setup() -> None:
            terminal.child_setup()
            child_signals.in_child()
            for fd in closed_fds:
                with contextlib.suppress(OSError):
                    os.close(fd)

        try:
            # preexec_fn is safe here: gpuprof has no other thread yet (the sampler starts after).
            proc = subprocess.Popen(list(argv), env=env, preexec_fn=child_setup)
        except OSError as exc:
            forwarder.job_ended()  # there is no job to forward to
            terminal.take_back()  # the forked child may have taken the terminal before exec failed
            # Like a shell: 127 for a command that is not found, 126 for one that cannot run.
            code = 127 if isinstance(exc, FileNotFoundError) else 126
            msg = f"cannot run {argv[0]!r}: {exc.strerror or exc}"
            warn(msg)
            warnings.append(msg)
            meta.update(exit_code=code)
            problems, finished = _finish(writer, meta, warnings)
            if backend is not None:
                with contextlib.suppress(Exception):
                    backend.close()
            return _result(code, None, session_dir, warnings, problems, recorded, finished, warn, launched=False)
        pgid = proc.pid
        watchdog = Watchdog(pgid)  # before anything else can fail: the job never runs unsupervised
        forwarder.attach(pgid)
        meta["pid"] = proc.pid  # also the job's process group id
        writer.write_meta(meta)
        try:
            if backend is not None and gpus:
                sampler = Sampler(backend, writer, interval_s=opts.interval_ms / 1000.0,
                                  pids=lambda: process_tree_pids(proc.pid))
                sampler.start()
            observer.started(proc.pid, sampler)
        except Exception as exc:  # neither sampling nor the display may cost the job its result
            msg = f"live sampling stopped: {exc!r}"
            warnings.append(msg)
            warn(msg)
        terminal.give(pgid)
        try:
            returncode = _wait_child(proc.pid, pgid, terminal, observer, warn)
        finally:
            forwarder.job_ended()
            watchdog.stand_down()
            terminal.take_back()
            with contextlib.suppress(Exception):
                observer.finished()
        seen = list(forwarder.seen)
    proc.returncode = returncode  # we reaped it ourselves
    if sampler is not None:
        sampler.stop()
    if backend is not None:
        with contextlib.suppress(Exception):
            backend.close()
    exit_code, sig = exit_code_of(returncode)
    if recorded and opts.hooks:
        from gpuprof.session.adopt import adopt_job_traces

        for msg in adopt_job_traces(session_dir):  # a session is read only from inside itself
            warnings.append(msg)
            warn(msg)
    if seen:
        names = ", ".join(signal.Signals(s).name for s in seen)
        writer.event("warning", f"forwarded {names} to the job")
    meta.update(exit_code=exit_code, signal=sig)
    problems, finished = _finish(writer, meta, warnings)
    return _result(exit_code, sig, session_dir, warnings, problems, recorded, finished, warn)


def _finish(writer: SessionWriter, meta: dict[str, Any], warnings: list[str]) -> tuple[list[str], bool]:
    """Close the session: metadata says "finished" whenever the disk allows it.

    The space held back at the start is released first, so that a disk the job filled
    still takes the final metadata (written before the records still in memory, which
    matter less). Returns what could not be written, described, and whether the metadata
    now says "finished".
    """
    writer.release_reserve()
    root = writer.root

    def note(problems: list[str]) -> None:
        shown = [p.replace(f"{root}{os.sep}", "") for p in problems]
        meta["warnings"] = [w for w in warnings] + (
            [f"the session is incomplete: {'; '.join(shown)}"] if shown else []
        )

    before = [p.describe() for p in writer.problems()]
    meta.update(status="finished", end_time_unix_s=time.time())
    note(before)
    finished = writer.write_meta(meta)
    writer.close()
    after = [p.describe() for p in writer.problems()]
    if after != before:
        note(after)
        finished = writer.write_meta(meta) or finished  # best effort: the disk may have run out there
        after = [p.describe() for p in writer.problems()]
    return after, finished


def _result(code: int, sig: int | None, session_dir: Path, warnings: list[str], problems: list[str],
            recorded: bool, finished: bool, warn: Callable[[str], None], launched: bool = True) -> RunResult:
    result = RunResult(code, sig, session_dir, tuple(warnings), tuple(problems), recorded, finished, launched)
    line = result.problem_line()
    if line and recorded:
        warn(line)
    return result
