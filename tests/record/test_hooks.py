"""Torch hooks on a real tiny CPU training script run under ``gpuprof run``."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuprof.session import read_session

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

TINY = Path(__file__).resolve().parents[1] / "data" / "tiny_train.py"
HOOKS = Path(__file__).resolve().parents[2] / "gpuprof" / "record" / "hooks"
GPUPROF = [sys.executable, "-m", "gpuprof", "run"]
SCHEDULE = ["--profile-wait", "2", "--profile-warmup", "1", "--profile-active", "3"]


def profiler_steps(trace: Path) -> list[str]:
    with gzip.open(trace, "rt") as fh:
        doc = json.load(fh)
    return sorted({e["name"] for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")})


def test_tiny_training_under_gpuprof_run(tmp_path: Path) -> None:
    plain = subprocess.run([sys.executable, str(TINY), "--exit-code", "5"], capture_output=True, text=True, timeout=120)
    out = tmp_path / "s"
    p = subprocess.run([*GPUPROF, "--out", str(out), *SCHEDULE, "--", sys.executable, str(TINY), "--exit-code", "5"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 5 == plain.returncode
    assert p.stdout == plain.stdout  # the script ran unchanged: same output, same loss
    assert "session saved in" in p.stderr  # the report was printed (on stderr)
    assert "USDT" not in p.stderr and "profiler_start" not in p.stderr  # Kineto's own lines stay quiet
    assert "\x1b" not in p.stderr  # stderr is not a terminal: no live status line
    # A CPU-only run ends with what was measured, not "nothing to analyze".
    assert "nothing to analyze" not in p.stderr
    assert "gpuprof: no GPU activity was recorded (CPU only); measured on the host:" in p.stderr
    assert "   - 40 optimizer steps, median " in p.stderr and " apart by the job's own clock" in p.stderr
    assert "inside torch operators" in p.stderr and "   - on a GPU, gpuprof splits" in p.stderr
    assert (out / "report.json").is_file() and (out / "report.html").is_file()
    s = read_session(out)
    assert [t.name for t in s.trace_paths] == ["rank0.pt.trace.json.gz"]
    assert profiler_steps(s.trace_paths[0]) == ["ProfilerStep#3", "ProfilerStep#4", "ProfilerStep#5"]
    h = s.hook_events
    assert h is not None
    steps = h[h["kind"] == "step"]
    assert list(steps["step"]) == list(range(1, 41))  # one record per optimizer step
    assert (steps["time_unix_s"].diff().dropna() >= 0).all()
    assert set(h["kind"]) >= {"start", "step", "trace", "exit"}
    assert s.hook_errors == ()
    assert s.meta["exit_code"] == 5


def test_no_hooks_means_no_hook_code_in_the_child_and_a_clear_note(tmp_path: Path) -> None:
    out = tmp_path / "s"
    probe = "import sys; print('gpuprof_torch_hooks' in sys.modules, any('record/hooks' in p for p in sys.path))"
    p = subprocess.run([*GPUPROF, "--out", str(out), "--no-hooks", "--", sys.executable, "-c", probe],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0
    assert p.stdout.split() == ["False", "False"]
    s = read_session(out)
    assert s.trace_paths == () and s.hook_events is None and s.meta["hooks_enabled"] is False
    assert "hooks were switched off" in p.stderr
    # With hooks on, the same probe sees them armed (the contrast that makes the test mean something).
    on = subprocess.run([*GPUPROF, "--no-report", "--out", str(tmp_path / "on"), "--", sys.executable, "-c", probe],
                        capture_output=True, text=True, timeout=120)
    assert on.stdout.split() == ["True", "True"]


def test_existing_sitecustomize_runs_and_python_m_and_rank_work(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    marker = tmp_path / "marker"
    (site / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    env = dict(os.environ, PYTHONPATH=str(site), RANK="1")
    out = tmp_path / "s"
    p = subprocess.run([*GPUPROF, "--out", str(out), "--no-report", *SCHEDULE, "--",
                        sys.executable, "-m", "tiny_train", "--steps", "12"],
                       capture_output=True, text=True, timeout=120, env=env, cwd=TINY.parent)
    assert p.returncode == 0, p.stderr
    assert marker.read_text() == "ran"  # the user's own sitecustomize still ran
    assert [t.name for t in read_session(out).trace_paths] == ["rank1.pt.trace.json.gz"]


def test_python_without_torch_gets_no_hook_files(tmp_path: Path) -> None:
    out = tmp_path / "s"
    p = subprocess.run([*GPUPROF, "--out", str(out), "--", sys.executable, "-c", "print('hi')"],
                       capture_output=True, text=True, timeout=60)
    assert p.stdout == "hi\n"
    assert not list((out / "hooks").iterdir())
    assert "no Python process of the job imported torch" in p.stderr


def test_hook_error_is_logged_and_the_job_goes_on(tmp_path: Path) -> None:
    session = tmp_path / "s"
    session.mkdir()
    (session / "traces").write_text("a file where the traces folder should be")
    env = dict(os.environ, PYTHONPATH=str(HOOKS), GPUPROF_SESSION_DIR=str(session), GPUPROF_PROFILE="1,0,1")
    p = subprocess.run([sys.executable, str(TINY), "--steps", "10", "--exit-code", "4"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 4
    assert "final loss" in p.stdout
    recs = [json.loads(line) for f in (session / "hooks").glob("*.jsonl") for line in f.read_text().splitlines()]
    errors = [r for r in recs if r["kind"] == "error"]
    assert errors and errors[0]["where"] == "trace export"
    assert max(r.get("step", 0) for r in recs if r["kind"] == "step") == 10  # steps kept being recorded


def test_sigkill_of_gpuprof_after_the_trace_leaves_a_session_analyze_reads(tmp_path: Path) -> None:
    out = tmp_path / "s"
    proc = subprocess.Popen([*GPUPROF, "--out", str(out), *SCHEDULE, "--",
                             sys.executable, str(TINY), "--steps", "100000000"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    trace = out / "traces" / "rank0.pt.trace.json.gz"
    try:
        deadline = time.monotonic() + 60
        while not trace.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert trace.exists()
        proc.kill()
        proc.wait(timeout=10)
    finally:
        job = json.loads((out / "session.json").read_text()).get("pid")
        if job:
            try:
                os.killpg(int(job), signal.SIGKILL)
            except ProcessLookupError:
                pass
    s = read_session(out)
    assert s.interrupted and s.hook_events is not None
    a = subprocess.run([sys.executable, "-m", "gpuprof", "analyze", str(out), "--format", "json"],
                       capture_output=True, text=True, timeout=120)
    assert a.returncode == 0, a.stderr
    doc = json.loads(a.stdout)
    assert [r["rank"] for r in doc["ranks"]] == [0]
    assert doc["ranks"][0]["source"].endswith("rank0.pt.trace.json.gz")


# -- the hook object in-process, with a fake torch.cuda (no GPU here) -----------------------

def _hooks_module() -> object:
    if str(HOOKS) not in sys.path:
        sys.path.insert(0, str(HOOKS))
    import gpuprof_torch_hooks

    return gpuprof_torch_hooks


class _FakeCuda:
    def __init__(self, stats: dict[str, int] | None, fail: bool = False) -> None:
        self.stats = stats
        self.fail = fail
        self.calls = 0

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def memory_stats(self) -> dict[str, int]:
        self.calls += 1
        if self.fail:
            raise RuntimeError("CUDA error: an illegal memory access")
        assert self.stats is not None
        return self.stats


def _records(session: Path) -> list[dict[str, object]]:
    return [json.loads(line) for f in (session / "hooks").glob("*.jsonl") for line in f.read_text().splitlines()]


def _run_hooks(tmp_path: Path, cuda: _FakeCuda, steps: int) -> list[dict[str, object]]:
    gh = _hooks_module()
    h = gh._Hooks(str(tmp_path), (0, 0, 0))  # type: ignore[attr-defined]
    h.torch = type("T", (), {"cuda": cuda})()
    h._open_log()
    opt, other = object(), object()
    for _ in range(steps):
        h.post_step(opt, (), {})
        h.post_step(other, (), {})  # a second optimizer does not count steps twice
    h.at_exit()
    h.log.close()
    return _records(tmp_path)


def test_memory_stats_per_step_when_cuda_is_in_use(tmp_path: Path) -> None:
    stats = {"allocated_bytes.all.current": 100, "reserved_bytes.all.current": 300, "num_alloc_retries": 2,
             "num_ooms": 0, "num_device_alloc": 7, "num_device_free": 5}
    recs = _run_hooks(tmp_path, _FakeCuda(stats), 5)
    steps = [r for r in recs if r["kind"] == "step"]
    assert [r["step"] for r in steps] == [1, 2, 3, 4, 5]
    first = steps[0]
    assert first["allocated_bytes"] == 100 and first["reserved_bytes"] == 300
    assert first["alloc_retries"] == 2 and first["ooms"] == 0
    assert first["device_allocs"] == 7 and first["device_frees"] == 5


def test_failing_memory_stats_is_logged_and_steps_go_on(tmp_path: Path) -> None:
    cuda = _FakeCuda(None, fail=True)
    recs = _run_hooks(tmp_path, cuda, 6)
    assert cuda.calls == 1  # switched off after the first failure
    errors = [r for r in recs if r["kind"] == "error"]
    assert len(errors) == 1 and "illegal memory access" in str(errors[0]["message"])
    assert max(int(str(r["step"])) for r in recs if r["kind"] == "step") == 6


def test_job_summary_counts_allocator_retries_across_processes(tmp_path: Path) -> None:
    from gpuprof.cli.run import job_summary
    from gpuprof.session.layout import SESSION_SCHEMA

    (tmp_path / "hooks").mkdir()
    (tmp_path / "session.json").write_text(json.dumps({"schema": SESSION_SCHEMA, "status": "finished",
                                                       "exit_code": 0, "gpus": []}))
    lines = []
    for pid, retries in ((10, [0, 1, 3]), (11, [0, 0, 2])):
        for i, r in enumerate(retries, 1):
            lines.append(json.dumps({"time_unix_s": 100 + i, "kind": "step", "pid": pid, "rank": pid - 10,
                                     "step": i, "alloc_retries": r, "ooms": 0}))
    (tmp_path / "hooks" / "rank0-10.jsonl").write_text("\n".join(lines) + "\n")
    line = job_summary(tmp_path)
    assert "3 optimizer steps" in line and "(median 1.00 s apart)" in line
    assert "5 CUDA allocator retries" in line and "0 CUDA OOMs" in line


_FORKING = """
import os, sys, torch
m = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
def train(n):
    for _ in range(n):
        opt.zero_grad(); m(torch.randn(2, 4)).sum().backward(); opt.step()
train(5)
helper = os.fork()  # like a DataLoader worker: never steps, ends with os._exit
if helper == 0:
    os._exit(0)
os.waitpid(helper, 0)
trainer = os.fork()  # a forked trainer (Hogwild style) that exits normally
if trainer == 0:
    train(7)
    sys.exit(0)
os.waitpid(trainer, 0)
train(2)
print(trainer, flush=True)
"""


def test_forked_children_get_their_own_records_and_no_duplicates(tmp_path: Path) -> None:
    session = tmp_path / "s"
    session.mkdir()
    env = dict(os.environ, PYTHONPATH=str(HOOKS), GPUPROF_SESSION_DIR=str(session), GPUPROF_PROFILE="0,0,0")
    p = subprocess.run([sys.executable, "-c", _FORKING], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    trainer = int(p.stdout.split()[-1])
    files = sorted(f.name for f in (session / "hooks").glob("*.jsonl"))
    assert len(files) == 2  # the parent and the forked trainer; the idle helper left nothing
    recs = [json.loads(line) for f in (session / "hooks").glob("*.jsonl") for line in f.read_text().splitlines()]
    steps_by_pid: dict[int, list[int]] = {}
    for r in recs:
        if r["kind"] == "step":
            steps_by_pid.setdefault(int(r["pid"]), []).append(int(r["step"]))
    assert steps_by_pid.pop(trainer) == list(range(1, 8))
    (parent_steps,) = steps_by_pid.values()
    assert parent_steps == list(range(1, 8))  # 5 before the forks, 2 after: none twice


def test_memory_records_thin_out_when_steps_are_very_short(tmp_path: Path) -> None:
    stats = {"allocated_bytes.all.current": 1, "num_alloc_retries": 0}

    class SlowStats(_FakeCuda):
        def memory_stats(self) -> dict[str, int]:
            time.sleep(0.002)  # 2 ms per query against steps far shorter than that
            return super().memory_stats()

    cuda = SlowStats(stats)
    recs = _run_hooks(tmp_path, cuda, 200)
    steps = [r for r in recs if r["kind"] == "step"]
    assert [r["step"] for r in steps] == list(range(1, 201))  # every step is still recorded
    with_memory = [r for r in steps if "allocated_bytes" in r]
    assert 2 <= len(with_memory) < 50  # but memory_stats() only every N steps
