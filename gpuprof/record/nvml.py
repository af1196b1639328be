"""The NVML backend: the only module that imports ``pynvml`` (package ``nvidia-ml-py``).

Every NVML call goes through :meth:`NvmlBackend._query`, the one chokepoint that turns
"not supported" (or any other per-metric failure) into ``None`` and "GPU is lost" into
:class:`~gpuprof.record.backend.GpuLostError`. A metric that once answered NotSupported is
not asked again on that GPU. Nothing here changes a GPU setting.

Visible GPUs follow ``CUDA_VISIBLE_DEVICES`` as CUDA reads it: indices, ``GPU-<uuid>``
(prefixes allowed), ``MIG-<uuid>``; parsing stops at the first entry that names no device;
an empty value hides every GPU. A MIG device reports what NVML supports for MIG devices
(memory, processes, GPM through its parent); the rest is None. Without
``CUDA_VISIBLE_DEVICES`` a physical GPU in MIG mode is sampled as a whole (NVML reports no
utilization for it, so that stays None).

Per-process rows match the job's process tree by PID; inside a container whose PID
namespace differs from the host's, NVML reports host PIDs and the rows stay empty.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any, Callable, Mapping, Sequence

from gpuprof.record.backend import BackendUnavailable, GpuInfo, GpuLostError, GpuSample, Poll, ProcessSample

_UINT_MAX = 0xFFFFFFFF
# PCIe throughput is reported in KB/s; NVML's KB is 1024 bytes.
_PCIE_KB_BYTES = 1024.0

# GPM metric ids (nvml.h nvmlGpmMetricId_t) -> (our sample field, factor to its unit).
_GPM_FIELDS: dict[str, tuple[str, float]] = {
    "NVML_GPM_METRIC_SM_UTIL": ("gpm_sm_active_pct", 1.0),
    "NVML_GPM_METRIC_SM_OCCUPANCY": ("gpm_sm_occupancy_pct", 1.0),
    "NVML_GPM_METRIC_ANY_TENSOR_UTIL": ("gpm_tensor_active_pct", 1.0),
    "NVML_GPM_METRIC_DRAM_BW_UTIL": ("gpm_dram_bw_pct", 1.0),
    # PCIe from GPM (MiB/s) where available: nvmlDeviceGetPcieThroughput blocks ~20 ms a call.
    "NVML_GPM_METRIC_PCIE_TX_PER_SEC": ("pcie_tx_bytes_per_s", 1024.0 * 1024.0),
    "NVML_GPM_METRIC_PCIE_RX_PER_SEC": ("pcie_rx_bytes_per_s", 1024.0 * 1024.0),
}


def _load_pynvml() -> ModuleType:
    try:
        import pynvml
    except ImportError as exc:  # the dependency is declared; only a broken install lands here
        raise BackendUnavailable(f"the nvidia-ml-py package is not importable ({exc})") from None
    return pynvml


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class _Device:
    """NVML state for one visible GPU: its handle(s) and what it turned out not to support."""

    def __init__(self, info: GpuInfo, handle: Any, parent: Any | None, gpu_instance_id: int | None) -> None:
        self.info = info
        self.handle = handle
        self.parent = parent  # physical GPU handle for a MIG device
        self.gpu_instance_id = gpu_instance_id
        self.unsupported: set[str] = set()
        self.lost = False
        self.last_process_ts = 0  # NVML timestamp (us) of the last process-utilization sample
        self.gpm_prev: Any | None = None
        self.gpm_next: Any | None = None
        self.gpm_ok = False
        self.gpm_primed = False  # True once gpm_prev holds a sample


class NvmlBackend:
    """:class:`~gpuprof.record.backend.GpuBackend` over NVML.

    ``nvml`` is the ``pynvml`` module, injectable so tests can pass a stub;
    ``visible_devices`` is the ``CUDA_VISIBLE_DEVICES`` value (None = unset = all GPUs).
    Raises :class:`BackendUnavailable` when NVML cannot be initialised.
    """

    def __init__(self, nvml: Any | None = None, visible_devices: str | None = None) -> None:
        self.nvml: Any = nvml if nvml is not None else _load_pynvml()
        try:
            self.nvml.nvmlInit()
        except self.nvml.NVMLError as exc:
            raise BackendUnavailable(f"NVML could not start: {_text(exc)} (no NVIDIA driver?)") from None
        except OSError as exc:
            raise BackendUnavailable(f"NVML library not loadable: {exc}") from None
        self._devices: list[_Device] = []
        try:
            self._open_devices(visible_devices)
        except self.nvml.NVMLError as exc:
            self.close()
            raise BackendUnavailable(f"NVML could not list the GPUs: {_text(exc)}") from None
        except BaseException:
            self.close()
            raise

    # -- the chokepoint ---------------------------------------------------------------
    def _query(self, dev: _Device, metric: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Call ``fn(*args)``; None when unsupported/unreadable; GpuLostError when lost."""
        if metric in dev.unsupported:
            return None
        nv = self.nvml
        try:
            return fn(*args)
        except nv.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code == nv.NVML_ERROR_GPU_IS_LOST:
                dev.lost = True
                raise GpuLostError(f"GPU {dev.info.index} ({dev.info.uuid}) is lost") from None
            if code in (nv.NVML_ERROR_NOT_SUPPORTED, getattr(nv, "NVML_ERROR_FUNCTION_NOT_FOUND", None)):
                dev.unsupported.add(metric)
            return None
        except AttributeError:  # an older nvidia-ml-py without this function
            dev.unsupported.add(metric)
            return None

    # -- enumeration --------------------------------------------------------------------
    def _open_devices(self, visible: str | None) -> None:
        nv = self.nvml
        count = int(nv.nvmlDeviceGetCount())
        physical = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        entries: list[tuple[Any, Any | None]] = []  # (handle, parent handle for MIG)
        if visible is None:
            entries = [(h, None) for h in physical]
        else:
            for raw in visible.split(","):
                item = raw.strip()
                found = self._resolve(item, physical)
                if found is None:
                    break  # CUDA ignores this entry and every one after it
                entries.append(found)
        for index, (handle, parent) in enumerate(entries):
            self._devices.append(self._make_device(index, handle, parent))

    def _resolve(self, item: str, physical: Sequence[Any]) -> tuple[Any, Any | None] | None:
        nv = self.nvml
        if not item:
            return None
        if item.lstrip("-").isdigit():
            i = int(item)
            return (physical[i], None) if 0 <= i < len(physical) else None
        if item.startswith("MIG-"):
            try:
                handle = nv.nvmlDeviceGetHandleByUUID(item)
                parent = nv.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle)
            except (nv.NVMLError, AttributeError):
                return None
            return handle, parent
        if item.startswith("GPU-"):
            matches = [h for h in physical if self._uuid(h).startswith(item)]
            return (matches[0], None) if len(matches) == 1 else None
        return None

    def _uuid(self, handle: Any) -> str:
        try:
            return _text(self.nvml.nvmlDeviceGetUUID(handle))
        except self.nvml.NVMLError:
            return ""

    def _make_device(self, index: int, handle: Any, parent: Any | None) -> _Device:
        nv = self.nvml
        name = "unknown GPU"
        total: int | None = None
        try:
            name = _text(nv.nvmlDeviceGetName(handle))
        except nv.NVMLError:
            pass
        try:
            total = int(nv.nvmlDeviceGetMemoryInfo(handle).total)
        except nv.NVMLError:
            pass
        gi_id: int | None = None
        if parent is not None:
            try:
                gi_id = int(nv.nvmlDeviceGetGpuInstanceId(handle))
            except (nv.NVMLError, AttributeError):
                gi_id = None
        info = GpuInfo(index=index, uuid=self._uuid(handle) or f"gpu{index}", name=name,
                       mem_total_bytes=total, mig=parent is not None)
        dev = _Device(info, handle, parent, gi_id)
        self._init_gpm(dev)
        return dev

    def _init_gpm(self, dev: _Device) -> None:
        """GPM (Hopper+) needs two samples per reading; allocate them once per GPU."""
        nv = self.nvml
        target = dev.parent if dev.parent is not None else dev.handle
        try:
            support = nv.nvmlGpmQueryDeviceSupport(target)
            if not support.isSupportedDevice:
                return
            dev.gpm_prev = nv.nvmlGpmSampleAlloc()
            dev.gpm_next = nv.nvmlGpmSampleAlloc()
            dev.gpm_ok = True
        except (nv.NVMLError, AttributeError):
            dev.gpm_ok = False

    # -- GpuBackend ---------------------------------------------------------------------
    def devices(self) -> Sequence[GpuInfo]:
        return tuple(d.info for d in self._devices)

    def unsupported_metrics(self, gpu: int) -> frozenset[str]:
        """The metrics GPU ``gpu`` answered NotSupported to so far (never asked again)."""
        return frozenset(self._devices[gpu].unsupported)

    def gpm_supported(self, gpu: int) -> bool:
        """Whether GPM metrics (Hopper and later) are read on GPU ``gpu``."""
        return self._devices[gpu].gpm_ok

    def versions(self) -> Mapping[str, str | None]:
        nv = self.nvml
        out: dict[str, str | None] = {"driver": None, "nvml": None}
        for key, fn in (("driver", "nvmlSystemGetDriverVersion"), ("nvml", "nvmlSystemGetNVMLVersion")):
            try:
                out[key] = _text(getattr(nv, fn)())
            except (nv.NVMLError, AttributeError):
                pass
        return out

    def poll(self, gpu: int, pids: frozenset[int]) -> Poll:
        dev = self._devices[gpu]
        if dev.lost:
            raise GpuLostError(f"GPU {gpu} ({dev.info.uuid}) is lost")
        nv, h, q = self.nvml, dev.handle, self._query
        util = q(dev, "util", nv.nvmlDeviceGetUtilizationRates, h)
        mem = q(dev, "mem", nv.nvmlDeviceGetMemoryInfo, h)
        power_mw = q(dev, "power", nv.nvmlDeviceGetPowerUsage, h)
        energy_mj = q(dev, "energy", nv.nvmlDeviceGetTotalEnergyConsumption, h)
        sm = q(dev, "clock_sm", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)
        memclk = q(dev, "clock_mem", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM)
        reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nv, "nvmlDeviceGetCurrentClocksThrottleReasons"
        )
        reasons = q(dev, "reasons", reasons_fn, h)
        temp = q(dev, "temp", nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
        gpm = self._gpm(dev)
        tx = rx = None
        if not dev.gpm_ok:  # the slow PCIe counters only where GPM cannot give them
            kb_tx = q(dev, "pcie_tx", nv.nvmlDeviceGetPcieThroughput, h, nv.NVML_PCIE_UTIL_TX_BYTES)
            kb_rx = q(dev, "pcie_rx", nv.nvmlDeviceGetPcieThroughput, h, nv.NVML_PCIE_UTIL_RX_BYTES)
            tx = None if kb_tx is None else float(kb_tx) * _PCIE_KB_BYTES
            rx = None if kb_rx is None else float(kb_rx) * _PCIE_KB_BYTES
        pcie_tx = gpm.pop("pcie_tx_bytes_per_s", None)
        pcie_rx = gpm.pop("pcie_rx_bytes_per_s", None)
        nvl_tx, nvl_rx = self._nvlink(dev)
        sample = GpuSample(
            gpu=gpu,
            uuid=dev.info.uuid,
            util_gpu_pct=None if util is None else float(util.gpu),
            util_mem_pct=None if util is None else float(util.memory),
            mem_used_bytes=None if mem is None else int(mem.used),
            mem_total_bytes=None if mem is None else int(mem.total),
            power_w=None if power_mw is None else float(power_mw) / 1000.0,
            energy_mj=None if energy_mj is None else float(energy_mj),
            clock_sm_mhz=None if sm is None else float(sm),
            clock_mem_mhz=None if memclk is None else float(memclk),
            clock_event_reasons=None if reasons is None else int(reasons),
            temperature_c=None if temp is None else float(temp),
            pcie_tx_bytes_per_s=tx if pcie_tx is None else pcie_tx,
            pcie_rx_bytes_per_s=rx if pcie_rx is None else pcie_rx,
            nvlink_tx_kib=nvl_tx,
            nvlink_rx_kib=nvl_rx,
            **gpm,
        )
        return Poll(sample, self._processes(dev, pids))

    def _nvlink(self, dev: _Device) -> tuple[float | None, float | None]:
        nv = self.nvml
        ids = [
            (getattr(nv, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", 138), _UINT_MAX),
            (getattr(nv, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", 139), _UINT_MAX),
        ]
        values = self._query(dev, "nvlink", nv.nvmlDeviceGetFieldValues, dev.handle, ids)
        if values is None:
            return None, None
        out: list[float | None] = []
        for v in list(values)[:2]:
            ok = getattr(v, "nvmlReturn", 1) == nv.NVML_SUCCESS
            out.append(float(v.value.ullVal) if ok else None)
        if all(x is None for x in out):
            dev.unsupported.add("nvlink")
        return (out + [None, None])[0], (out + [None, None])[1]

    def _gpm(self, dev: _Device) -> dict[str, float | None]:
        """GPM metrics between the previous poll and this one (None on the first poll)."""
        result: dict[str, float | None] = {f: None for f, _ in _GPM_FIELDS.values()}
        if not dev.gpm_ok:
            return result
        nv = self.nvml
        try:
            if dev.parent is not None and dev.gpu_instance_id is not None:
                nv.nvmlGpmMigSampleGet(dev.parent, dev.gpu_instance_id, dev.gpm_next)
            else:
                nv.nvmlGpmSampleGet(dev.handle, dev.gpm_next)
        except nv.NVMLError as exc:
            if getattr(exc, "value", None) == nv.NVML_ERROR_GPU_IS_LOST:
                dev.lost = True
                raise GpuLostError(f"GPU {dev.info.index} ({dev.info.uuid}) is lost") from None
            dev.gpm_ok = False
            return result
        if dev.gpm_primed:
            req = nv.c_nvmlGpmMetricsGet_t()
            req.version = nv.NVML_GPM_METRICS_GET_VERSION
            req.numMetrics = len(_GPM_FIELDS)
            req.sample1 = dev.gpm_prev
            req.sample2 = dev.gpm_next
            ids = [getattr(nv, name) for name in _GPM_FIELDS]
            for i, mid in enumerate(ids):
                req.metrics[i].metricId = mid
            try:
                nv.nvmlGpmMetricsGet(req)
                for i, (field, factor) in enumerate(_GPM_FIELDS.values()):
                    m = req.metrics[i]
                    if m.nvmlReturn == nv.NVML_SUCCESS:
                        result[field] = float(m.value) * factor
            except nv.NVMLError:
                pass
        dev.gpm_primed = True
        dev.gpm_prev, dev.gpm_next = dev.gpm_next, dev.gpm_prev
        return result

    def _processes(self, dev: _Device, pids: frozenset[int]) -> tuple[ProcessSample, ...]:
        if not pids:
            return ()
        nv = self.nvml
        running = self._query(dev, "procs", nv.nvmlDeviceGetComputeRunningProcesses, dev.handle) or []
        mem: dict[int, int | None] = {}
        for p in running:
            pid = int(p.pid)
            if pid in pids:
                used = getattr(p, "usedGpuMemory", None)
                mem[pid] = None if used is None else int(used)
        util: dict[int, tuple[float, float]] = {}
        samples = self._query(dev, "proc_util", nv.nvmlDeviceGetProcessUtilization, dev.handle, dev.last_process_ts)
        for s in samples or []:
            dev.last_process_ts = max(dev.last_process_ts, int(s.timeStamp))
            pid = int(s.pid)
            if pid in pids:
                util[pid] = (float(s.smUtil), float(s.memUtil))
        out = []
        for pid in sorted(set(mem) | set(util)):
            sm, mu = util.get(pid, (None, None))
            out.append(ProcessSample(gpu=dev.info.index, pid=pid, mem_used_bytes=mem.get(pid),
                                     util_sm_pct=sm, util_mem_pct=mu))
        return tuple(out)

    def close(self) -> None:
        nv = self.nvml
        for dev in self._devices:
            for s in (dev.gpm_prev, dev.gpm_next):
                if s is not None:
                    try:
                        nv.nvmlGpmSampleFree(s)
                    except (nv.NVMLError, AttributeError):
                        pass
            dev.gpm_prev = dev.gpm_next = None
        try:
            nv.nvmlShutdown()
        except nv.NVMLError:
            pass


def open_backend(visible_devices: str | None = None, *, from_env: bool = True) -> NvmlBackend:
    """The NVML backend for this process's visible GPUs (``CUDA_VISIBLE_DEVICES``).

    Raises :class:`BackendUnavailable` with a one-line reason when there is no driver.
    """
    if visible_devices is None and from_env:
        visible_devices = os.environ.get("CUDA_VISIBLE_DEVICES")
    return NvmlBackend(visible_devices=visible_devices)
