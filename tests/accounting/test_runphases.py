"""Phases of a run from the cheap signals (gpuprof/accounting/runphases.py): NVML samples
recorded through the fake backend by the real sampler on a fake clock, and the step clock
as the hooks write it; then the whole run as `gpuprof analyze SESSION` reports it."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from gpuprof.accounting.runphases import detect_phases
from gpuprof.record.backend import FakeBackend, GpuInfo
from gpuprof.record.sampler import Sampler
from gpuprof.session import read_session
from gpuprof.session.layout import SESSION_SCHEMA
from gpuprof.session.writer import SessionWriter

T0 = 1000.0
GIB = 1024**3


class FakeTime:
    def __init__(self) -> None:
        self.t = T0

    def clock(self) -> float:
        return self.t

    def waiter(self, polls: int) -> Callable[[float], bool]:
        n = [0]

        def wait(timeout_s: float) -> bool:
            n[0] += 1
            self.t += timeout_s
            return n[0] >= polls

        return wait


def record(root: Path, backend_for: Callable[[Callable[[], float]], FakeBackend], seconds: int,
           steps_at: list[float]) -> Path:
    """A session: NVML sampled once a second for ``seconds`` through ``backend``, and an
    optimizer step ending at each time of ``steps_at`` (seconds from the start)."""
    ft = FakeTime()
    w = SessionWriter(root, clock=ft.clock)
    w.write_meta({"schema": SESSION_SCHEMA, "status": "finished", "command": ["python", "rl.py"], "hooks_enabled": True,
                  "gpus": [], "versions": {}, "warnings": [], "start_time_unix_s": T0, "end_time_unix_s": T0 + seconds})
    Sampler(backend_for(ft.clock), w, interval_s=1.0, clock=ft.clock, wait=ft.waiter(seconds)).run()
    w.close()
    if steps_at:
        lines = (f'{{"time_unix_s":{T0 + t:.6f},"kind":"step","rank":0,"pid":42,"step":{i}}}\n'
                 for i, t in enumerate(steps_at, start=1))
        (root / "hooks" / "rank0-42.jsonl").write_text("".join(lines))
    return root


def update_steps(period_s: float, idle_s: float, seconds: int, every_s: float = 1.0) -> list[float]:
    """Optimizer steps only while the GPUs train (the update of each RL iteration), the last
    one ending as the GPUs go idle."""
    out = []
    start = 0.0
    while start < seconds:
        t = start + idle_s + every_s
        while t <= min(start + period_s, seconds) + 1e-9:
            out.append(round(t, 6))  # whole seconds, like the polls: no boundary blurred by rounding
            t += every_s
        start += period_s
    return out


def kinds(doc: Mapping[str, Any]) -> list[str]:
    return [s["kind"] for s in doc["segments"]]


def test_rl_post_training_rollout_elsewhere_gets_rollout_and_update_with_their_idle_share(tmp_path: Path) -> None:
    """The fake backend's RL job: the trainer GPUs idle 15 s of every 40 s while rollouts are
    generated elsewhere, then train with optimizer steps."""
    root = record(tmp_path, lambda clock: FakeBackend.rl_post_training(n_gpus=2, period_s=40.0, idle_s=15.0, clock=clock),
                  200, update_steps(40.0, 15.0, 200))
    s = read_session(root)
    steps = s.hook_events[s.hook_events["kind"] == "step"]  # type: ignore[index]
    ph = detect_phases(s.samples, steps["time_unix_s"].to_numpy(), steps["step"].to_numpy(), T0, T0 + 200)
    assert ph is not None and ph.rl and ph.source == "steps+nvml"
    doc = ph.to_dict()
    inner = [k for k in kinds(doc) if k not in ("startup", "shutdown")]
    assert inner == ["update", "rollout"] * 4 + ["update"]
    rollout, update = doc["by_kind"]["rollout"], doc["by_kind"]["update"]
    assert rollout["phases"] == 4 and rollout["idle_pct"] == 100.0 and rollout["util_mean_pct"] == 0.0
    assert update["idle_pct"] == 0.0 and update["util_mean_pct"] > 90.0 and update["steps"] > 0
    assert doc["by_kind"]["startup"]["idle_pct"] == 100.0  # the first rollout, before any step
    # Each rollout is the time between two updates: about 15 s of every 40.
    assert all(14.0 <= seg["duration_s"] <= 19.0 for seg in doc["segments"] if seg["kind"] == "rollout")


def colocated(clock: Callable[[], float]) -> FakeBackend:
    """Generation on the trainer GPUs: 25 s of decoding at half utilization with the KV cache
    filling memory, then 15 s of update at full utilization."""

    def script(gpu: int, t: float) -> Mapping[str, Any]:
        phase = math.fmod(t, 40.0)
        if phase < 25.0:
            return {"util_gpu_pct": 45.0 + gpu, "mem_used_bytes": int((30 + phase) * GIB)}
        return {"util_gpu_pct": 97.0, "mem_used_bytes": 70 * GIB}

    gpus = [GpuInfo(i, f"GPU-{i}", "Fake", 80 * GIB) for i in range(4)]
    return FakeBackend(gpus=gpus, script=script, clock=clock)


def test_colocated_generation_is_rollout_too_with_the_gpus_busy(tmp_path: Path) -> None:
    root = record(tmp_path, colocated, 200, update_steps(40.0, 25.0, 200, every_s=1.0))
    from gpuprof.pipeline.session_report import session_report

    report = session_report(root)
    doc = report.extra["phases"]
    assert doc["rl_post_training"] is True
    rollout, update = doc["by_kind"]["rollout"], doc["by_kind"]["update"]
    assert rollout["idle_pct"] == 0.0 and 44.0 <= rollout["util_mean_pct"] <= 50.0  # generating, not idle
    assert update["util_mean_pct"] == 97.0 and rollout["share_pct"] > update["share_pct"]
    seg = next(x for x in doc["segments"] if x["kind"] == "rollout")
    assert seg["mem_peak_bytes"] > seg["mem_mean_bytes"]  # the KV cache grows through a rollout
    text = str(report)
    assert "RL post-training: rollout (generation) alternates with update (optimizer steps)" in text
    assert "rollout: " in text and "idle 0% of the time" in text


def training_with_eval_and_checkpoint(clock: Callable[[], float]) -> FakeBackend:
    def script(gpu: int, t: float) -> Mapping[str, Any]:
        if 60.0 <= t < 72.0:  # evaluation: forward passes, no optimizer step
            return {"util_gpu_pct": 80.0, "mem_used_bytes": 40 * GIB, "pcie_tx_bytes_per_s": 1e6}
        if 130.0 <= t < 136.0:  # a checkpoint: weights copied to the host
            return {"util_gpu_pct": 0.0, "mem_used_bytes": 60 * GIB, "pcie_tx_bytes_per_s": 12e9}
        return {"util_gpu_pct": 95.0, "mem_used_bytes": 60 * GIB, "pcie_tx_bytes_per_s": 1e6}

    return FakeBackend(gpus=[GpuInfo(0, "GPU-0", "Fake", 80 * GIB)], script=script, clock=clock)


def test_eval_and_checkpoint_pauses_in_ordinary_training(tmp_path: Path) -> None:
    steps = [t * 0.5 for t in range(1, 400) if not (60.0 <= t * 0.5 < 72.0 or 130.0 <= t * 0.5 < 136.0)]
    root = record(tmp_path, training_with_eval_and_checkpoint, 200, steps)
    from gpuprof.pipeline.session_report import session_report

    doc = session_report(root).extra["phases"]
    assert doc["rl_post_training"] is False  # two pauses in a long run: not the RL cycle
    assert kinds(doc) == ["training", "eval", "training", "checkpoint", "training"]
    ev = next(s for s in doc["segments"] if s["kind"] == "eval")
    assert ev["start_s"] == pytest.approx(59.5, abs=1.0) and ev["end_s"] == pytest.approx(72.0, abs=1.0)
    assert doc["by_kind"]["training"]["idle_pct"] == 0.0 and doc["by_kind"]["checkpoint"]["idle_pct"] == 100.0


def test_nvml_alone_splits_busy_and_idle_and_finds_the_rl_cycle(tmp_path: Path) -> None:
    root = record(tmp_path, lambda clock: FakeBackend.rl_post_training(n_gpus=2, period_s=40.0, idle_s=15.0, clock=clock),
                  200, [])
    s = read_session(root)
    ph = detect_phases(s.samples, start_unix_s=T0, end_unix_s=T0 + 200)
    assert ph is not None and ph.source == "nvml" and ph.rl
    assert kinds(ph.to_dict()) == ["startup"] + ["update", "rollout"] * 4 + ["update"]
    flat = record(tmp_path / "flat", lambda clock: FakeBackend(
        [GpuInfo(0, "G", "Fake", GIB)], script=lambda g, t: {"util_gpu_pct": 90.0}, clock=clock), 60, [])
    ph2 = detect_phases(read_session(flat).samples)
    assert ph2 is not None and not ph2.rl and kinds(ph2.to_dict()) == ["training"]


def test_steps_alone_say_training_and_idle(tmp_path: Path) -> None:
    ends = [T0 + t for t in [*range(1, 50), *range(80, 120)]]
    ph = detect_phases(None, ends, list(range(1, len(ends) + 1)), T0, T0 + 120)
    assert ph is not None and ph.source == "steps"
    assert kinds(ph.to_dict()) == ["training", "idle", "training"]
    assert ph.phases[0].util_mean_pct is None  # no samples: unknown, not 0
    assert detect_phases(None) is None


def test_phases_of_an_old_simulated_session_need_no_hooks() -> None:
    """sample_traces/rl-post-training (a session without hook records) reads as before, plus phases."""
    root = Path(__file__).resolve().parents[2] / "sample_traces" / "rl-post-training"
    from gpuprof.pipeline.session_report import session_report

    report = session_report(root)
    assert report.ranks and "phases" in report.extra
    assert json.loads(report.to_json())["phases"]["source"] == "nvml"
