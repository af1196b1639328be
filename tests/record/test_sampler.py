"""The sampler on a scripted fake backend and a fake clock: no sleeping, no GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping

import pytest

from gpuprof.record.backend import FakeBackend, GpuInfo, GpuLostError, ProcessSample
from gpuprof.record.sampler import Sampler, process_tree_pids
from gpuprof.session import read_session
from gpuprof.session.layout import SAMPLES_FILE, SESSION_SCHEMA
from gpuprof.session.writer import SessionWriter


class FakeTime:
    def __init__(self, start: float = 1000.0) -> None:
        self.t = start
        self.waits: list[float] = []

    def clock(self) -> float:
        return self.t

    def waiter(self, polls: int) -> Any:
        def wait(timeout_s: float) -> bool:
            self.waits.append(timeout_s)
            self.t += timeout_s
            return len(self.waits) >= polls

        return wait


def _gpus(n: int) -> list[GpuInfo]:
    return [GpuInfo(index=i, uuid=f"GPU-{i}", name="Fake", mem_total_bytes=1000) for i in range(n)]


def _writer(tmp_path: Path, ft: FakeTime) -> SessionWriter:
    w = SessionWriter(tmp_path, clock=ft.clock)
    w.write_meta({"schema": SESSION_SCHEMA, "status": "finished"})
    return w


def test_polls_every_gpu_on_a_fixed_grid(tmp_path: Path) -> None:
    ft = FakeTime()
    be = FakeBackend(_gpus(3), script=lambda g, t: {"util_gpu_pct": 10.0 * g}, clock=ft.clock)
    w = _writer(tmp_path, ft)
    Sampler(be, w, interval_s=0.25, clock=ft.clock, wait=ft.waiter(8)).run()
    w.close()
    df = read_session(tmp_path).samples
    assert df is not None
    assert len(df) == 3 * 8
    times = sorted(set(df["time_unix_s"]))
    assert times == pytest.approx([1000.0 + 0.25 * i for i in range(8)])
    assert list(df[df["time_unix_s"] == 1000.0]["util_gpu_pct"]) == [0.0, 10.0, 20.0]


def test_slow_backend_realigns_instead_of_bursting(tmp_path: Path) -> None:
    ft = FakeTime()

    def slow(g: int, t: float) -> Mapping[str, Any]:
        ft.t += 0.7  # each poll takes longer than the interval
        return {}

    be = FakeBackend(_gpus(1), script=slow, clock=ft.clock)
    w = _writer(tmp_path, ft)
    Sampler(be, w, interval_s=0.5, clock=ft.clock, wait=ft.waiter(4)).run()
    assert all(x > 0 for x in ft.waits)


def test_lost_gpu_is_recorded_once_and_the_others_go_on(tmp_path: Path) -> None:
    ft = FakeTime()

    def script(g: int, t: float) -> Mapping[str, Any]:
        if g == 1 and t >= 1.0:
            raise GpuLostError("GPU 1 is lost")
        return {"util_gpu_pct": 50.0}

    be = FakeBackend(_gpus(2), script=script, clock=ft.clock)
    w = _writer(tmp_path, ft)
    sampler = Sampler(be, w, interval_s=0.5, clock=ft.clock, wait=ft.waiter(6))
    sampler.run()
    w.close()
    s = read_session(tmp_path)
    assert s.samples is not None
    g1 = s.samples[s.samples["gpu"] == 1]
    assert list(g1["lost"]) == [False, False, True]
    assert len(s.samples[s.samples["gpu"] == 0]) == 6
    assert [e["kind"] for e in s.events] == ["gpu_lost"]
    assert sampler.lost == {1}


def test_backend_error_is_logged_once_and_sampling_continues(tmp_path: Path) -> None:
    ft = FakeTime()
    calls = {"n": 0}

    def script(g: int, t: float) -> Mapping[str, Any]:
        calls["n"] += 1
        if calls["n"] in (2, 3):
            raise RuntimeError("driver hiccup")
        return {"util_gpu_pct": 1.0}

    be = FakeBackend(_gpus(1), script=script, clock=ft.clock)
    w = _writer(tmp_path, ft)
    Sampler(be, w, interval_s=0.5, clock=ft.clock, wait=ft.waiter(5)).run()
    w.close()
    s = read_session(tmp_path)
    assert s.samples is not None and len(s.samples) == 3
    assert [e["kind"] for e in s.events] == ["error"]


def test_unsupported_metric_is_null_not_zero(tmp_path: Path) -> None:
    ft = FakeTime()
    be = FakeBackend(_gpus(1), script=lambda g, t: {"util_gpu_pct": 0.0}, clock=ft.clock)
    w = _writer(tmp_path, ft)
    Sampler(be, w, interval_s=0.5, clock=ft.clock, wait=ft.waiter(1)).run()
    w.close()
    rec = json.loads((tmp_path / SAMPLES_FILE).read_text().splitlines()[0])
    assert rec["util_gpu_pct"] == 0.0 and rec["power_w"] is None and rec["energy_mj"] is None


def test_samples_reach_the_disk_within_a_second(tmp_path: Path) -> None:
    ft = FakeTime()
    be = FakeBackend(_gpus(1), script=lambda g, t: {"util_gpu_pct": 1.0}, clock=ft.clock)
    w = _writer(tmp_path, ft)
    sampler = Sampler(be, w, interval_s=0.1, clock=ft.clock)
    on_disk = []
    for _ in range(25):
        sampler.poll_once()
        ft.t += 0.1
        on_disk.append(len((tmp_path / SAMPLES_FILE).read_text().splitlines()))
    # After k polls at most ~1 s (10 polls) may still be in the buffer; never more.
    for k, n in enumerate(on_disk, start=1):
        assert k - n <= 11
    assert on_disk[-1] >= 14


def test_processes_of_the_job_are_recorded(tmp_path: Path) -> None:
    ft = FakeTime()
    be = FakeBackend(
        _gpus(1),
        script=lambda g, t: {},
        clock=ft.clock,
        process_script=lambda g, t, pids: [ProcessSample(gpu=g, pid=p, mem_used_bytes=5) for p in sorted(pids)],
    )
    w = _writer(tmp_path, ft)
    Sampler(be, w, interval_s=0.5, clock=ft.clock, wait=ft.waiter(2), pids=lambda: frozenset({7, 8})).run()
    w.close()
    procs = read_session(tmp_path).processes
    assert procs is not None and sorted(set(procs["pid"])) == [7, 8]


def test_rl_script_alternates_busy_and_idle() -> None:
    ft = FakeTime()
    be = FakeBackend.rl_post_training(n_gpus=2, period_s=40.0, idle_s=15.0, clock=ft.clock)
    first = be.poll(0, frozenset()).sample
    ft.t += 20.0
    later = be.poll(0, frozenset()).sample
    assert first.util_gpu_pct == 0.0 and later.util_gpu_pct is not None and later.util_gpu_pct > 90


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc")
def test_process_tree_includes_grandchildren() -> None:
    code = (
        "import subprocess,sys,time; p=subprocess.Popen([sys.executable,'-c','import time; time.sleep(30)']); "
        "print(p.pid, flush=True); time.sleep(30)"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        grandchild = int(child.stdout.readline())
        tree = process_tree_pids(child.pid)
        assert {child.pid, grandchild} <= tree
        assert os.getpid() not in tree
    finally:
        child.kill()
        child.wait()
        try:
            os.kill(grandchild, 9)
        except (ProcessLookupError, UnboundLocalError):
            pass
