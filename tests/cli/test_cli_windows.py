"""The command line of windows after the first: `gpuprof run`'s options (a bad value stops
the run before its command starts) and `gpuprof trigger` (exit codes 0, 1, 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from clirun import run_cli

from gpuprof.session.windows import read_demands


@pytest.mark.parametrize("opts, why", [
    (["--profile-every", "ten"], "'ten' is not a duration (e.g. 90s, 10m, 2h)"),
    (["--profile-every", "0"], "--profile-every: give at least 1 step"),
    (["--trigger-gap", "5 minutes"], "'5 minutes' is not a duration"),
    (["--profile-every", "100", "--profile-active", "0"], "--profile-every needs a profiler window"),
])
def test_a_bad_window_option_is_one_line_before_the_command_runs(tmp_path: Path, opts: list[str], why: str) -> None:
    marker = tmp_path / "ran"
    r = run_cli("run", "--session-dir", str(tmp_path / "s"), *opts, "--", "touch", str(marker))
    assert r.code == 2 and r.traceback is None
    assert len(r.stderr_lines) == 1 and why in r.stderr_lines[0]
    assert not marker.exists() and not (tmp_path / "s").exists()


def test_a_run_says_how_it_follows_windows_in_its_metadata(tmp_path: Path) -> None:
    s = tmp_path / "s"
    p = subprocess.run([sys.executable, "-m", "gpuprof", "run", "--no-report", "--session-dir", str(s),
                        "--profile-every", "10m", "--keep", "2", "--", "true"], capture_output=True, text=True,
                       timeout=120, check=False)
    assert p.returncode == 0, p.stderr
    meta = json.loads((s / "session.json").read_text())
    assert meta["revision"] == 2
    assert meta["windows"] == {"every_steps": None, "every_s": 600.0, "on_change": True, "keep": 2,
                               "trigger_gap_s": 300.0, "warmup": 2, "active": 3}
    assert (s / "windows").is_dir() and (s / "control").is_dir()
    off = tmp_path / "off"
    subprocess.run([sys.executable, "-m", "gpuprof", "run", "--no-report", "--no-hooks", "--session-dir", str(off),
                    "--", "true"], capture_output=True, timeout=120, check=True)
    assert json.loads((off / "session.json").read_text())["windows"] is None


def _running(root: Path, windows: object = None) -> Path:
    root.mkdir()
    meta = {"schema": "gpuprof.session/1", "status": "running", "windows": windows}
    (root / "session.json").write_text(json.dumps(meta))
    return root


def test_trigger_without_an_answer_exits_1_and_leaves_the_demand(tmp_path: Path) -> None:
    s = _running(tmp_path / "s", windows={"keep": 3})
    r = run_cli("trigger", str(s), "--wait", "0.2")
    assert r.code == 1 and r.stdout == ""
    assert "no answer from gpuprof run within 0.2 s" in r.stderr and "control" in r.stderr
    assert len(read_demands(s)) == 1


def test_trigger_prints_the_steps_the_run_chose(tmp_path: Path) -> None:
    s = _running(tmp_path / "s", windows={"keep": 3})
    # Stand in for the run: answer the demand as soon as it appears.
    answer = subprocess.Popen([sys.executable, "-c", f"""
import time, pathlib, sys
sys.path[:0] = {sys.path!r}
from gpuprof.session.windows import WindowRequest, read_demands, write_request
root = pathlib.Path({str(s)!r})
while not read_demands(root):
    time.sleep(0.02)
d = read_demands(root)[0]
write_request(root, WindowRequest(window=4, start_step=d.at_step, warmup=2, active=3, reason="demand",
              detail="asked for", requested_unix_s=0.0, requested_at_step=1000, demand=d.name))
"""])
    r = run_cli("trigger", str(s), "--at-step", "1234", "--wait", "30")
    answer.wait(timeout=30)
    assert r.code == 0, r.stderr
    assert r.stdout == "window 4: every rank records optimizer steps 1234-1236 (asked for at step 1000; asked for)\n"


@pytest.mark.parametrize("windows, status, why", [
    (None, "running", "takes no windows after the first"),
    ({"keep": 1}, "finished", "the run has ended"),
])
def test_trigger_refuses_a_session_that_cannot_answer(tmp_path: Path, windows: object, status: str, why: str) -> None:
    s = _running(tmp_path / "s", windows)
    meta = json.loads((s / "session.json").read_text())
    (s / "session.json").write_text(json.dumps({**meta, "status": status}))
    r = run_cli("trigger", str(s))
    assert r.code == 2 and len(r.stderr_lines) == 1 and why in r.stderr and str(s) in r.stderr
    assert not (s / "control").exists()
