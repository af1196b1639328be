"""The torch hooks when things go wrong: full disk, SIGTERM in the profiler window,
processes without a rank, Kineto's own log lines."""

from __future__ import annotations

import errno
import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

HOOKS = Path(__file__).resolve().parents[2] / "gpuprof" / "record" / "hooks"
GPUPROF = [sys.executable, "-m", "gpuprof", "run"]


def _gh() -> Any:
    if str(HOOKS) not in sys.path:
        sys.path.insert(0, str(HOOKS))
    import gpuprof_torch_hooks

    return gpuprof_torch_hooks


def _files() -> Any:
    """The hooks' file writing (the hook log, the trace's name), imported as the hooks do."""
    _gh()
    import gpuprof_hook_files

    return gpuprof_hook_files


def _records(session: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for f in sorted((session / "hooks").glob("*.jsonl")) for line in f.read_text().splitlines()]


# -- the hook log on a full disk ------------------------------------------------------------

def test_hook_log_keeps_lines_while_the_disk_is_full_and_writes_them_intact_later(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = _files()
    free: list[int | None] = [None]
    real = files.os_write

    def disk(fd: int, data: bytes) -> int:
        if free[0] is None:
            return real(fd, data)
        if free[0] <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = real(fd, data[: free[0]])
        free[0] -= n
        return n

    monkeypatch.setattr(files, "os_write", disk)
    log = files.HookLog(lambda: str(tmp_path / "h.jsonl"))
    log.write('{"step":1}\n')
    assert log.flush()
    free[0] = 5
    for i in range(2, 6):
        log.write(f'{{"step":{i}}}\n')
    assert not log.flush() and log.error == "No space left on device"
    free[0] = None
    assert log.flush()
    log.close()
    assert [json.loads(x)["step"] for x in (tmp_path / "h.jsonl").read_text().splitlines()] == [1, 2, 3, 4, 5]
    assert log.lines_lost == 0


def test_hook_lines_never_written_are_counted_and_said_at_exit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    gh = _gh()

    def no_space(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_files(), "os_write", no_space)
    monkeypatch.delenv("RANK", raising=False)
    h = gh._Hooks(str(tmp_path), (0, 0, 0))
    h.torch = type("T", (), {"cuda": type("C", (), {"is_available": staticmethod(lambda: False),
                                                      "is_initialized": staticmethod(lambda: False)})()})()
    h._open_log()
    opt = object()
    for _ in range(7):
        h.post_step(opt, (), {})
    h.at_exit()
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"gpuprof: torch hooks (pid {os.getpid()}): cannot write {tmp_path / 'hooks'}" in err
    assert "No space left on device (8 hook records lost)" in err  # 7 steps and the exit record
    assert not h.disabled  # a full disk does not switch step counting off


class _FailingProf:
    """A profiler whose export dies half-way, as on a full disk."""

    def export_chrome_trace(self, path: str) -> None:
        with open(path, "wb") as fh:
            fh.write(b"\x1f\x8b partial")
        raise OSError(errno.ENOSPC, "No space left on device")


def test_failed_trace_export_removes_the_partial_file_and_is_reported(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    gh = _gh()
    monkeypatch.delenv("RANK", raising=False)
    h = gh._Hooks(str(tmp_path), (0, 0, 1))
    h.torch = object()
    h._open_log()
    h._trace_ready(_FailingProf())
    h.log.close()
    assert os.listdir(tmp_path / "traces") == []
    problem = h.write_problem()
    assert problem is not None and "trace not written to" in problem and "No space left on device" in problem
    errors = [r for r in _records(tmp_path) if r["kind"] == "error"]
    assert errors and errors[0]["where"] == "trace export"


# -- trace names --------------------------------------------------------------------------

def test_trace_names_rank_when_known_else_process_id(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    gh = _gh()
    monkeypatch.setenv("RANK", "3")
    h = gh._Hooks(str(tmp_path), (0, 0, 1))
    h.torch = object()  # no torch.distributed
    assert h._trace_names()[0] == "rank3.pt.trace.json.gz"
    monkeypatch.delenv("RANK")
    h = gh._Hooks(str(tmp_path), (0, 0, 1))
    h.torch = object()
    pid = os.getpid()
    # Not started by multiprocessing (this test process): rank 0 unless taken, then by pid.
    assert h._trace_names() == ["rank0.pt.trace.json.gz", f"unranked-pid{pid}.pt.trace.json.gz"]

    class Dist:
        @staticmethod
        def is_available() -> bool:
            return True

        @staticmethod
        def is_initialized() -> bool:
            return True

        @staticmethod
        def get_rank() -> int:
            return 5

    h.torch = type("T", (), {"distributed": Dist()})()
    assert h._trace_names()[0] == "rank5.pt.trace.json.gz"


def test_claimed_trace_names_never_overwrite_each_other(tmp_path: Path) -> None:
    files = _files()
    names = ["rank0.pt.trace.json.gz", "unranked-pid7.pt.trace.json.gz"]
    (tmp_path / "a.tmp").write_text("first")
    (tmp_path / "b.tmp").write_text("second")
    assert files.claim_name(str(tmp_path / "a.tmp"), str(tmp_path), names) == names[0]
    assert files.claim_name(str(tmp_path / "b.tmp"), str(tmp_path), names) == names[1]
    assert (tmp_path / names[0]).read_text() == "first" and (tmp_path / names[1]).read_text() == "second"
    assert sorted(os.listdir(tmp_path)) == sorted(names)  # the temporary names are gone


_SPAWNED = """
import sys, torch, torch.multiprocessing as mp

def train(i):
    m = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for _ in range(8):
        opt.zero_grad(); m(torch.randn(4, 8)).sum().backward(); opt.step()

if __name__ == "__main__":
    mp.spawn(train, nprocs=2)
    print("done", flush=True)
"""


@pytest.mark.torch
@pytest.mark.slow
def test_spawned_trainers_without_torch_distributed_get_their_own_traces(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    script = tmp_path / "spawned.py"
    script.write_text(_SPAWNED)
    out = tmp_path / "s"
    p = subprocess.run([*GPUPROF, "--no-report", "--out", str(out), "--profile-wait", "1", "--profile-warmup", "0",
                        "--profile-active", "2", "--", sys.executable, str(script)],
                       capture_output=True, text=True, timeout=240)
    assert p.returncode == 0 and p.stdout == "done\n", p.stderr
    traces = sorted(x.name for x in (out / "traces").iterdir())
    assert len(traces) == 2 and all(t.startswith("unranked-pid") for t in traces), traces
    from gpuprof.pipeline.session_report import session_report  # what `gpuprof analyze DIR` reports

    report = session_report(out)
    assert sorted(r.rank for r in report.ranks) == [0, 1]
    assert sorted(Path(r.source).name for r in report.ranks) == traces


# -- SIGTERM inside the profiler window -------------------------------------------------------

_SLOW_TRAINER = """
import sys, time, torch
m = torch.nn.Linear(16, 16)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for step in range(100000):
    opt.zero_grad(); m(torch.randn(4, 16)).sum().backward(); opt.step()
    time.sleep(0.02)
"""


def _wait_for(pred: Any, timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.torch
def test_sigterm_in_the_profiler_window_writes_the_trace_and_exits_143(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "s"
    proc = subprocess.Popen([*GPUPROF, "--no-report", "--out", str(out), "--profile-wait", "0", "--profile-warmup",
                             "1", "--profile-active", "100000", "--", sys.executable, "-c", _SLOW_TRAINER],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Recording has begun once the hooks log a few steps past the profiler's start.
        assert _wait_for(lambda: (out / "hooks").is_dir() and any(
            r.get("kind") == "step" and r.get("step", 0) >= 5 for r in _records(out)))
        proc.send_signal(signal.SIGTERM)  # forwarded to the job, as a scheduler's kill would be
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err
    (trace,) = (out / "traces").iterdir()
    assert trace.name == "rank0.pt.trace.json.gz"
    with gzip.open(trace, "rt") as fh:
        names = {e.get("name", "") for e in json.load(fh)["traceEvents"]}
    assert any(n.startswith("ProfilerStep#") for n in names)
    exits = [r for r in _records(out) if r["kind"] == "exit"]
    assert exits and exits[-1]["signal"] == signal.SIGTERM
    meta = json.loads((out / "session.json").read_text())
    assert meta["exit_code"] == 143 and meta["signal"] == 15


def test_the_jobs_own_sigterm_handler_is_left_alone(tmp_path: Path) -> None:
    gh = _gh()
    h = gh._Hooks(str(tmp_path), (0, 0, 1))

    def mine(signum: int, frame: Any) -> None:
        pass

    old = signal.signal(signal.SIGTERM, mine)
    try:
        h._install_sigterm()
        assert signal.getsignal(signal.SIGTERM) is mine
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        h._install_sigterm()
        assert signal.getsignal(signal.SIGTERM) == h._on_sigterm
        h._uninstall_sigterm()
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, old)


# -- Kineto's log lines -----------------------------------------------------------------------

class _FakeProfilerModule:
    class ProfilerActivity:
        CPU = "cpu"
        CUDA = "cuda"

    def __init__(self) -> None:
        self.level_at_start: list[str | None] = []

    def schedule(self, **kw: Any) -> Any:
        return kw

    def profile(self, **kw: Any) -> Any:
        outer = self

        class P:
            def start(self) -> None:
                outer.level_at_start.append(os.environ.get("KINETO_LOG_LEVEL"))

            def stop(self) -> None:
                pass

        return P()


def _fake_torch(prof: _FakeProfilerModule) -> Any:
    autograd = type("A", (), {"_profiler_enabled": staticmethod(lambda: False)})()
    return type("T", (), {"profiler": prof, "_C": type("C", (), {"_autograd": autograd})(),
                          "cuda": type("Cu", (), {"is_available": staticmethod(lambda: False)})()})()


def test_kineto_is_quiet_for_gpuprofs_profiler_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gh = _gh()
    monkeypatch.delenv("KINETO_LOG_LEVEL", raising=False)
    prof = _FakeProfilerModule()
    h = gh._Hooks(str(tmp_path), (1, 1, 1))
    h.torch = _fake_torch(prof)
    h._start_profiler()
    h._stop_profiler()
    import gpuprof_hook_profiler

    assert prof.level_at_start == [gpuprof_hook_profiler._KINETO_QUIET_LEVEL]
    assert "KINETO_LOG_LEVEL" not in os.environ  # unset again once the window closed
    monkeypatch.setenv("KINETO_LOG_LEVEL", "1")  # the user's own choice wins
    h = gh._Hooks(str(tmp_path), (1, 1, 1))
    h.torch = _fake_torch(prof)
    h._start_profiler()
    h._stop_profiler()
    assert prof.level_at_start[-1] == "1" and os.environ["KINETO_LOG_LEVEL"] == "1"
