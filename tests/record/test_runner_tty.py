"""Terminal job control: Ctrl-C at a terminal reaches the job once, and the job owns the terminal."""

from __future__ import annotations

import os
import select
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="uses a Linux pseudo-terminal")

_CHILD = r"""
import os, signal, sys, time
count = []
def on_int(signum, frame):
    count.append(signum)
signal.signal(signal.SIGINT, on_int)
fg = os.tcgetpgrp(0) == os.getpgrp()
print('FG' if fg else 'BG', flush=True)
line = sys.stdin.readline()  # reading the terminal must work (no SIGTTIN stop)
print('READ:' + line.strip(), flush=True)
deadline = time.time() + 20
while not count and time.time() < deadline:
    time.sleep(0.05)
time.sleep(0.5)  # a second delivery (double forwarding) would arrive here
print('SIGINTS:%d' % len(count), flush=True)
sys.exit(len(count) + 40)
"""


def _read_until(fd: int, needle: bytes, timeout_s: float = 60.0) -> bytes:
    buf = b""
    deadline = time.monotonic() + timeout_s
    while needle not in buf and time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
    return buf


def test_ctrl_c_at_a_terminal_reaches_the_job_exactly_once(tmp_path: Path) -> None:
    import pty

    pid, fd = pty.fork()
    if pid == 0:  # child: a session leader with the pty as controlling terminal, like a shell's job
        os.execv(sys.executable, [sys.executable, "-m", "gpuprof", "run", "--no-report", "--out",
                                  str(tmp_path / "s"), "--", sys.executable, "-c", _CHILD])
    try:
        out = _read_until(fd, b"FG")
        assert b"FG" in out, out  # the job is the terminal's foreground group
        os.write(fd, b"hello\n")
        out += _read_until(fd, b"READ:hello")
        assert b"READ:hello" in out, out
        os.write(fd, b"\x03")  # Ctrl-C, as typed
        out += _read_until(fd, b"SIGINTS:")
        out += _read_until(fd, b"\n", timeout_s=5)
        assert b"SIGINTS:1" in out, out
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 41
    finally:
        try:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(fd)


_SLEEPER = r"""
import sys, time
print('UP', flush=True)
line = sys.stdin.readline()
print('AGAIN:' + line.strip(), flush=True)
"""


def test_ctrl_z_stops_gpuprof_with_the_job_and_fg_resumes_both(tmp_path: Path) -> None:
    import pty
    import signal

    pid, fd = pty.fork()
    if pid == 0:
        os.execv(sys.executable, [sys.executable, "-m", "gpuprof", "run", "--no-report", "--out",
                                  str(tmp_path / "s"), "--", sys.executable, "-c", _SLEEPER])
    try:
        assert b"UP" in _read_until(fd, b"UP")
        os.write(fd, b"\x1a")  # Ctrl-Z
        _, status = os.waitpid(pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status)  # the shell sees the job (gpuprof) stopped
        # `fg`: the shell gives the terminal back to gpuprof's group and continues it.
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.3)
        os.write(fd, b"back\n")
        assert b"AGAIN:back" in _read_until(fd, b"AGAIN:back")
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    finally:
        try:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(fd)
