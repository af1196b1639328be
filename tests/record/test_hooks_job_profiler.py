"""A job that runs its own torch.profiler under ``gpuprof run`` (issue 20, case 4).

Kineto allows one profiler per thread: such a job died with "Profiler is already enabled on
this thread" and then SIGSEGV (exit 139). The hooks now step aside for the job's profiler,
whenever it starts, say so in the session, and the job's own traces are analyzed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from gpuprof.session import read_session  # noqa: E402

GPUPROF = [sys.executable, "-m", "gpuprof", "run", "--no-live", "--profile-wait", "2", "--profile-warmup", "1",
           "--profile-active", "2"]

# The job profiles itself: a schedule of (wait, warmup, active) starting at iteration START,
# prof.step() every iteration, traces written by tensorboard_trace_handler into argv[1].
_JOB = """
import sys, torch
out, start, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.manual_seed(0)
model = torch.nn.Linear(32, 32)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
prof = torch.profiler.profile(
    activities=[torch.profiler.ProfilerActivity.CPU],
    schedule=torch.profiler.schedule(wait=0, warmup=1, active=2),
    on_trace_ready=torch.profiler.tensorboard_trace_handler(out),
)
for i in range(steps):
    if i == start:
        prof.start()
    loss = model(torch.randn(16, 32)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if i >= start:
        prof.step()
if steps > start:
    prof.stop()
print("trained", flush=True)
sys.exit(3)
"""


def _run(tmp_path: Path, start: int, steps: int = 16) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    out, tb = tmp_path / "s", tmp_path / "tb"
    p = subprocess.run([*GPUPROF, "--out", str(out), "--", sys.executable, "-c", _JOB, str(tb), str(start), str(steps)],
                       capture_output=True, text=True, timeout=300, check=False)
    return p, out, tb


def _analyzed(session: Path) -> dict[str, object]:
    a = subprocess.run([sys.executable, "-m", "gpuprof", "analyze", str(session), "--format", "json"],
                       capture_output=True, text=True, timeout=300, check=False)
    assert a.returncode == 0, a.stderr
    return json.loads(a.stdout)  # type: ignore[no-any-return]


@pytest.mark.parametrize("start", [0, 3], ids=["from-the-first-step", "inside-gpuprofs-window"])
def test_the_job_keeps_its_profiler_and_its_exit_code(tmp_path: Path, start: int) -> None:
    p, out, tb = _run(tmp_path, start)
    assert p.returncode == 3, p.stderr[-2000:]  # was 139: "Profiler is already enabled on this thread", SIGSEGV
    assert "trained" in p.stdout
    s = read_session(out)
    # gpuprof stepped aside: no trace of its own, the job's last trace is the run's trace.
    assert not list((out / "traces").glob("*.json*"))
    written = sorted(tb.glob("*.pt.trace.json"))
    # The job's last trace was brought into the session (a session is read only from inside
    # itself, issue 33): a hard link to what the job wrote, in traces/job/.
    assert written and len(s.trace_paths) == 1
    assert s.trace_paths[0].parent == out / "traces" / "job"
    assert s.trace_paths[0].read_bytes() == max(written, key=lambda f: f.stat().st_mtime_ns).read_bytes()
    assert any("the job ran its own torch.profiler" in w for w in s.warnings)
    h = s.hook_events
    assert h is not None and (h["kind"] == "note").any() and not s.hook_errors
    report = _analyzed(out)
    assert len(report["ranks"]) == 1  # type: ignore[arg-type]
    assert any("gpuprof recorded no trace of its own" in w for w in report["warnings"])  # type: ignore[union-attr]


def test_a_job_profiler_after_gpuprofs_window_leaves_gpuprofs_trace(tmp_path: Path) -> None:
    # gpuprof's window (2 + 1 + 2 steps from step 1) is over by iteration 10: nothing collides,
    # gpuprof's own trace is the run's, the job's traces are left to the job.
    p, out, tb = _run(tmp_path, start=10, steps=16)
    assert p.returncode == 3, p.stderr[-2000:]
    s = read_session(out)
    assert [t.name for t in s.trace_paths] == ["rank0.pt.trace.json.gz"]
    assert list(tb.glob("*.pt.trace.json"))
    assert not any("the job ran its own torch.profiler" in w for w in s.warnings)
