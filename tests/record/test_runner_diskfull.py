"""``gpuprof run`` on a full disk: the job runs, its exit code comes back, the session is
finished when it can be, and what could not be written is said in one line.

Two ways: a full disk injected at the session writer's seams (always runs), and a real
2 MB tmpfs (runs where this process may mount one, i.e. as root; skipped otherwise).
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from gpuprof.record.backend import BackendUnavailable
from gpuprof.record.runner import RunOptions, run_command
from gpuprof.session import writer as writer_mod
from gpuprof.session.layout import META_FILE, RESERVE_FILE

pytestmark = pytest.mark.skipif(os.name != "posix", reason="process groups and signals are POSIX")

GPUPROF = [sys.executable, "-m", "gpuprof", "run"]


def _no_driver() -> object:
    raise BackendUnavailable("no NVML here")


def test_injected_full_disk_keeps_the_exit_code_and_finishes_the_session(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "s"
    real_meta = writer_mod.write_json_atomic

    def meta_needs_the_reserve(path: Path, data: object) -> None:
        # The job filled the disk: only the space gpuprof held back makes room for metadata.
        if (out / RESERVE_FILE).exists() and data.get("status") == "finished":  # type: ignore[attr-defined]
            raise OSError(errno.ENOSPC, "No space left on device")
        real_meta(path, data)  # type: ignore[arg-type]

    def no_space(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writer_mod, "write_json_atomic", meta_needs_the_reserve)
    monkeypatch.setattr(writer_mod, "_write", no_space)
    said: list[str] = []
    res = run_command(["sh", "-c", "exit 5"], out, RunOptions(hooks=False), backend_factory=_no_driver,  # type: ignore[arg-type]
                      warn=said.append)
    assert res.exit_code == 5
    meta = json.loads((out / META_FILE).read_text())
    assert meta["status"] == "finished" and meta["exit_code"] == 5  # written once the reserve was released
    assert res.finished
    assert not (out / RESERVE_FILE).exists()
    assert any("the session is incomplete: events.jsonl: No space left on device" in w for w in meta["warnings"])
    (line,) = [s for s in said if "session incomplete" in s]
    assert f"{out / 'events.jsonl'}: No space left on device" in line


def test_injected_full_disk_for_the_metadata_too_says_so_and_keeps_the_exit_code(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_space(*args: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writer_mod, "write_json_atomic", no_space)
    monkeypatch.setattr(writer_mod, "_write", no_space)
    said: list[str] = []
    res = run_command(["sh", "-c", "exit 6"], tmp_path / "s", RunOptions(hooks=False), backend_factory=_no_driver,  # type: ignore[arg-type]
                      warn=said.append)
    assert res.exit_code == 6
    line = res.problem_line()
    assert line is not None and line.startswith(f"session incomplete: {tmp_path / 's' / META_FILE}: No space left")
    assert said[-1] == line
    assert not res.finished  # the CLI makes no report from a session it could not finish


# -- a real small disk ----------------------------------------------------------------------

@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"cannot mount a tmpfs here ({exc})")
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {p.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30)


def _fill(path: Path) -> None:
    try:
        with open(path, "wb") as fh:
            while True:
                fh.write(b"\0" * 65536)
    except OSError:
        pass


def test_job_that_fills_the_disk_gets_its_exit_code_and_a_finished_session(tiny_disk: Path) -> None:
    out = tiny_disk / "sess"
    p = subprocess.run([*GPUPROF, "--out", str(out), "--", "bash", "-c", f"cat /dev/zero > {tiny_disk}/fill; exit 5"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 5, p.stderr
    assert "Traceback" not in p.stderr
    meta = json.loads((out / META_FILE).read_text())
    assert meta["status"] == "finished" and meta["exit_code"] == 5
    assert not (out / RESERVE_FILE).exists()


def test_no_space_at_all_still_runs_the_job_and_says_why_in_one_line(tiny_disk: Path) -> None:
    _fill(tiny_disk / "fill")
    out = tiny_disk / "sess"
    p = subprocess.run([*GPUPROF, "--out", str(out), "--", "sh", "-c", "echo ran; exit 4"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 4 and p.stdout == "ran\n"
    assert "Traceback" not in p.stderr
    lines = [ln for ln in p.stderr.splitlines() if "No space left on device" in ln]
    assert len(lines) == 1 and str(out) in lines[0], p.stderr
    assert "no report" not in p.stderr  # nothing more to say than that one line


_FILLING_TRAINER = """
import sys, torch
fill = sys.argv[1]
m = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for step in range(12):
    opt.zero_grad(); m(torch.randn(8, 64)).sum().backward(); opt.step()
    if step == 1:  # the disk fills while the profiler records
        try:
            with open(fill, "wb") as fh:
                while True:
                    fh.write(b"\\0" * 65536)
        except OSError:
            pass
print("trained", flush=True)
sys.exit(3)
"""


def test_trace_that_cannot_be_written_is_said_and_leaves_no_partial_file(tiny_disk: Path) -> None:
    pytest.importorskip("torch")
    out = tiny_disk / "sess"
    p = subprocess.run([*GPUPROF, "--out", str(out), "--profile-wait", "0", "--profile-warmup", "0",
                        "--profile-active", "3", "--", sys.executable, "-c", _FILLING_TRAINER,
                        str(tiny_disk / "fill")], capture_output=True, text=True, timeout=180)
    assert p.returncode == 3 and p.stdout == "trained\n", p.stderr
    assert "Traceback" not in p.stderr
    (hook_line,) = [ln for ln in p.stderr.splitlines() if "trace not written" in ln]
    assert "No space left on device" in hook_line and str(out / "traces") in hook_line
    assert list((out / "traces").iterdir()) == []  # the cut-off .tmp export was removed
    meta = json.loads((out / META_FILE).read_text())
    assert meta["status"] == "finished" and meta["exit_code"] == 3


# --- a read-only disk: the same behaviour as a full one (issue 20, case 20) ----------------


def test_injected_read_only_disk_runs_the_job_unrecorded_like_a_full_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpuprof.cli.run import claim_session

    real_mkdir = Path.mkdir

    def read_only(self: Path, *args: object, **kw: object) -> None:
        if self == tmp_path / "s":
            raise OSError(errno.EROFS, "Read-only file system")
        real_mkdir(self, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "mkdir", read_only)
    session_dir, recorded = claim_session(tmp_path / "s", ["sh"])  # was: exit 2, the job never ran
    assert (session_dir, recorded) == (tmp_path / "s", False)
    assert "Read-only file system; the command runs unrecorded" in capsys.readouterr().err
    result = run_command(["sh", "-c", "exit 3"], tmp_path / "s", RunOptions(hooks=False),
                         backend_factory=_no_driver, warn=lambda m: None, claimed=True, recorded=False)
    assert result.exit_code == 3 and not result.recorded


@pytest.fixture
def read_only_disk(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "ro"
    mnt.mkdir()
    try:
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(mnt)],
                           capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"cannot mount a tmpfs here ({exc})")
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {p.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30, check=False)


def test_read_only_disk_runs_the_job_and_says_why_in_one_line(read_only_disk: Path) -> None:
    out = read_only_disk / "sess"
    p = subprocess.run([*GPUPROF, "--out", str(out), "--", "sh", "-c", "echo ran; exit 4"],
                       capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == 4 and p.stdout == "ran\n", p.stderr
    assert "Traceback" not in p.stderr
    lines = [ln for ln in p.stderr.splitlines() if "Read-only file system" in ln]
    assert len(lines) == 1 and "the command runs unrecorded" in lines[0], p.stderr
