"""The runner on real child processes: exit codes, signals, passthrough, kills."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import NoReturn

import pytest

from gpuprof.record.runner import exit_code_of
from gpuprof.session import read_session

pytestmark = pytest.mark.skipif(os.name != "posix", reason="process groups and signals are POSIX")

GPUPROF = [sys.executable, "-m", "gpuprof", "run", "--no-report"]


def run(args: list[str], out: Path, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUPROF, "--out", str(out), "--", *args], capture_output=True, text=True,
                          timeout=60, **kw)  # type: ignore[call-overload]


def meta(out: Path) -> dict[str, object]:
    return dict(read_session(out).meta)


def wait_for(pred: object, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


def test_exit_code_of() -> None:
    assert exit_code_of(0) == (0, None)
    assert exit_code_of(3) == (3, None)
    assert exit_code_of(-9) == (137, 9)
    assert exit_code_of(-15) == (143, 15)


@pytest.mark.parametrize("code", [3, 255])
def test_exit_code_is_the_childs(tmp_path: Path, code: int) -> None:
    p = run(["sh", "-c", f"exit {code}"], tmp_path / "s")
    assert p.returncode == code
    m = meta(tmp_path / "s")
    assert m["exit_code"] == code and m["status"] == "finished" and m["signal"] is None
    assert m["command"] == ["sh", "-c", f"exit {code}"]


def test_signal_death_is_128_plus_n(tmp_path: Path) -> None:
    p = run(["sh", "-c", "kill -KILL $$"], tmp_path / "s")
    assert p.returncode == 137
    m = meta(tmp_path / "s")
    assert m["signal"] == 9 and m["exit_code"] == 137


def test_output_and_input_pass_through_untouched(tmp_path: Path) -> None:
    script = "import sys; data = sys.stdin.read(); sys.stdout.write('OUT:' + data[::-1]); sys.stderr.write('ERR\\n')"
    p = run([sys.executable, "-c", script], tmp_path / "s", input="abc\n")
    assert p.stdout == "OUT:\ncba"
    assert p.stderr.endswith("ERR\n")  # gpuprof's own notes (no driver) come before, never inside
    assert p.returncode == 0


def test_user_environment_reaches_the_child(tmp_path: Path) -> None:
    env = dict(os.environ, MY_SETTING="42", PYTHONPATH="/some/where")
    p = run([sys.executable, "-c", "import os; print(os.environ['MY_SETTING'], os.environ['PYTHONPATH'])"],
            tmp_path / "s", env=env)
    value, pythonpath = p.stdout.split()
    assert value == "42"
    assert pythonpath.endswith(os.pathsep + "/some/where")  # kept, after gpuprof's hook folder


def test_command_not_found_is_127(tmp_path: Path) -> None:
    p = run(["no-such-command-gpuprof"], tmp_path / "s")
    assert p.returncode == 127
    assert "no-such-command-gpuprof" in p.stderr
    assert not (tmp_path / "s").exists()  # found out before a session folder is made (issue 29)


def test_no_command_is_usage_error(tmp_path: Path) -> None:
    p = subprocess.run([*GPUPROF], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "no command" in p.stderr


def test_existing_non_empty_out_is_refused(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("x")
    p = run(["true"], tmp_path)
    assert p.returncode == 2 and "already exists" in p.stderr
    assert (tmp_path / "keep.txt").read_text() == "x"


_CHILD = """
import os, signal, subprocess, sys, time
marker = sys.argv[1]
signal.signal(signal.SIGINT, signal.SIG_DFL)
def on_term(signum, frame):
    with open(marker + '.child', 'w') as fh: fh.write('TERM')
    sys.exit(7)
signal.signal(signal.SIGTERM, on_term)
grand = subprocess.Popen([sys.executable, '-c',
    "import signal,sys,time\\n"
    "def h(s,f):\\n open(sys.argv[1]+'.grandchild','w').write('TERM'); sys.exit(0)\\n"
    "signal.signal(signal.SIGTERM,h)\\n"
    "print('g', flush=True)\\n"
    "time.sleep(60)", marker])
time.sleep(0.5)
print('ready', flush=True)
time.sleep(60)
"""


def _start(tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    marker = tmp_path / "m"
    proc = subprocess.Popen([*GPUPROF, "--out", str(tmp_path / "s"), "--", sys.executable, "-c", _CHILD, str(marker)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    lines = []
    while "ready" not in lines:
        line = proc.stdout.readline()
        assert line, "child never got ready"
        lines.append(line.strip())
    return proc, marker


def test_sigterm_to_gpuprof_reaches_the_whole_job_once(tmp_path: Path) -> None:
    proc, marker = _start(tmp_path)
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(timeout=30)
    assert rc == 7  # the child's own exit code from its handler
    assert Path(str(marker) + ".child").read_text() == "TERM"
    wait_for(lambda: Path(str(marker) + ".grandchild").exists())  # the group got it too
    m = meta(tmp_path / "s")
    assert m["status"] == "finished" and m["exit_code"] == 7
    assert any("SIGTERM" in str(e.get("message")) for e in read_session(tmp_path / "s").events)


def test_sigint_to_gpuprof_kills_the_job_and_gpuprof_reports_130(tmp_path: Path) -> None:
    proc, _ = _start(tmp_path)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 130
    assert meta(tmp_path / "s")["signal"] == 2


def test_job_killed_from_outside(tmp_path: Path) -> None:
    proc, _ = _start(tmp_path)
    wait_for(lambda: meta(tmp_path / "s").get("pid"))
    job = int(meta(tmp_path / "s")["pid"])  # type: ignore[call-overload]
    os.killpg(job, signal.SIGKILL)  # e.g. the OOM killer or a scheduler
    assert proc.wait(timeout=30) == 137
    assert meta(tmp_path / "s")["exit_code"] == 137


_FAKE_RUN = """
import sys
from pathlib import Path
from gpuprof.record.backend import FakeBackend
from gpuprof.record.runner import RunOptions, run_command
factory = lambda: FakeBackend.rl_post_training(n_gpus=2, period_s=1.0, idle_s=0.4)
r = run_command(["sleep", "60"], Path(sys.argv[1]), RunOptions(interval_ms=50, hooks=False), backend_factory=factory)
sys.exit(r.exit_code)
"""


def test_sigkill_of_gpuprof_leaves_a_readable_session(tmp_path: Path) -> None:
    out = tmp_path / "s"
    proc = subprocess.Popen([sys.executable, "-c", _FAKE_RUN, str(out)])
    samples = out / "samples.jsonl"
    try:
        wait_for(lambda: samples.exists() and samples.read_text().count("\n") >= 40)
        proc.kill()  # SIGKILL: nothing gets to clean up
        proc.wait(timeout=10)
    finally:
        m = json.loads((out / "session.json").read_text())
        if m.get("pid"):
            try:
                os.killpg(int(m["pid"]), signal.SIGKILL)
            except ProcessLookupError:
                pass
    s = read_session(out)
    assert s.interrupted
    assert s.meta["gpus"] and len(s.meta["gpus"]) == 2
    assert s.samples is not None and len(s.samples) >= 40
    from gpuprof.cli.run import session_report

    report = session_report(out)
    assert report.extra["samples"]["gpus"][0]["samples"] >= 20
    assert any("did not finish" in w for w in report.warnings)


def test_run_command_samples_the_fake_gpus_while_the_job_runs(tmp_path: Path) -> None:
    from gpuprof.record.backend import FakeBackend
    from gpuprof.record.runner import RunOptions, run_command

    backend = FakeBackend.rl_post_training(n_gpus=3)
    res = run_command([sys.executable, "-c", "import time; time.sleep(0.6)"], tmp_path / "s",
                      RunOptions(interval_ms=50, hooks=False), backend_factory=lambda: backend)
    assert res.exit_code == 0 and res.warnings == ()
    s = read_session(tmp_path / "s")
    assert [g["uuid"] for g in s.meta["gpus"]] == ["GPU-fake-0000", "GPU-fake-0001", "GPU-fake-0002"]
    assert s.meta["versions"]["driver"] == "fake"
    assert s.samples is not None and set(s.samples["gpu"]) == {0, 1, 2}
    assert len(s.samples) >= 3 * 5
    assert backend.closed


def test_run_command_without_driver_warns_once_and_runs(tmp_path: Path) -> None:
    from gpuprof.record.backend import BackendUnavailable
    from gpuprof.record.runner import RunOptions, run_command

    def no_driver() -> NoReturn:
        raise BackendUnavailable("NVML Shared Library Not Found")

    said: list[str] = []
    res = run_command(["sh", "-c", "exit 4"], tmp_path / "s", RunOptions(hooks=False),
                      backend_factory=no_driver, warn=said.append)
    assert res.exit_code == 4
    assert len(said) == 1 and "no GPU sampling" in said[0]
    s = read_session(tmp_path / "s")
    assert s.samples is None and s.meta["gpus"] == [] and len(s.meta["warnings"]) == 1



def test_help_explains_the_command_and_its_options() -> None:
    from typer.testing import CliRunner

    from gpuprof.cli import app

    res = CliRunner().invoke(app, ["run", "--help"], terminal_width=200)
    assert res.exit_code == 0
    text = res.output
    for needle in ("-- CMD", "exit code", "--interval-ms", "--out", "--no-hooks", "--profile-wait",
                   "--profile-warmup", "--profile-active", "--no-report", "CUDA_VISIBLE_DEVICES",
                   "--save-report", "--no-live", "report.json", "status line"):
        assert needle in text, needle


def test_default_session_dir_names_the_script(tmp_path: Path) -> None:
    from gpuprof.cli.run import default_session_dir

    now = time.mktime((2026, 11, 30, 4, 5, 6, 0, 0, -1))
    a = default_session_dir(["python", "train/rl step.py", "--x"], now=now, base=tmp_path)
    assert a == tmp_path / "20261130-040506-rl_step"
    a.mkdir()
    again = default_session_dir(["python", "train/rl step.py"], now=now, base=tmp_path)
    assert again.name == "20261130-040506-rl_step-2"
    assert default_session_dir(["python3", "-m", "pkg.train"], now=now, base=tmp_path).name.endswith("-train")
    assert default_session_dir(["torchrun", "x.py"], now=now, base=tmp_path).name.endswith("-torchrun")


def test_command_that_cannot_run_is_126(tmp_path: Path) -> None:
    script = tmp_path / "not-executable.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    p = run([str(script)], tmp_path / "s")
    assert p.returncode == 126


def test_second_run_on_the_same_out_is_refused_and_its_command_does_not_run(tmp_path: Path) -> None:
    out = tmp_path / "s"
    first = subprocess.Popen([*GPUPROF, "--out", str(out), "--", sys.executable, "-c",
                              "import time, pathlib; pathlib.Path(%r).write_text('1'); time.sleep(3)"
                              % str(tmp_path / "first-ran")], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: (tmp_path / "first-ran").exists())
        second = run(["sh", "-c", f"touch {tmp_path / 'second-ran'}"], out)
        assert second.returncode == 2
        assert second.stderr.count("\n") == 1 and "another gpuprof run" in second.stderr and str(out) in second.stderr
        assert not (tmp_path / "second-ran").exists()
        assert first.wait(timeout=60) == 0
    finally:
        if first.poll() is None:
            first.kill()
    assert meta(out)["exit_code"] == 0  # the first run's session is intact


def test_default_session_folders_of_runs_in_the_same_second_differ(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuprof.cli.run import claim_session

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(time, "localtime", lambda now=None: time.struct_time((2026, 1, 2, 3, 4, 5, 0, 2, -1)))
    a, ok_a = claim_session(None, ["python", "train.py"])
    b, ok_b = claim_session(None, ["python", "train.py"])
    assert ok_a and ok_b and a != b
    assert a.name == "20260102-030405-train" and b.name == "20260102-030405-train-2"


def test_save_report_into_a_missing_folder_is_refused_before_the_job_runs(tmp_path: Path) -> None:
    p = subprocess.run([*GPUPROF[:-1], "--save-report", str(tmp_path / "nope" / "r.json"), "--out",
                        str(tmp_path / "s"), "--", "sh", "-c", f"touch {tmp_path / 'ran'}"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "does not exist" in p.stderr and not (tmp_path / "ran").exists()
