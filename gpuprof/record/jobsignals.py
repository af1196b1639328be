"""Signals between a supervisor, ``gpuprof run`` and the job: the rules, in one place.

gpuprof stands between whoever started it (a shell, ``timeout``, ``nohup``, systemd, Slurm,
a Python supervisor) and the job. The job must notice no difference:

* **Dispositions and mask are the job's, as without gpuprof.** A signal gpuprof was started
  with ignored (``nohup`` ignores SIGHUP; a non-interactive shell's ``cmd &`` ignores SIGINT
  and SIGQUIT) stays ignored in gpuprof and so in the job, and is never forwarded: the job
  would not have seen it. gpuprof installs its handlers only over signals that were not
  ignored; handlers are reset to the default by ``exec``, so the job starts with each
  signal as gpuprof found it, and with the same mask (gpuprof blocks nothing).
  SIGPIPE and SIGXFSZ are the exception Python makes for every program it runs: the
  interpreter ignores both before gpuprof's first line and does not keep how they were, so
  the job gets them at their default, as from a shell.
* **What gpuprof receives, the job receives.** The job runs in a process group of its own,
  as a shell runs a job (so that the terminal's Ctrl-C, Ctrl-\\ and Ctrl-Z reach it once,
  see :mod:`gpuprof.record.runner`). Every signal that would end gpuprof and that it was not
  started ignoring -- HUP, INT, QUIT, TERM, USR1, USR2, ALRM -- is caught and sent on to the
  job's group, once; a signal sent to gpuprof's group reaches gpuprof, which forwards it.
* **The job never outlives gpuprof.** What gpuprof cannot catch (SIGKILL: ``timeout -s
  KILL``, ``timeout -k``, ``kill -9``, the OOM killer; or a crash) would leave the job's
  group running unsupervised. A watchdog process (:class:`Watchdog`), in a session of its
  own so that no group or terminal signal reaches it, holds the read end of a pipe only
  gpuprof writes to; when gpuprof is gone the pipe closes and the watchdog sends SIGKILL to
  the job's whole group -- what the job would have received from the supervisor without
  gpuprof. ``PR_SET_PDEATHSIG`` was the other candidate: Linux only, and it reaches the job's
  first process alone, not the workers a launcher such as torchrun starts.
* **After the job ended, its exit code is the answer.** From the moment the job is reaped,
  a signal no longer has anyone to go to: while gpuprof closes the session it is noted, and
  while gpuprof writes its report it stops the report (:class:`LateSignal`); either way
  gpuprof exits with the job's code, never 128+N of a signal the job did not die of.
  SIGKILL alone is beyond this rule (exit 137, no report).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

# What gpuprof catches and forwards: every signal a supervisor sends that ends a process by
# default. Terminal stops (TSTP, TTIN, TTOU) reach the job's group from the terminal itself;
# SIGPIPE, SIGXFSZ, SIGXCPU and the profiling timers are about gpuprof's own process.
FORWARDED_SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name)
    for name in ("SIGHUP", "SIGINT", "SIGQUIT", "SIGTERM", "SIGUSR1", "SIGUSR2", "SIGALRM")
    if hasattr(signal, name)
)


class LateSignal(BaseException):
    """A signal arrived after the job ended, while gpuprof wrote its report.

    A ``BaseException`` like ``KeyboardInterrupt``: no ``except Exception`` on the way
    (which turns internal errors into a line) may swallow it.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal_name(self.signum)


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def ignored_at_start(signals: tuple[int, ...] = FORWARDED_SIGNALS) -> frozenset[int]:
    """The signals of ``signals`` this process holds ignored (as it was started, unless
    someone changed them since): never caught, never forwarded."""
    out = set()
    for s in signals:
        try:
            if signal.getsignal(s) is signal.SIG_IGN:
                out.add(s)
        except (ValueError, OSError):
            continue
    return frozenset(out)


class SignalRelay:
    """gpuprof's handlers for :data:`FORWARDED_SIGNALS`, from before the job starts until
    gpuprof exits (see the module docstring for the rules).

    Before :meth:`attach`, a signal is kept and delivered once the job's group exists; while
    the job runs, it goes to the group; after :meth:`job_ended`, it is noted in
    :attr:`late` and, inside :meth:`interrupting`, raised as :class:`LateSignal`.
    """

    def __init__(self) -> None:
        self.ignored = ignored_at_start()
        self.pgid: int | None = None
        self.seen: list[int] = []  # forwarded to the job (or to be, once it exists)
        self.late: list[int] = []  # arrived after the job ended
        self._ended = False
        self._interruptible = False
        self._old: dict[int, Any] = {}

    def install(self) -> SignalRelay:
        for s in FORWARDED_SIGNALS:
            if s in self.ignored:
                continue  # the job inherits it ignored; gpuprof keeps it so
            try:
                self._old[s] = signal.signal(s, self._handler)
            except (ValueError, OSError):  # not the main thread: nothing is caught, as before
                break
        return self

    def restore(self) -> None:
        for s, old in self._old.items():
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(s, old)
        self._old.clear()

    def __enter__(self) -> SignalRelay:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.restore()

    def _handler(self, signum: int, frame: Any) -> None:
        if self._ended:
            self.late.append(signum)
            if self._interruptible:
                self._interruptible = False  # once: the report stops, the rest runs through
                raise LateSignal(signum)
            return
        self.seen.append(signum)
        if self.pgid is not None:
            _send(self.pgid, signum)

    def attach(self, pgid: int) -> None:
        """The job's process group exists: deliver what arrived before, forward from now on."""
        self.pgid = pgid
        for signum in self.seen:
            _send(pgid, signum)

    def job_ended(self) -> None:
        """The job was reaped: nothing is forwarded any more (its group id may be reused)."""
        self.pgid = None
        self._ended = True

    def settle(self) -> None:
        """gpuprof is about to exit with the job's code: from now on every signal of the
        relay is ignored, so that none turns the exit into 128+N. (Python's finalization
        resets handlers written in Python to the default, never an ignored signal.)"""
        for s in list(self._old):
            with contextlib.suppress(ValueError, OSError):
                signal.signal(s, signal.SIG_IGN)

    @contextlib.contextmanager
    def interrupting(self) -> Iterator[None]:
        """While the report is written: a signal (or one that came after the job ended and
        before this) stops it with :class:`LateSignal`."""
        if self.late:
            raise LateSignal(self.late[0])
        self._interruptible = True
        try:
            yield
        finally:
            self._interruptible = False


def _send(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


# The watchdog's whole program (run with -I -S: no site, no user paths, no gpuprof import).
# It reads its standard input, the read end of a pipe only gpuprof holds open for writing:
# a byte means "the job ended, stand down"; end of file means gpuprof is gone.
_WATCHDOG = """\
import os, signal, sys
for name in ("SIGHUP", "SIGINT", "SIGQUIT", "SIGTERM", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGPIPE"):
    if hasattr(signal, name):
        signal.signal(getattr(signal, name), signal.SIG_IGN)
try:
    data = os.read(0, 1)
except OSError:
    data = b""
if not data:
    try:
        os.killpg(int(sys.argv[1]), signal.SIGKILL)
    except OSError:
        pass
"""


class Watchdog:
    """Sends SIGKILL to the job's process group if gpuprof disappears while the job runs.

    A small Python process in a session of its own (no group signal, no terminal signal
    reaches it), started right after the job. :meth:`stand_down` once the job is reaped.
    Best effort: where it cannot start (no interpreter to run), the job runs without it.
    """

    def __init__(self, pgid: int) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._write_fd: int | None = None
        if not sys.executable:
            return
        read_fd, write_fd = os.pipe()  # neither end is inherited by the job (non-inheritable)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _WATCHDOG, str(pgid)],
                stdin=read_fd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True, close_fds=True,
            )
        except (OSError, ValueError, subprocess.SubprocessError):
            os.close(write_fd)
            return
        finally:
            os.close(read_fd)
        self._write_fd = write_fd

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def stand_down(self) -> None:
        """The job ended: the watchdog exits without touching anything."""
        if self._write_fd is not None:
            with contextlib.suppress(OSError):
                os.write(self._write_fd, b"x")
            with contextlib.suppress(OSError):
                os.close(self._write_fd)
            self._write_fd = None
        if self._proc is not None:
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    self._proc.kill()
                with contextlib.suppress(Exception):
                    self._proc.wait(timeout=5)
            except ChildProcessError:  # reaped by someone else (SIGCHLD ignored elsewhere)
                pass
            self._proc = None


__all__ = ["FORWARDED_SIGNALS", "LateSignal", "SignalRelay", "Watchdog", "ignored_at_start", "signal_name"]
