"""The GPU backend seam: what the sampler needs from NVML, and a scripted fake.

The sampler only talks to a :class:`GpuBackend`. :class:`gpuprof.record.nvml.NvmlBackend`
is the real one (the only code that touches ``pynvml``); :class:`FakeBackend` plays back a
script of values so the sampler, the session writer and ``gpuprof simulate`` run with no
GPU. Every metric is ``None`` when unsupported or unreadable -- never 0, which would read
as an idle GPU.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Mapping, Protocol, Sequence


class BackendUnavailable(Exception):
    """No usable NVML (library missing, driver not loaded): the run goes on without samples."""


class GpuLostError(Exception):
    """NVML reported the GPU lost (fell off the bus); it is not polled again."""


@dataclass(frozen=True)
class GpuInfo:
    """A GPU visible to the job. ``index`` is its position in the job's visible order."""

    index: int
    uuid: str
    name: str
    mem_total_bytes: int | None = None
    mig: bool = False  # True for a MIG device (a slice of a physical GPU)

    def to_meta(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class GpuSample:
    """One poll of one GPU. Units are in the names; ``None`` = unsupported / unreadable."""

    gpu: int
    uuid: str
    util_gpu_pct: float | None = None
    util_mem_pct: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    power_w: float | None = None
    energy_mj: float | None = None
    clock_sm_mhz: float | None = None
    clock_mem_mhz: float | None = None
    clock_event_reasons: int | None = None
    temperature_c: float | None = None
    pcie_tx_bytes_per_s: float | None = None
    pcie_rx_bytes_per_s: float | None = None
    nvlink_tx_kib: float | None = None
    nvlink_rx_kib: float | None = None
    gpm_sm_active_pct: float | None = None
    gpm_sm_occupancy_pct: float | None = None
    gpm_tensor_active_pct: float | None = None
    gpm_dram_bw_pct: float | None = None

    def to_record(self, time_unix_s: float) -> dict[str, Any]:
        rec: dict[str, Any] = {"time_unix_s": time_unix_s}
        rec.update(asdict(self))
        rec["lost"] = False
        return rec


@dataclass(frozen=True)
class ProcessSample:
    """GPU use of one process of the job on one GPU."""

    gpu: int
    pid: int
    mem_used_bytes: int | None = None
    util_sm_pct: float | None = None
    util_mem_pct: float | None = None


@dataclass(frozen=True)
class Poll:
    sample: GpuSample
    processes: tuple[ProcessSample, ...] = ()


class GpuBackend(Protocol):
    """What the sampler needs. Implementations never change any GPU setting."""

    def devices(self) -> Sequence[GpuInfo]:
        """The GPUs visible to the job, in the job's order."""
        ...

    def poll(self, gpu: int, pids: frozenset[int]) -> Poll:
        """Read every metric of GPU ``gpu``; per-process rows only for ``pids``.

        Raises :class:`GpuLostError` when the GPU is lost.
        """
        ...

    def versions(self) -> Mapping[str, str | None]:
        """``driver`` and ``nvml`` version strings (None when unknown)."""
        ...

    def close(self) -> None: ...


# A script maps (gpu index, seconds since the backend started) to metric values, or
# raises GpuLostError. Keys are GpuSample field names.
Script = Callable[[int, float], Mapping[str, Any]]


@dataclass
class FakeBackend:
    """A scripted backend for tests and ``gpuprof simulate``.

    ``script(gpu, elapsed_s)`` returns the metric values of that poll (missing keys are
    unsupported, i.e. None) or raises :class:`GpuLostError`. ``clock`` is the same injected
    clock the sampler uses, so a fake clock drives both.
    """

    gpus: Sequence[GpuInfo]
    script: Script
    clock: Callable[[], float] = time.monotonic
    process_script: Callable[[int, float, frozenset[int]], Sequence[ProcessSample]] | None = None
    driver_version: str | None = "fake"
    polls: int = 0
    closed: bool = False
    _t0: float | None = field(default=None, repr=False)

    def devices(self) -> Sequence[GpuInfo]:
        return tuple(self.gpus)

    def poll(self, gpu: int, pids: frozenset[int]) -> Poll:
        now = self.clock()
        if self._t0 is None:
            self._t0 = now
        elapsed = now - self._t0
        self.polls += 1
        values = dict(self.script(gpu, elapsed))
        info = self.gpus[gpu]
        values.setdefault("mem_total_bytes", info.mem_total_bytes)
        sample = replace(GpuSample(gpu=gpu, uuid=info.uuid), **values)
        procs = tuple(self.process_script(gpu, elapsed, pids)) if self.process_script else ()
        return Poll(sample, procs)

    def versions(self) -> Mapping[str, str | None]:
        return {"driver": self.driver_version, "nvml": None}

    def close(self) -> None:
        self.closed = True

    @classmethod
    def rl_post_training(
        cls,
        n_gpus: int = 8,
        period_s: float = 40.0,
        idle_s: float = 15.0,
        busy_util_pct: float = 92.0,
        mem_total_bytes: int = 80 * 1024**3,
        clock: Callable[[], float] = time.monotonic,
    ) -> "FakeBackend":
        """GPUs that alternate ``period_s - idle_s`` of training with ``idle_s`` of idle time.

        The signature of RL post-training where rollout generation runs elsewhere (or on
        the CPU) and the trainer GPUs wait for it. Starts with the idle (rollout) phase.
        """

        def script(gpu: int, t: float) -> Mapping[str, Any]:
            phase = math.fmod(t, period_s)
            busy = phase >= idle_s
            util = busy_util_pct + (gpu % 3) if busy else 0.0
            power = 650.0 if busy else 90.0
            return {
                "util_gpu_pct": min(util, 100.0),
                "util_mem_pct": 45.0 if busy else 0.0,
                "mem_used_bytes": int(mem_total_bytes * (0.7 if busy else 0.55)),
                "power_w": power,
                "energy_mj": t * 1000.0 * (90.0 + (650.0 - 90.0) * (1 - idle_s / period_s)),
                "clock_sm_mhz": 1980.0 if busy else 345.0,
                "clock_mem_mhz": 2619.0,
                "clock_event_reasons": 0 if busy else 1,
                "temperature_c": 71.0 if busy else 38.0,
            }

        gpus = [
            GpuInfo(index=i, uuid=f"GPU-fake-{i:04d}", name="Fake H100 80GB HBM3", mem_total_bytes=mem_total_bytes)
            for i in range(n_gpus)
        ]
        return cls(gpus=gpus, script=script, clock=clock)
