"""Standard streams that are closed, full or broken, for every command (issue 20, cases 1-3,
5-8, 17, 18; docs/reliability.md "Standard streams").

These run gpuprof as a real process: what is under test is what the interpreter and the
operating system do with descriptors 0-2, which an in-process run cannot show.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from clirun import run_cli

pytestmark = pytest.mark.skipif(os.name != "posix", reason="file descriptors and signals are POSIX")

ROOT = Path(__file__).resolve().parents[2]
STRAGGLER = ROOT / "sample_traces" / "straggler"
GPUPROF = [sys.executable, "-m", "gpuprof"]


def _closing(fds: tuple[int, ...]):  # type: ignore[no-untyped-def]
    """A preexec_fn that starts the process with ``fds`` closed, as ``>&-`` does."""

    def close() -> None:
        for fd in fds:
            os.close(fd)

    return close


def gpuprof(*args: str, close: tuple[int, ...] = (), **kw: object) -> subprocess.CompletedProcess[bytes]:
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    return subprocess.run([*GPUPROF, *args], preexec_fn=_closing(close), timeout=120, check=False, **kw)  # type: ignore[call-overload]


def lines(data: bytes) -> list[str]:
    return [line for line in data.decode("utf-8", "replace").splitlines() if line.strip()]


# --- gpuprof run: the job's exit code, whatever gpuprof's own streams are -------------------


def test_run_started_with_sigchld_ignored_exits_with_the_jobs_code(tmp_path: Path) -> None:
    # Some supervisors start their children with SIGCHLD ignored: the kernel then reaps them
    # and waitpid() had no status to give (gpuprof used to exit 0).
    probe = "import signal, sys; sys.exit(3 if signal.getsignal(signal.SIGCHLD) == signal.SIG_IGN else 4)"
    launcher = (
        "import os, signal, sys; signal.signal(signal.SIGCHLD, signal.SIG_IGN); "
        f"os.execv(sys.executable, {[*GPUPROF, 'run', '--no-hooks', '--no-report', '--out', str(tmp_path / 's'), '--', sys.executable, '-c', probe]!r})"
    )
    p = subprocess.run([sys.executable, "-c", launcher], capture_output=True, timeout=120, check=False)
    # 3: the job's own code, and the job saw SIGCHLD ignored, as it would have without gpuprof.
    assert p.returncode == 3, p.stderr.decode()


def test_run_with_stdout_closed_exits_with_the_jobs_code(tmp_path: Path) -> None:
    # The job sees its stdout closed, as without gpuprof (exit 4 if so), and gpuprof's own
    # files never take descriptor 1.
    probe = "import os, sys; sys.exit(4 if sys.stdout is None else 5)"
    p = gpuprof("run", "--no-hooks", "--out", str(tmp_path / "s"), "--", sys.executable, "-c", probe, close=(1,))
    assert p.returncode == 4, p.stderr.decode()
    assert b"Traceback" not in p.stderr


def test_run_with_stderr_into_a_closed_pipe_exits_with_the_jobs_code(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [*GPUPROF, "run", "--no-hooks", "--out", str(tmp_path / "s"), "--", "sh", "-c", "sleep 1; exit 3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert proc.stdout is not None
    proc.stdout.close()  # `2>&1 | true`: the reader is gone before gpuprof says anything
    assert proc.wait(timeout=120) == 3


# --- every command: stdout closed, full or broken; stderr closed ---------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["analyze", str(STRAGGLER)],
        ["check", str(STRAGGLER), "--no-config", "--min-compute-pct", "1"],
        ["schema"],
    ],
    ids=["analyze", "check", "schema"],
)
def test_closed_stdout_is_one_line_and_exit_2(args: list[str]) -> None:
    p = gpuprof(*args, close=(1,))
    assert p.returncode == 2, p.stderr.decode()
    assert len(lines(p.stderr)) == 1 and "standard output: it is closed" in p.stderr.decode()


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_full_stdout_is_one_line_and_exit_2() -> None:
    with open("/dev/full", "wb") as full:
        p = gpuprof("analyze", str(STRAGGLER), stdout=full)
    assert p.returncode == 2
    assert lines(p.stderr) == ["gpuprof: cannot write the report to standard output: No space left on device"]


def _into_closed_pipe(*args: str) -> tuple[int, bytes]:
    proc = subprocess.Popen([*GPUPROF, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # `| true`
    err = proc.stderr.read()
    return proc.wait(timeout=120), err


def test_check_into_a_closed_pipe_exits_with_its_verdict() -> None:
    code, err = _into_closed_pipe("check", str(STRAGGLER), "--no-config", "--min-compute-pct", "1")
    assert code == 0 and b"Traceback" not in err  # every check passed
    code, err = _into_closed_pipe("check", str(STRAGGLER), "--no-config", "--min-compute-pct", "99")
    assert code == 1 and b"Traceback" not in err  # a check failed: still the gate's answer


def test_analyze_into_a_closed_pipe_exits_141_quietly() -> None:
    code, err = _into_closed_pipe("analyze", str(STRAGGLER))
    assert code == 128 + signal.SIGPIPE
    assert lines(err) == []


def test_closed_stderr_says_nothing_and_exits_2() -> None:
    p = gpuprof("analyze", "/nonexistent/trace.json", close=(2,))
    assert p.returncode == 2
    assert p.stdout == b""  # the error line used to go to stdout (print(file=None))


# --- what reaches the terminal: file names are shown, never obeyed ---------------------------


def test_control_characters_in_a_file_name_never_reach_the_terminal(tmp_path: Path) -> None:
    bad = tmp_path / "bad\x1b]52;c;SGFjaw==\x07\x1b[2J.json"
    bad.write_text("x")
    r = run_cli("analyze", str(bad))
    assert r.code == 2 and len(r.stderr_lines) == 1
    assert "\x1b" not in r.stderr and "\x07" not in r.stderr
    assert "bad\\x1b]52;c;SGFjaw==\\x07\\x1b[2J.json" in r.stderr  # shown, escaped


def test_a_newline_in_a_file_name_cannot_forge_a_second_line(tmp_path: Path) -> None:
    r = run_cli("analyze", str(tmp_path / "x\ngpuprof: all checks passed"))
    assert r.code == 2
    assert r.stderr_lines == [f"gpuprof: {tmp_path}/x\\ngpuprof: all checks passed: no such file or folder"]
