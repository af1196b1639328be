"""The live status line of ``gpuprof run``: rendered with a fake clock and fake sampler
data into a rich Console, the incremental hook reader, the bottom-row drawing, and a real
run on a pseudo-terminal (and none when stderr is not a terminal)."""

from __future__ import annotations

import io
import json
import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rich.text import Text

from gpuprof.record.backend import GpuSample
from gpuprof.record.hooktail import HookTail, ProcessState
from gpuprof.record.live import (
    BottomRow,
    GpuStatus,
    LiveStatus,
    StatusLine,
    StatusSnapshot,
    profiler_phase,
    terminal_live_status,
)


def _plain(console_text: str) -> str:
    return Text.from_ansi(console_text).plain


def _render(snapshot: StatusSnapshot, width: int = 160) -> str:
    console = Console(file=io.StringIO(), force_terminal=True, width=width)
    console.print(StatusLine(snapshot))
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert "\x1b[" in out  # a terminal gets colours ...
    return _plain(out).rstrip("\n")  # ... the test compares text


GIB = 1 << 30


def _snap(**kw: Any) -> StatusSnapshot:
    base: dict[str, Any] = dict(elapsed_s=83.0, steps=412, steps_per_s=3.2, since_step_s=None,
                                phase="recording step 2 of 3",
                                gpus=(GpuStatus(0, 87.0, int(41.2 * GIB), 80 * GIB, 312.0),
                                      GpuStatus(1, None, None, 80 * GIB, None)))
    base.update(kw)
    return StatusSnapshot(**base)


def test_status_line_shows_time_steps_phase_and_each_gpu() -> None:
    line = _render(_snap())
    assert line == ("gpuprof 1:23 │ step 412 · 3.2/s │ profiler recording step 2 of 3 │ "
                    "GPU0 87% 41.2/80.0 GiB 312 W │ GPU1 N/A N/A/80.0 GiB N/A")


def test_status_line_summarizes_many_gpus_when_narrow_and_never_wraps() -> None:
    gpus = tuple(GpuStatus(i, 90.0 - (40 if i == 5 else 0), 60 * GIB, 80 * GIB, 650.0) for i in range(8))
    line = _render(_snap(gpus=gpus, phase="trace written"), width=120)
    assert "8 GPUs util 85% (min 50% GPU5), mem 60.0/80.0 GiB max, 5.2 kW" in line
    narrow = _render(_snap(gpus=gpus), width=40)
    assert "\n" not in narrow and len(narrow) <= 40 and narrow.endswith("…")


def test_status_line_before_the_first_step_and_when_stalled() -> None:
    assert _render(_snap(steps=None, steps_per_s=None, phase=None, gpus=())) == "gpuprof 1:23 │ no step yet"
    stalled = _render(_snap(since_step_s=75.0, phase=None, gpus=()))
    assert stalled == "gpuprof 1:23 │ step 412 · 3.2/s · no step for 1:15"


def test_profiler_phase_follows_the_hooks_schedule() -> None:
    sched = (2, 1, 3)
    assert profiler_phase([], sched) == "waiting (3 steps, then 3 recorded)"
    p = ProcessState(pid=1, step=1, profiler_start_step=1)
    assert profiler_phase([p], sched) == "waiting (2 more steps)"
    p.step = 3
    assert profiler_phase([p], sched) == "warm-up"
    p.step = 4
    assert profiler_phase([p], sched) == "recording step 1 of 3"
    p.step = 6
    assert profiler_phase([p], sched) == "recording step 3 of 3"
    p.step = 7
    assert profiler_phase([p], sched) == "writing the trace"
    p.trace_written = True
    assert profiler_phase([p], sched) == "trace written"
    assert profiler_phase([p], (2, 1, 0)) is None  # --profile-active 0: no profiler
    assert profiler_phase([ProcessState(pid=2, profiler_note="own")], sched) == "off (the job runs its own profiler)"
    assert profiler_phase([ProcessState(pid=3, errors=["trace export"])], sched).startswith("failed")  # type: ignore[union-attr]


def _hook_line(pid: int, kind: str, t: float, **kw: Any) -> str:
    return json.dumps({"time_unix_s": t, "kind": kind, "rank": 0, "pid": pid, **kw}, separators=(",", ":")) + "\n"


def test_hook_tail_reads_only_what_was_appended_and_waits_for_torn_lines(tmp_path: Path) -> None:
    f = tmp_path / "rank0-7.jsonl"
    first = _hook_line(7, "start", 100.0) + _hook_line(7, "profiler_start", 100.1, step=1)
    first += "".join(_hook_line(7, "step", 100.0 + i, step=i) for i in range(1, 6))
    f.write_text(first)
    tail = HookTail(tmp_path)
    tail.poll()
    assert tail.processes[7].step == 5 and tail.processes[7].profiler_start_step == 1
    torn = _hook_line(7, "step", 106.0, step=6)
    with open(f, "a") as fh:
        fh.write(torn[:10])  # the job is mid-write
    tail.poll()
    assert tail.processes[7].step == 5
    with open(f, "a") as fh:
        fh.write(torn[10:] + _hook_line(7, "trace", 107.0, path="traces/rank0.pt.trace.json.gz"))
    tail.poll()
    tail.poll()  # nothing new: nothing read
    p = tail.processes[7]
    assert p.step == 6 and p.step_time_unix_s == 106.0 and p.trace_written
    assert tail.bytes_read == f.stat().st_size  # every byte read exactly once


class _FakeSampler:
    def __init__(self) -> None:
        self.latest = {0: GpuSample(gpu=0, uuid="GPU-0", util_gpu_pct=55.0, mem_used_bytes=10 * GIB,
                                    mem_total_bytes=80 * GIB, power_w=250.0)}


class _Rows:
    def __init__(self, cols: int = 120, rows: int = 24) -> None:
        self.cols, self.rows = cols, rows
        self.out: list[str] = []

    def write(self, text: str) -> None:
        self.out.append(text)

    def size(self) -> tuple[int, int]:
        return self.cols, self.rows


def test_live_status_from_hook_files_and_sampler_with_a_fake_clock(tmp_path: Path) -> None:
    (tmp_path / "hooks").mkdir()
    now = [1000.0]
    wall = [5000.0]
    f = tmp_path / "hooks" / "rank0-9.jsonl"
    f.write_text(_hook_line(9, "start", 4990.0) + _hook_line(9, "profiler_start", 4990.0, step=1)
                 + "".join(_hook_line(9, "step", 4990.0 + 0.5 * i, step=i) for i in range(1, 5)))
    console = Console(file=io.StringIO(), force_terminal=True, width=200)
    rows = _Rows()
    live = LiveStatus(tmp_path, (1, 1, 3), console, BottomRow(rows.write, rows.size),
                      clock=lambda: now[0], wall=lambda: wall[0], interval_s=3600)
    live.sampler = _FakeSampler()  # type: ignore[assignment]
    now[0] += 65.0
    wall[0] = 4992.2
    first = _plain(live.render())
    assert first == ("gpuprof 1:05 │ step 4 │ profiler recording step 2 of 3 │ "
                     "GPU0 55% 10.0/80.0 GiB 250 W")
    with open(f, "a") as fh:
        fh.write("".join(_hook_line(9, "step", 4990.0 + 0.5 * i, step=i) for i in range(5, 9)))
    wall[0] = 4994.1
    second = _plain(live.render())
    assert "step 8 · 2/s" in second and "writing the trace" in second


def test_bottom_row_keeps_the_jobs_lines_scrolling_above_it() -> None:
    rows = _Rows(cols=80, rows=24)
    row = BottomRow(rows.write, rows.size)
    assert row.setup()
    assert rows.out[-1] == "\n\x1b7\x1b[1;23r\x1b8\x1b[1A"  # rows 1-23 scroll; row 24 is ours
    row.draw("status")
    assert rows.out[-1] == "\x1b7\x1b[24;1H\x1b[2Kstatus\x1b8"  # drawn with the cursor saved and restored
    rows.rows = 30  # the terminal was resized
    row.draw("again")
    assert "\x1b[r" in "".join(rows.out[-3:]) and "\x1b[1;29r" in "".join(rows.out[-3:])
    assert rows.out[-1] == "\x1b7\x1b[30;1H\x1b[2Kagain\x1b8"
    row.teardown()
    assert rows.out[-1] == "\x1b7\x1b[30;1H\x1b[2K\x1b[r\x1b8"  # the row cleared, the whole screen scrolls again
    n = len(rows.out)
    row.draw("after the end")
    assert len(rows.out) == n  # nothing drawn once torn down


def test_no_live_status_when_stderr_is_not_a_terminal(tmp_path: Path) -> None:
    r, w = os.pipe()
    try:
        assert terminal_live_status(tmp_path, (5, 2, 3), fd=w) is None
    finally:
        os.close(r)
        os.close(w)
    with open(tmp_path / "f", "w") as fh:
        assert terminal_live_status(tmp_path, (5, 2, 3), fd=fh.fileno()) is None


def test_a_run_with_stderr_not_a_terminal_draws_nothing(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "gpuprof", "run", "--no-report", "--out", str(tmp_path / "s"), "--",
                        sys.executable, "-c", "import time; print('a', flush=True); time.sleep(1.2); print('b')"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout == "a\nb\n"
    assert "\x1b" not in p.stderr and "\x1b" not in p.stdout


_CHATTY = r"""
import sys, time
for i in range(4):
    print(f'job line {i}', flush=True)
    time.sleep(0.4)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="uses a Linux pseudo-terminal")
def test_live_status_on_a_terminal_stays_below_the_jobs_output(tmp_path: Path) -> None:
    import pty

    pid, fd = pty.fork()
    if pid == 0:
        os.environ["TERM"] = "xterm-256color"
        os.execv(sys.executable, [sys.executable, "-m", "gpuprof", "run", "--no-report", "--out",
                                  str(tmp_path / "s"), "--", sys.executable, "-c", _CHATTY])
    out = b""
    try:
        import fcntl
        import struct
        import termios

        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            r, _, _ = select.select([fd], [], [], 0.2)
            if r:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    finally:
        try:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(fd)
    text = out.decode("utf-8", "replace")
    assert "\x1b[1;23r" in text  # the bottom row was taken out of the scrolling region
    drawn = re.findall(r"\x1b7\x1b\[24;1H\x1b\[2K(.*?)\x1b8", text)  # what went to the bottom row
    assert any(re.sub(r"\x1b\[[0-9;]*m", "", d).startswith("gpuprof 0:0") for d in drawn), drawn
    for i in range(4):
        assert f"job line {i}\r\n" in text  # the job's lines arrive whole, never split by the status
    assert text.rstrip().endswith("\x1b[r\x1b8") or "\x1b[r\x1b8" in text[text.index("job line 3"):]


def test_status_line_shows_the_latest_window_and_the_slowest_rank() -> None:
    line = _render(_snap(phase="trace written", gpus=(),
                         window="window 3 @1200: dataloader, saves 38.0 ms/step (31%)",
                         slowest="slowest rank 5 (+52.0 ms before backward)"))
    assert line == ("gpuprof 1:23 │ step 412 · 3.2/s │ profiler trace written │ "
                    "window 3 @1200: dataloader, saves 38.0 ms/step (31%) │ slowest rank 5 (+52.0 ms before backward)")


def test_live_status_asks_the_window_controller(tmp_path: Path) -> None:
    from gpuprof.record.windows import WindowsStatus

    (tmp_path / "hooks").mkdir()
    live = LiveStatus(tmp_path, None, Console(file=io.StringIO(), force_terminal=True, width=200),
                      BottomRow(_Rows().write, _Rows().size), interval_s=3600,
                      windows=lambda: WindowsStatus(window="window 1: steps 50-52 (change)", slowest=None))
    snap = live.snapshot()
    assert snap.window == "window 1: steps 50-52 (change)" and snap.slowest is None
