"""The NVML backend against a stubbed NVML module (no GPU needed).

The stub reuses the real ``pynvml`` constants, exception classes and GPM structures, and
answers the calls :class:`NvmlBackend` makes for several fake GPUs; per-GPU switches make a
metric NotSupported or the GPU lost after some polls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from gpuprof.record.backend import BackendUnavailable, GpuLostError
from gpuprof.record.nvml import NvmlBackend


@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    util: tuple[int, int] = (87, 40)
    mem: tuple[int, int] = (60 * 1024**3, 80 * 1024**3)  # used, total bytes
    power_mw: int = 512_000
    energy_mj: int = 9_000_000
    clocks: tuple[int, int] = (1980, 2619)
    reasons: int = 0x4
    temp_c: int = 66
    pcie_kbs: tuple[int, int] = (1000, 2000)
    nvlink_kib: tuple[int, int] | None = (123, 456)
    not_supported: set[str] = field(default_factory=set)
    lost_after_polls: int | None = None
    gpm: bool = False
    processes: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, used bytes)
    proc_util: list[tuple[int, int, int]] = field(default_factory=list)  # (pid, sm %, mem %)
    mig_children: list[str] = field(default_factory=list)
    polls: int = 0


class StubNvml:
    """Looks like the ``pynvml`` module to NvmlBackend."""

    def __init__(self, gpus: list[FakeGpu], init_error: int | None = None) -> None:
        for name in dir(pynvml):
            if name.startswith(("NVML_", "NVMLError", "c_nvml")):
                setattr(self, name, getattr(pynvml, name))
        self.NVMLError = pynvml.NVMLError
        self.gpus = gpus
        self.init_error = init_error
        self.calls: dict[str, int] = {}
        self.shutdown_called = False
        self.mig: dict[str, tuple[int, int]] = {}  # MIG uuid -> (parent index, gi id)
        for i, g in enumerate(gpus):
            for j, u in enumerate(g.mig_children):
                self.mig[u] = (i, j + 1)

    # helpers
    def _gpu(self, h: Any, metric: str) -> FakeGpu:
        self.calls[metric] = self.calls.get(metric, 0) + 1
        if isinstance(h, tuple):  # a MIG handle: ("mig", uuid)
            h = self.mig[h[1]][0]
        g = self.gpus[h]
        if g.lost_after_polls is not None and g.polls > g.lost_after_polls:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        if metric in g.not_supported:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return g

    # lifecycle and enumeration
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shutdown_called = True

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> Any:
        if uuid in self.mig:
            return ("mig", uuid)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, h: Any) -> int:
        return self.mig[h[1]][0]

    def nvmlDeviceGetGpuInstanceId(self, h: Any) -> int:
        return self.mig[h[1]][1]

    def nvmlDeviceGetUUID(self, h: Any) -> str:
        return h[1] if isinstance(h, tuple) else self.gpus[h].uuid

    def nvmlDeviceGetName(self, h: Any) -> bytes:
        return b"MIG 1g.10gb" if isinstance(h, tuple) else self.gpus[h].name.encode()

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.54.15"

    def nvmlSystemGetNVMLVersion(self) -> str:
        return "12.550.54.15"

    # metrics
    def nvmlDeviceGetUtilizationRates(self, h: Any) -> Any:
        g = self._gpu(h, "util")
        g.polls += 1  # the first call of a poll counts the poll
        if g.lost_after_polls is not None and g.polls > g.lost_after_polls:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return SimpleNamespace(gpu=g.util[0], memory=g.util[1])

    def nvmlDeviceGetMemoryInfo(self, h: Any) -> Any:
        g = self._gpu(h, "mem")
        return SimpleNamespace(used=g.mem[0], total=g.mem[1], free=g.mem[1] - g.mem[0])

    def nvmlDeviceGetPowerUsage(self, h: Any) -> int:
        return self._gpu(h, "power").power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, h: Any) -> int:
        return self._gpu(h, "energy").energy_mj

    def nvmlDeviceGetClockInfo(self, h: Any, kind: int) -> int:
        g = self._gpu(h, "clocks")
        return g.clocks[0] if kind == pynvml.NVML_CLOCK_SM else g.clocks[1]

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: Any) -> int:
        return self._gpu(h, "reasons").reasons

    def nvmlDeviceGetTemperature(self, h: Any, sensor: int) -> int:
        return self._gpu(h, "temp").temp_c

    def nvmlDeviceGetPcieThroughput(self, h: Any, counter: int) -> int:
        g = self._gpu(h, "pcie")
        return g.pcie_kbs[0] if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES else g.pcie_kbs[1]

    def nvmlDeviceGetFieldValues(self, h: Any, ids: list[Any]) -> list[Any]:
        g = self._gpu(h, "nvlink")
        if g.nvlink_kib is None:
            return [SimpleNamespace(nvmlReturn=pynvml.NVML_ERROR_NOT_SUPPORTED, value=None) for _ in ids]
        return [SimpleNamespace(nvmlReturn=pynvml.NVML_SUCCESS, value=SimpleNamespace(ullVal=v))
                for v in g.nvlink_kib]

    def nvmlDeviceGetComputeRunningProcesses(self, h: Any) -> list[Any]:
        g = self._gpu(h, "procs")
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in g.processes]

    def nvmlDeviceGetProcessUtilization(self, h: Any, ts: int) -> list[Any]:
        g = self._gpu(h, "proc_util")
        return [SimpleNamespace(pid=p, smUtil=s, memUtil=m, timeStamp=1000 + ts) for p, s, m in g.proc_util]

    # GPM
    def nvmlGpmQueryDeviceSupport(self, h: Any) -> Any:
        return SimpleNamespace(isSupportedDevice=int(self.gpus[h].gpm))

    def nvmlGpmSampleAlloc(self) -> Any:
        return pynvml.c_nvmlGpmSample_t()  # the real (opaque) type, as the struct demands

    def nvmlGpmSampleFree(self, s: Any) -> None:
        pass

    def nvmlGpmSampleGet(self, h: Any, s: Any) -> Any:
        self.calls["gpm_sample"] = self.calls.get("gpm_sample", 0) + 1
        return s

    def nvmlGpmMetricsGet(self, req: Any) -> Any:
        values = {pynvml.NVML_GPM_METRIC_SM_UTIL: 71.5, pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: 33.0,
                  pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 55.25, pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC: 10.0}
        for i in range(req.numMetrics):
            m = req.metrics[i]
            if m.metricId in values:
                m.value = values[m.metricId]
                m.nvmlReturn = pynvml.NVML_SUCCESS
            else:  # DRAM bandwidth: not supported on this fake
                m.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return req


def three_gpus() -> list[FakeGpu]:
    return [FakeGpu(uuid=f"GPU-aaaa{i}111-2222-3333-4444-55556666777{i}") for i in range(3)]


def test_enumerates_every_gpu_with_name_memory_and_versions() -> None:
    be = NvmlBackend(StubNvml(three_gpus()), visible_devices=None)
    devs = be.devices()
    assert [d.index for d in devs] == [0, 1, 2]
    assert devs[1].uuid.startswith("GPU-aaaa1")
    assert devs[0].name == "NVIDIA H100 80GB HBM3"
    assert devs[0].mem_total_bytes == 80 * 1024**3
    assert be.versions() == {"driver": "550.54.15", "nvml": "12.550.54.15"}


def test_poll_converts_units() -> None:
    be = NvmlBackend(StubNvml(three_gpus()))
    s = be.poll(0, frozenset()).sample
    assert s.util_gpu_pct == 87.0 and s.util_mem_pct == 40.0
    assert s.mem_used_bytes == 60 * 1024**3 and s.mem_total_bytes == 80 * 1024**3
    assert s.power_w == pytest.approx(512.0)  # mW -> W
    assert s.energy_mj == 9_000_000
    assert (s.clock_sm_mhz, s.clock_mem_mhz) == (1980.0, 2619.0)
    assert s.clock_event_reasons == 0x4
    assert s.temperature_c == 66.0
    assert s.pcie_tx_bytes_per_s == 1000 * 1024 and s.pcie_rx_bytes_per_s == 2000 * 1024
    assert (s.nvlink_tx_kib, s.nvlink_rx_kib) == (123.0, 456.0)
    assert s.gpm_sm_active_pct is None  # this GPU has no GPM


def test_cuda_visible_devices_order_uuid_prefix_and_stop_at_invalid() -> None:
    gpus = three_gpus()
    be = NvmlBackend(StubNvml(gpus), visible_devices="2,GPU-aaaa0,7,1")
    # "7" names no device: CUDA ignores it and everything after it.
    assert [d.uuid for d in be.devices()] == [gpus[2].uuid, gpus[0].uuid]
    assert NvmlBackend(StubNvml(three_gpus()), visible_devices="").devices() == ()
    assert NvmlBackend(StubNvml(three_gpus()), visible_devices="-1").devices() == ()


def test_ambiguous_uuid_prefix_is_not_a_device() -> None:
    assert NvmlBackend(StubNvml(three_gpus()), visible_devices="GPU-aaaa").devices() == ()


def test_mig_device_by_uuid_reports_what_nvml_supports() -> None:
    gpus = three_gpus()
    gpus[1].mig_children = ["MIG-1111-2222"]
    stub = StubNvml(gpus)
    be = NvmlBackend(stub, visible_devices="MIG-1111-2222")
    (dev,) = be.devices()
    assert dev.mig and dev.uuid == "MIG-1111-2222" and dev.name == "MIG 1g.10gb"
    s = be.poll(0, frozenset()).sample
    assert s.mem_used_bytes == gpus[1].mem[0]


def test_not_supported_metric_is_none_never_zero_and_not_asked_again() -> None:
    gpus = three_gpus()
    gpus[1].not_supported = {"power", "energy", "pcie", "nvlink", "reasons"}
    stub = StubNvml(gpus)
    be = NvmlBackend(stub)
    for _ in range(3):
        s1 = be.poll(1, frozenset()).sample
    assert s1.power_w is None and s1.energy_mj is None
    assert s1.pcie_tx_bytes_per_s is None and s1.nvlink_rx_kib is None and s1.clock_event_reasons is None
    assert s1.util_gpu_pct == 87.0  # the rest still measured
    s0 = be.poll(0, frozenset()).sample
    assert s0.power_w == pytest.approx(512.0)  # other GPUs unaffected
    # GPU 1 was asked about power once (then remembered as unsupported), GPU 0 once.
    assert stub.calls["power"] == 2


def test_nvlink_field_not_supported_is_none() -> None:
    gpus = three_gpus()
    gpus[0].nvlink_kib = None
    s = NvmlBackend(StubNvml(gpus)).poll(0, frozenset()).sample
    assert s.nvlink_tx_kib is None and s.nvlink_rx_kib is None


def test_gpu_lost_mid_run_raises_for_it_only() -> None:
    gpus = three_gpus()
    gpus[2].lost_after_polls = 2
    be = NvmlBackend(StubNvml(gpus))
    for _ in range(2):
        be.poll(2, frozenset())
    with pytest.raises(GpuLostError):
        be.poll(2, frozenset())
    with pytest.raises(GpuLostError):  # stays lost
        be.poll(2, frozenset())
    assert be.poll(0, frozenset()).sample.util_gpu_pct == 87.0


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, pynvml.NVML_ERROR_DRIVER_NOT_LOADED])
def test_no_library_or_driver_is_backend_unavailable(code: int) -> None:
    with pytest.raises(BackendUnavailable, match="no NVIDIA driver"):
        NvmlBackend(StubNvml(three_gpus(), init_error=code))


def test_real_pynvml_without_driver_is_backend_unavailable() -> None:
    try:
        be = NvmlBackend()
    except BackendUnavailable as exc:
        assert "NVML" in str(exc)
        return
    be.close()
    pytest.skip("this machine has a working NVIDIA driver")


def test_processes_are_limited_to_the_job() -> None:
    gpus = three_gpus()
    gpus[0].processes = [(100, 5 * 1024**3), (200, 7 * 1024**3), (300, None)]
    gpus[0].proc_util = [(100, 80, 30), (999, 50, 10)]
    poll = NvmlBackend(StubNvml(gpus)).poll(0, frozenset({100, 300}))
    by_pid = {p.pid: p for p in poll.processes}
    assert set(by_pid) == {100, 300}
    assert by_pid[100].mem_used_bytes == 5 * 1024**3 and by_pid[100].util_sm_pct == 80.0
    assert by_pid[300].mem_used_bytes is None and by_pid[300].util_sm_pct is None


def test_gpm_metrics_from_the_second_poll_on() -> None:
    gpus = three_gpus()
    gpus[0].gpm = True
    be = NvmlBackend(StubNvml(gpus))
    first = be.poll(0, frozenset()).sample
    assert first.gpm_sm_active_pct is None  # GPM needs two samples
    second = be.poll(0, frozenset()).sample
    assert second.gpm_sm_active_pct == 71.5
    assert second.gpm_sm_occupancy_pct == 33.0
    assert second.gpm_tensor_active_pct == 55.25
    assert second.gpm_dram_bw_pct is None  # unsupported metric stays unknown
    assert second.pcie_tx_bytes_per_s == 10.0 * 1024 * 1024  # GPM's MiB/s
    assert second.pcie_rx_bytes_per_s is None
    assert "pcie" not in be.nvml.calls  # the blocking PCIe counter is not used when GPM works


def test_close_shuts_nvml_down() -> None:
    stub = StubNvml(three_gpus())
    NvmlBackend(stub).close()
    assert stub.shutdown_called


def test_only_nvml_module_imports_pynvml() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "gpuprof"
    importers = sorted(
        str(p.relative_to(root)) for p in root.rglob("*.py")
        if "import pynvml" in p.read_text(encoding="utf-8") or "from pynvml" in p.read_text(encoding="utf-8")
    )
    assert importers == ["record/nvml.py"]


def test_error_while_listing_gpus_is_backend_unavailable() -> None:
    stub = StubNvml(three_gpus())

    def no_permission(i: int) -> int:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)

    stub.nvmlDeviceGetHandleByIndex = no_permission  # type: ignore[method-assign]
    with pytest.raises(BackendUnavailable, match="could not list"):
        NvmlBackend(stub)
    assert stub.shutdown_called


def test_sampler_over_stubbed_nvml_keeps_going_after_a_gpu_is_lost(tmp_path: object) -> None:
    from pathlib import Path

    from gpuprof.record.sampler import Sampler
    from gpuprof.session import read_session
    from gpuprof.session.layout import SESSION_SCHEMA
    from gpuprof.session.writer import SessionWriter

    root = Path(str(tmp_path))
    gpus = three_gpus()
    gpus[1].lost_after_polls = 3
    gpus[2].not_supported = {"power"}
    t = [100.0]
    writer = SessionWriter(root, clock=lambda: t[0])
    writer.write_meta({"schema": SESSION_SCHEMA, "status": "finished"})
    sampler = Sampler(NvmlBackend(StubNvml(gpus)), writer, interval_s=1.0, clock=lambda: t[0])
    for _ in range(6):
        sampler.poll_once()
        t[0] += 1.0
    writer.close()
    df = read_session(root).samples
    assert df is not None
    assert (df["gpu"] == 0).sum() == 6 and (df["gpu"] == 2).sum() == 6
    g1 = df[df["gpu"] == 1]
    assert list(g1["lost"]) == [False, False, False, True]
    assert df[df["gpu"] == 2]["power_w"].isna().all() and (df[df["gpu"] == 0]["power_w"] == 512.0).all()
