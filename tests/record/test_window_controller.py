"""The window controller of gpuprof run (gpuprof/record/windows.py), driven tick by tick on
hook logs written here in the hooks' own format: no job, no thread, no sleep."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpuprof.record.windowplan import WindowOptions, lead_steps
from gpuprof.record.windows import WindowController, top_line
from gpuprof.session.windows import (
    DIAGNOSIS_FILE,
    read_demands,
    read_window_files,
    window_dir,
    write_demand,
)

T0 = 1_700_000_000.0


class Hooks:
    """Hook logs of a fake job: one file per process, lines as gpuprof_torch_hooks writes them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "hooks").mkdir(parents=True, exist_ok=True)
        self.t: dict[int, float] = {}

    def steps(self, pid: int, rank: int, first: int, last: int, step_s: float, to_backward_s: float = 0.002) -> None:
        t = self.t.get(pid, T0)
        with open(self.root / "hooks" / f"rank{rank}-{pid}.jsonl", "a") as fh:
            for s in range(first, last + 1):
                back = t + to_backward_s
                t += step_s
                fh.write(f'{{"time_unix_s":{t:.6f},"kind":"step","rank":{rank},"pid":{pid},"step":{s},'
                         f'"backward_unix_s":{back:.6f}}}\n')
        self.t[pid] = t

    def record(self, pid: int, rank: int, **rec: Any) -> None:
        with open(self.root / "hooks" / f"rank{rank}-{pid}.jsonl", "a") as fh:
            fh.write(json.dumps({"time_unix_s": self.t.get(pid, T0), "rank": rank, "pid": pid, **rec}) + "\n")


class FakeDiagnosis:
    """Stands for the niced analysis process: writes a diagnosis when polled."""

    def __init__(self) -> None:
        self.launched: list[int] = []
        self.step_us: dict[int, float] = {}

    def __call__(self, root: Path, window: int) -> Any:
        self.launched.append(window)
        diag = {"schema": "gpuprof.window/1", "window": window, "ok": True, "step_us": self.step_us.get(window, 1000.0),
                "critical_rank": 1, "waiting_ranks": [0],
                "top": [{"cause": "dataloader", "us_per_step": 38000.0, "pct_of_step": 31.0}]}

        class Done:
            def poll(self) -> int:
                (window_dir(root, window) / DIAGNOSIS_FILE).write_text(json.dumps(diag))
                return 0

            def wait(self, timeout: float | None = None) -> int:
                return self.poll()

        return Done()


def controller(root: Path, launch: FakeDiagnosis | None = None, **opts: Any) -> tuple[WindowController, list[float]]:
    now = [T0]
    notes: list[str] = []
    c = WindowController(root, WindowOptions(**opts), (5, 2, 3), launch=launch or FakeDiagnosis(),
                         note=notes.append, clock=lambda: now[0], wall=lambda: now[0], use_signal=False)
    c.notes = notes  # type: ignore[attr-defined]
    for d in ("windows", "control"):
        (root / d).mkdir(exist_ok=True)
    return c, now


def test_a_change_of_the_step_time_asks_every_rank_for_the_same_steps(tmp_path: Path) -> None:
    hooks = Hooks(tmp_path)
    c, now = controller(tmp_path, trigger_gap_s=0.0)
    for pid, rank in ((100, 0), (101, 1)):
        hooks.steps(pid, rank, 1, 49, 0.1)
        hooks.steps(pid, rank, 50, 60, 0.2)  # from step 50 each step takes twice as long
    now[0] = hooks.t[100]
    c.tick()
    [w] = read_window_files(tmp_path)
    req = w.request
    assert req is not None and req.reason == "change" and req.window == 1
    assert req.change is not None and req.change["step"] == 50 and req.change["detected_step"] <= 53
    assert req.start_step == 60 + lead_steps(0.2, 2)  # the lead logged step, plus a second of steps and the warm-up
    assert c.status().window == f"window 1: steps {req.start_step}-{req.last_step} (change)"
    # Both ranks open it and write their traces; then it is diagnosed and the live line says what it found.
    for pid, rank in ((100, 0), (101, 1)):
        hooks.record(pid, rank, kind="profiler_start", step=req.start_step - 3, window=1,
                     window_steps=[req.start_step, req.last_step])
    c.tick()
    assert c.windows[1].state == "recording"
    hooks.record(100, 0, kind="trace", window=1, path="windows/0001/traces/rank0.pt.trace.json.gz")
    c.tick()
    assert c.windows[1].state == "recording"  # rank 1 has not written its trace yet
    hooks.record(101, 1, kind="trace", window=1, path="windows/0001/traces/rank1.pt.trace.json.gz")
    c.tick()
    c.tick()
    assert c.windows[1].state == "done" and c.launch.launched == [1]  # type: ignore[union-attr]
    assert c.status().window == f"window 1 @{req.start_step}: dataloader 38.0 ms/step (31% of the step) on rank 1, " \
                                "which rank 0 waits for"
    assert c.notes and c.notes[-1].startswith(f"window 1 (steps {req.start_step}-{req.last_step}, step time rose")  # type: ignore[attr-defined]


def test_the_rank_the_others_wait_for_is_named_live(tmp_path: Path) -> None:
    hooks = Hooks(tmp_path)
    c, now = controller(tmp_path)
    hooks.steps(100, 0, 1, 80, 0.1, to_backward_s=0.002)
    hooks.steps(101, 1, 1, 80, 0.1, to_backward_s=0.052)  # rank 1 reaches backward 50 ms later
    now[0] = hooks.t[100]
    c.tick()
    assert c.status().slowest == "slowest rank 1 (+50.0 ms before backward)"


def test_demands_from_trigger_and_from_the_trigger_signal(tmp_path: Path) -> None:
    hooks = Hooks(tmp_path)
    c, now = controller(tmp_path, on_change=False)
    hooks.steps(100, 0, 1, 30, 0.1)
    now[0] = hooks.t[100]
    name = write_demand(tmp_path, at_step=50)
    c.tick()
    [w] = read_window_files(tmp_path)
    assert w.request is not None and w.request.demand == name and w.request.start_step == 50
    assert read_demands(tmp_path) == []  # answered: the demand file is gone
    # The window is recorded (one process), diagnosed; then the trigger signal asks for the next.
    hooks.record(100, 0, kind="profiler_start", window=1, step=47)
    hooks.steps(100, 0, 31, 55, 0.1)
    hooks.record(100, 0, kind="trace", window=1, path="x")
    now[0] = hooks.t[100]
    c.tick()
    c.tick()
    c._on_signal(10, None)
    c.tick()
    second = [w for w in read_window_files(tmp_path) if w.window == 2]
    assert second and second[0].request is not None and second[0].request.demand == "signal-1"


def test_windows_beyond_keep_lose_their_traces_but_not_their_diagnosis(tmp_path: Path) -> None:
    hooks = Hooks(tmp_path)
    diag = FakeDiagnosis()
    diag.step_us = {1: 5000.0, 2: 1000.0, 3: 1200.0}  # window 1 is the worst
    c, now = controller(tmp_path, launch=diag, on_change=False, keep=1)
    hooks.steps(100, 0, 1, 20, 0.1)
    for n in (1, 2, 3):
        now[0] = hooks.t[100]
        name = write_demand(tmp_path)
        c.tick()
        req = next(w.request for w in read_window_files(tmp_path) if w.window == n)
        assert req is not None and req.demand == name
        traces = window_dir(tmp_path, n) / "traces"
        traces.mkdir()
        (traces / "rank0.pt.trace.json.gz").write_bytes(b"x" * 100)
        hooks.record(100, 0, kind="profiler_start", window=n, step=req.start_step - 3)
        hooks.steps(100, 0, hooks_last(hooks, tmp_path) + 1, req.last_step + 2, 0.1)
        hooks.record(100, 0, kind="trace", window=n, path="x")
        now[0] = hooks.t[100]
        c.tick()
        c.tick()
    kept = {w.window: bool(w.traces) for w in read_window_files(tmp_path)}
    assert kept == {1: True, 2: False, 3: True}  # the worst and the latest
    assert all(w.diagnosis is not None for w in read_window_files(tmp_path))


def hooks_last(hooks: Hooks, root: Path) -> int:
    lines = (root / "hooks" / "rank0-100.jsonl").read_text().splitlines()
    return max(json.loads(x)["step"] for x in lines if '"kind":"step"' in x)


def test_a_window_no_process_opened_is_given_up_and_the_next_one_can_come(tmp_path: Path) -> None:
    hooks = Hooks(tmp_path)
    c, now = controller(tmp_path, on_change=False)
    hooks.steps(100, 0, 1, 30, 0.1)
    now[0] = hooks.t[100]
    write_demand(tmp_path)
    c.tick()
    req = c.windows[1].request
    hooks.record(100, 0, kind="window_missed", window=1, step=req.start_step + 1)
    hooks.steps(100, 0, 31, req.last_step + 10, 0.1)
    now[0] = hooks.t[100]
    c.tick()
    now[0] += 200.0
    c.tick()
    assert c.windows[1].state == "done" and c.launch.launched == []  # type: ignore[union-attr]


def test_top_line_reads_a_diagnosis_defensively() -> None:
    assert top_line({"ok": True, "top": []}) == "no cause stands out"
    assert top_line({"ok": False}) is None
    assert top_line({"top": [{"cause": "sync", "saved_us_per_step": 2500.0, "savings_pct": 12.4}]}) == \
        "sync, saves 2.5 ms/step (12%)"
    assert top_line({"top": [{"cause": 5}], "critical_rank": "x", "waiting_ranks": "y"}) == "?"


def test_the_real_diagnosis_process_is_launched_at_the_lowest_priority(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """launch_diagnosis runs the module niced to 19 (checked on a stand-in command)."""
    import gpuprof.record.windows as w

    seen: dict[str, Any] = {}
    orig = subprocess.Popen

    def popen(argv: list[str], **kw: Any) -> Any:
        seen["argv"], seen["env"], seen["preexec"] = argv, kw["env"], kw["preexec_fn"]
        return orig(["true"])

    monkeypatch.setattr(w.subprocess, "Popen", popen)
    w.launch_diagnosis(tmp_path, 3).wait()
    monkeypatch.undo()
    assert seen["argv"][1:] == ["-m", "gpuprof.pipeline.windowdiag", str(tmp_path), "3"]
    assert not any(k.startswith("GPUPROF_") for k in seen["env"])
    pid = os.fork()
    if pid == 0:
        seen["preexec"]()
        os._exit(os.nice(0))
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 19


def test_a_change_waits_for_the_diagnosis_before_it_and_one_covered_by_a_window_waits_not(tmp_path: Path) -> None:
    class Slow(FakeDiagnosis):
        done = False

        def __call__(self, root: Path, window: int) -> Any:
            inner = super().__call__(root, window)
            outer = self

            class Running:
                def poll(self) -> int | None:
                    return inner.poll() if outer.done else None

            return Running()

    hooks = Hooks(tmp_path)
    slow = Slow()
    c, now = controller(tmp_path, launch=slow, trigger_gap_s=0.0)
    hooks.steps(100, 0, 1, 20, 0.1)
    now[0] = hooks.t[100]
    write_demand(tmp_path)
    c.tick()
    first = c.windows[1].request
    hooks.record(100, 0, kind="profiler_start", window=1, step=first.start_step - 3)
    hooks.steps(100, 0, 21, first.last_step + 25, 0.1)
    hooks.record(100, 0, kind="trace", window=1, path="x")
    hooks.steps(100, 0, first.last_step + 26, first.last_step + 40, 0.2)  # the step time doubles
    now[0] = hooks.t[100]
    c.tick()
    c.tick()
    assert c.windows[1].state == "diagnosing" and len(c.windows) == 1 and c.pending_change is not None
    slow.done = True
    c.tick()  # diagnosed: the change gets its window now
    assert c.windows[2].request.reason == "change"
    assert c.windows[2].request.change is not None and c.windows[2].request.change["step"] == first.last_step + 26
    # A change before a window that is already on its way is that window's to record.
    hooks.steps(100, 0, first.last_step + 41, first.last_step + 60, 0.05)
    now[0] = hooks.t[100]
    c.tick()
    assert c.pending_change is None and len(c.windows) == 2
