"""Supervisors and signals around ``gpuprof run`` (issue 33, items 1-3), on real processes.

The rules (gpuprof/record/jobsignals.py, docs/reliability.md): the job starts with the
dispositions and mask it would have had without gpuprof; what gpuprof receives, the job
receives, and nothing gpuprof was started ignoring; the job never outlives gpuprof; once
the job ended, its exit code is gpuprof's, whatever signal arrives.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="process groups, /proc: Linux")

GPUPROF = [sys.executable, "-m", "gpuprof", "run", "--no-live", "--no-hooks"]

# The job: prints its pid, its grandchild's pid and how it found its signals, then waits for
# a file `go` (exit 0), or for a signal it handles (exit 40 + the signal number).
_JOB = r"""
import os, signal, subprocess, sys, time
here = sys.argv[1]
def status(key):
    for line in open('/proc/self/status'):
        if line.startswith(key + ':'):
            return int(line.split()[1], 16)
names = ['SIGHUP', 'SIGINT', 'SIGQUIT', 'SIGTERM', 'SIGUSR1', 'SIGUSR2', 'SIGALRM']
ign = [n for n in names if status('SigIgn') >> (getattr(signal, n) - 1) & 1]
blk = [n for n in names if status('SigBlk') >> (getattr(signal, n) - 1) & 1]
for n in sys.argv[2:]:  # NAME: exit 40 + N on it; NAME=ignore: ignore it
    if n.endswith('=ignore'):
        signal.signal(getattr(signal, n[:-7]), signal.SIG_IGN)
    else:
        signal.signal(getattr(signal, n), lambda s, f: os._exit(40 + s))
grand = subprocess.Popen(['sleep', '300'])
print('PIDS', os.getpid(), grand.pid, 'IGN', ','.join(ign) or '-', 'BLK', ','.join(blk) or '-', flush=True)
while not os.path.exists(os.path.join(here, 'go')):
    time.sleep(0.02)
grand.kill()
sys.exit(0)
"""


def _alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting for a parent that may never reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def _wait_until(pred: Callable[[], bool], timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


class Run:
    """``gpuprof run`` of the job above, started as ``preexec`` leaves the process."""

    def __init__(self, tmp: Path, preexec: Callable[[], None] | None = None, handles: tuple[str, ...] = (),
                 report: bool = False, new_group: bool = False, hooks: bool = False) -> None:
        self.tmp = tmp
        opts = [] if report else ["--no-report"]
        gpuprof = [a for a in GPUPROF if a != "--no-hooks"] if hooks else GPUPROF
        self.proc = subprocess.Popen(
            [*gpuprof, *opts, "--out", str(tmp / "s"), "--", sys.executable, "-c", _JOB, str(tmp), *handles],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=preexec, start_new_session=new_group,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        assert line and line[0] == "PIDS", (line, self.proc.stderr.read() if self.proc.stderr else "")
        self.job, self.grand = int(line[1]), int(line[2])
        self.ignored = set(line[4].split(","))
        self.blocked = set(line[6].split(","))

    def go(self) -> int:
        (self.tmp / "go").write_text("")
        return self.proc.wait(timeout=60)

    def cleanup(self) -> None:
        for pid in (self.job, self.grand):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)


@pytest.fixture
def runs() -> Iterator[list[Run]]:
    started: list[Run] = []
    yield started
    for r in started:
        r.cleanup()


def _ignoring(*names: str) -> Callable[[], None]:
    def setup() -> None:
        for n in names:
            signal.signal(getattr(signal, n), signal.SIG_IGN)
    return setup


# -- item 1: dispositions and mask ---------------------------------------------------------

@pytest.mark.parametrize("name", ["SIGHUP", "SIGINT", "SIGQUIT", "SIGTERM"])
def test_a_signal_gpuprof_was_started_ignoring_stays_ignored_and_is_not_forwarded(
        tmp_path: Path, runs: list[Run], name: str) -> None:
    # nohup (SIGHUP), a script's `cmd &` (SIGINT, SIGQUIT): the job inherits them ignored.
    run = Run(tmp_path, preexec=_ignoring(name))
    runs.append(run)
    assert name in run.ignored  # was: gpuprof's handler over SIG_IGN, the job started at default
    run.proc.send_signal(getattr(signal, name))
    time.sleep(0.3)  # time for a (wrong) forward to arrive
    assert _alive(run.job)
    assert run.go() == 0


def test_the_job_gets_the_signal_mask_gpuprof_was_started_with(tmp_path: Path, runs: list[Run]) -> None:
    run = Run(tmp_path, preexec=lambda: signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2}))
    runs.append(run)
    assert run.blocked == {"SIGUSR2"}
    assert run.ignored == {"-"}  # nothing else changed on the way
    assert run.go() == 0


# -- item 2: the job never outlives gpuprof, and gets what gpuprof gets ------------------------

@pytest.mark.parametrize("name", ["SIGUSR1", "SIGUSR2", "SIGALRM"])
def test_user_signals_and_alarms_sent_to_gpuprof_reach_the_job(tmp_path: Path, runs: list[Run], name: str) -> None:
    run = Run(tmp_path, handles=(name,))
    runs.append(run)
    run.proc.send_signal(getattr(signal, name))
    # The job's handler exits 40 + N: gpuprof forwarded it and exits with the job's code
    # (was: gpuprof died of it, 128 + N, and the job ran on).
    assert run.proc.wait(timeout=60) == 40 + getattr(signal, name)


def test_usr1_reaches_the_job_while_windows_are_followed(tmp_path: Path, runs: list[Run]) -> None:
    """With the hooks on, gpuprof follows the run for profiling windows (issue 31); a
    supervisor's SIGUSR1 (Slurm's warning before preemption) is still the job's, and the
    window trigger is a real-time signal that is not forwarded."""
    from gpuprof.record.windows import TRIGGER_SIGNAL

    run = Run(tmp_path, handles=("SIGUSR1",), hooks=True)
    runs.append(run)
    if TRIGGER_SIGNAL is not None:
        time.sleep(0.5)  # the window controller is up
        run.proc.send_signal(TRIGGER_SIGNAL)
        time.sleep(0.3)
        assert _alive(run.job) and run.proc.poll() is None  # asked for a window: nobody ends
    run.proc.send_signal(signal.SIGUSR1)
    assert run.proc.wait(timeout=60) == 40 + signal.SIGUSR1


def test_sigkill_of_gpuprof_ends_the_whole_job(tmp_path: Path, runs: list[Run]) -> None:
    run = Run(tmp_path)
    runs.append(run)
    run.proc.kill()  # kill -9 PID: nothing in gpuprof runs
    run.proc.wait(timeout=30)
    assert _wait_until(lambda: not _alive(run.job) and not _alive(run.grand)), "the job outlived gpuprof"


def test_timeout_s_kill_to_gpuprofs_group_ends_the_whole_job(tmp_path: Path, runs: list[Run]) -> None:
    # What `timeout -s KILL T gpuprof run -- JOB` does when T is up: SIGKILL to gpuprof, then
    # to timeout's own process group (gpuprof's).
    run = Run(tmp_path, new_group=True)
    runs.append(run)
    os.killpg(run.proc.pid, signal.SIGKILL)
    run.proc.wait(timeout=30)
    assert _wait_until(lambda: not _alive(run.job) and not _alive(run.grand)), "the job outlived gpuprof"


def test_timeout_k_ends_a_job_that_ignores_sigterm(tmp_path: Path, runs: list[Run]) -> None:
    # `timeout -k D T`: SIGTERM to gpuprof's group when T is up (forwarded; the job ignores
    # it), then SIGKILL D seconds later.
    run = Run(tmp_path, new_group=True, handles=("SIGTERM=ignore",))
    runs.append(run)
    os.killpg(run.proc.pid, signal.SIGTERM)
    time.sleep(0.3)  # time for the forwarded SIGTERM to arrive (and be ignored)
    assert _alive(run.job) and run.proc.poll() is None
    os.killpg(run.proc.pid, signal.SIGKILL)
    run.proc.wait(timeout=30)
    assert _wait_until(lambda: not _alive(run.job) and not _alive(run.grand)), "the job outlived gpuprof"


# -- item 3: after the job ended, its exit code is the answer ---------------------------------

_EXIT5 = "import os, sys; print(os.getpid(), flush=True); sys.exit(5)"


@pytest.mark.parametrize("name", ["SIGTERM", "SIGHUP", "SIGQUIT", "SIGINT", "SIGUSR1"])
def test_a_signal_while_the_report_is_written_keeps_the_jobs_exit_code(tmp_path: Path, name: str) -> None:
    proc = subprocess.Popen([*GPUPROF, "--out", str(tmp_path / "s"), "--", sys.executable, "-c", _EXIT5],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        job = int(proc.stdout.readline())
        # Once gpuprof has reaped the job, it closes the session and writes the report: send
        # the signal again and again through all of that until gpuprof exits.
        assert _wait_until(lambda: not os.path.exists(f"/proc/{job}"))
        while proc.poll() is None:
            with_signal = getattr(signal, name)
            try:
                proc.send_signal(with_signal)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        err = proc.stderr.read() if proc.stderr else ""
        assert proc.wait(timeout=60) == 5, err  # was 143 / 129 / 131 / 138, and no report
        assert "Traceback" not in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
