"""The smaller cases of issue 33 (item 10), one test each.

An empty path, a job summary aimed at an input or at a FIFO nobody reads, a completion
variable that is not one, thousands of empty files, a baseline's schema string, a trace
folder that cannot be made, old interpreters under ``gpuprof run``, a session folder that
belongs to someone else.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from clirun import run_cli

import gpuprof

ROOT = Path(__file__).resolve().parents[2]
HEALTHY = ROOT / "sample_traces" / "healthy"
TRACE = HEALTHY / "rank0.pt.trace.json.gz"
HOOKS = ROOT / "gpuprof" / "record" / "hooks"
PYENV = Path("/root/.pyenv/versions")


@pytest.mark.parametrize("command", [["analyze", ""], ["check", "", "--min-compute-pct", "1"],
                                     ["analyze", str(HEALTHY), ""]])
def test_an_empty_path_is_refused(command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copy(TRACE, tmp_path / "rank0.json.gz")
    monkeypatch.chdir(tmp_path)  # was: the current folder analyzed, exit 0
    r = run_cli(*command)
    assert r.code == 2 and r.traceback is None
    assert "an empty path was given" in r.stderr and len(r.stderr_lines) == 1


def test_the_api_refuses_an_empty_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copy(TRACE, tmp_path / "rank0.json.gz")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="an empty path"):
        gpuprof.analyze("")


def test_a_job_summary_that_names_an_input_is_not_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = tmp_path / "rank0.pt.trace.json.gz"
    shutil.copy(TRACE, trace)
    before = trace.read_bytes()
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(trace))
    r = run_cli("check", str(trace), "--min-compute-pct", "1")
    assert r.code == 0 and r.traceback is None
    assert trace.read_bytes() == before  # was: Markdown appended to the trace
    assert "job summary not written" in r.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs")
def test_a_job_summary_fifo_nobody_reads_does_not_hang_the_gate(tmp_path: Path) -> None:
    fifo = tmp_path / "summary"
    os.mkfifo(fifo)
    env = dict(os.environ, GITHUB_STEP_SUMMARY=str(fifo), PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-m", "gpuprof", "check", str(HEALTHY), "--min-compute-pct", "1"],
                       capture_output=True, text=True, timeout=120, env=env)  # was: waited forever
    assert p.returncode == 0, p.stderr
    assert "could not write the job summary" in p.stderr


def test_a_completion_variable_that_is_no_instruction_is_exit_2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("_GPUPROF_COMPLETE", "garbage")
    r = run_cli("analyze", str(HEALTHY))
    assert r.code == 2 and r.traceback is None  # was: "Invalid completion instruction.", exit 1
    assert len(r.stderr_lines) == 1 and "_GPUPROF_COMPLETE" in r.stderr


def test_many_empty_files_are_one_warning_line(tmp_path: Path) -> None:
    shutil.copy(TRACE, tmp_path / "rank0.pt.trace.json.gz")
    for i in range(1, 301):
        (tmp_path / f"rank{i}.json").write_bytes(b"")
    r = run_cli("analyze", str(tmp_path), "--format", "json")
    assert r.code == 0 and r.traceback is None
    assert len(r.stderr_lines) == 1  # was: 300 lines
    assert "300 files of the input folders cannot be read" in r.stderr
    assert sum("which cannot be read" in w for w in json.loads(r.stdout)["warnings"]) == 300  # all named there


def test_a_baselines_schema_string_is_not_echoed(tmp_path: Path) -> None:
    report = json.loads(run_cli("analyze", str(HEALTHY), "--format", "json").stdout)
    report["schema"] = "gpuprof.report/" + "\x1b]52;c;SGFjaw==\x07" + "x" * 5000
    base = tmp_path / "base.json"
    base.write_text(json.dumps(report))
    r = run_cli("check", str(HEALTHY), "--baseline", str(base))
    assert r.code == 2 and r.traceback is None
    assert "xxxxx" not in r.stderr and "SGFjaw" not in r.stderr  # was: the value echoed
    assert len(r.stderr) < 300


def test_trace_handler_aimed_at_a_folder_it_cannot_make_lets_training_go_on(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the folder should be")
    handler = gpuprof.torch.trace_handler(blocker / "traces", print_report=False, file=io.StringIO())

    class Prof:
        def export_chrome_trace(self, path: str) -> None:  # pragma: no cover - never reached
            Path(path).write_text("{}")

    handler(Prof())  # was: NotADirectoryError out of the training loop
    handler(Prof())
    err = capsys.readouterr().err
    assert err.count("cannot write the trace in") == 1 and "training goes on without it" in err
    assert handler.trace_paths == []


@pytest.mark.parametrize("version", ["2.7.18", "3.6.15"])
def test_old_interpreters_under_run_keep_their_own_sitecustomize_silently(tmp_path: Path, version: str) -> None:
    python = PYENV / version / "bin" / "python"
    if not python.exists():
        pytest.skip(f"Python {version} is not installed here")
    user = tmp_path / "user"
    user.mkdir()
    (user / "sitecustomize.py").write_text("import sys\nsys.stderr.write('USER SITE\\n')\n")
    env = dict(os.environ, PYTHONPATH=f"{HOOKS}{os.pathsep}{user}", GPUPROF_SESSION_DIR=str(tmp_path / "s"),
               GPUPROF_HOOKS="1")
    env.pop("PYTHONHOME", None)
    p = subprocess.run([str(python), "-c", "print('job')"], capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 0 and p.stdout == "job\n"
    assert p.stderr == "USER SITE\n"  # was: "Error in sitecustomize" and the user's never ran


needs_root = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                                reason="making a folder another user owns needs root")


@needs_root
def test_a_session_folder_another_user_owns_is_refused(tmp_path: Path) -> None:
    trap = tmp_path / "trap"
    trap.mkdir(mode=0o777)
    os.chown(trap, 65534, 65534)
    marker = tmp_path / "ran"
    r = run_cli("run", "--no-live", "--session-dir", str(trap), "--", "touch", str(marker))
    assert r.code == 2 and r.traceback is None  # was: the session (command line) written into it
    assert "belongs to another user" in r.stderr
    assert not marker.exists() and not any(trap.iterdir())


@needs_root
def test_a_symlink_another_user_planted_in_a_sticky_folder_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    link = shared / "session"
    link.symlink_to(theirs)
    os.lchown(link, 65534, 65534)
    r = run_cli("run", "--no-live", "--session-dir", str(link), "--", "true")
    assert r.code == 2 and r.traceback is None
    assert "symbolic link that another user" in r.stderr
    assert not any(theirs.iterdir())
