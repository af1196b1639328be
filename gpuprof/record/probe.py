"""What gpuprof's sampler reads on this machine, field by field: ``python -m gpuprof.record.probe``.

Opens the NVML backend ``gpuprof run`` samples through, polls every visible GPU a few
times (GPM metrics are differences between two polls, so the first poll has none), and
prints one JSON document on stdout (or ``-o FILE``)::

    {"probe": "gpuprof.nvml-probe/1", "available": true, "reason": null,
     "versions": {"driver": ..., "nvml": ..., "nvidia-ml-py": ...},
     "polls": 5, "interval_ms": 200,
     "gpus": [{"index": 0, "uuid": ..., "name": ..., "mem_total_bytes": ..., "mig": false,
               "gpm_supported": true, "unsupported_metrics": ["nvlink"],
               "poll_ms": {"first": ..., "median": ..., "max": ...},
               "fields": {"power_w": {"value": 71.3, "status": "measured",
                                      "source": "nvmlDeviceGetPowerUsage (mW)"}, ...}}]}

Per field ``status`` is ``measured`` (the last poll had a value), ``unsupported`` (NVML
answered NotSupported and the sampler stopped asking) or ``no value`` (no answer for
another reason, e.g. GPM where the device lacks it); ``value`` is the last poll's. Without a
usable NVML, ``available`` is false, ``reason`` says why and the exit code is 1. Nothing
here changes a GPU setting. ``benchmarks/gpu_check.py`` puts this beside ``nvidia-smi``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from typing import Any, Protocol

from gpuprof.record.backend import BackendUnavailable, GpuInfo, GpuSample, Poll

PROBE_SCHEMA = "gpuprof.nvml-probe/1"

# GpuSample field -> (the backend's metric key, what it is read from). The metric key is the
# one NvmlBackend.unsupported_metrics() names; "gpm" marks the GPM metrics.
FIELD_SOURCES: dict[str, tuple[str, str]] = {
    "util_gpu_pct": ("util", "nvmlDeviceGetUtilizationRates().gpu"),
    "util_mem_pct": ("util", "nvmlDeviceGetUtilizationRates().memory"),
    "mem_used_bytes": ("mem", "nvmlDeviceGetMemoryInfo().used"),
    "mem_total_bytes": ("mem", "nvmlDeviceGetMemoryInfo().total"),
    "power_w": ("power", "nvmlDeviceGetPowerUsage (mW)"),
    "energy_mj": ("energy", "nvmlDeviceGetTotalEnergyConsumption"),
    "clock_sm_mhz": ("clock_sm", "nvmlDeviceGetClockInfo(NVML_CLOCK_SM)"),
    "clock_mem_mhz": ("clock_mem", "nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)"),
    "clock_event_reasons": ("reasons", "nvmlDeviceGetCurrentClocksEventReasons (bit mask)"),
    "temperature_c": ("temp", "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)"),
    "pcie_tx_bytes_per_s": ("pcie_tx", "GPM PCIE_TX_PER_SEC, else nvmlDeviceGetPcieThroughput(TX)"),
    "pcie_rx_bytes_per_s": ("pcie_rx", "GPM PCIE_RX_PER_SEC, else nvmlDeviceGetPcieThroughput(RX)"),
    "nvlink_tx_kib": ("nvlink", "nvmlDeviceGetFieldValues(NVLINK_THROUGHPUT_DATA_TX)"),
    "nvlink_rx_kib": ("nvlink", "nvmlDeviceGetFieldValues(NVLINK_THROUGHPUT_DATA_RX)"),
    "gpm_sm_active_pct": ("gpm", "GPM SM_UTIL"),
    "gpm_sm_occupancy_pct": ("gpm", "GPM SM_OCCUPANCY"),
    "gpm_tensor_active_pct": ("gpm", "GPM ANY_TENSOR_UTIL"),
    "gpm_dram_bw_pct": ("gpm", "GPM DRAM_BW_UTIL"),
}
_ID_FIELDS = ("gpu", "uuid")


class ProbedBackend(Protocol):
    """What the probe needs: the sampler's backend plus what it learnt about each GPU."""

    def devices(self) -> Sequence[GpuInfo]: ...

    def poll(self, gpu: int, pids: frozenset[int]) -> Poll: ...

    def versions(self) -> Mapping[str, str | None]: ...

    def unsupported_metrics(self, gpu: int) -> frozenset[str]: ...

    def gpm_supported(self, gpu: int) -> bool: ...

    def close(self) -> None: ...


def _field_status(name: str, value: Any, unsupported: frozenset[str]) -> str:
    if value is not None:
        return "measured"
    key = FIELD_SOURCES.get(name, ("", ""))[0]
    return "unsupported" if key in unsupported else "no value"


def probe(backend: ProbedBackend, polls: int = 5, interval_s: float = 0.2,
          sleep: Callable[[float], None] = time.sleep,
          clock: Callable[[], float] = time.perf_counter) -> dict[str, Any]:
    """Poll every GPU of ``backend`` ``polls`` times, ``interval_s`` apart; the probe document."""
    devices = list(backend.devices())
    last: dict[int, GpuSample] = {}
    poll_ms: dict[int, list[float]] = {d.index: [] for d in devices}
    errors: dict[int, str] = {}
    for n in range(max(1, polls)):
        if n:
            sleep(interval_s)
        for d in devices:
            if d.index in errors:
                continue
            t0 = clock()
            try:
                last[d.index] = backend.poll(d.index, frozenset()).sample
            except Exception as exc:  # noqa: BLE001  (GPU lost, or a backend bug: say it, keep the others)
                errors[d.index] = repr(exc)
            poll_ms[d.index].append((clock() - t0) * 1000.0)
    gpus = []
    for d in devices:
        unsupported = backend.unsupported_metrics(d.index)
        sample = last.get(d.index)
        per_field: dict[str, Any] = {}
        for f in fields(GpuSample):
            if f.name in _ID_FIELDS:
                continue
            value = getattr(sample, f.name) if sample is not None else None
            per_field[f.name] = {"value": value, "status": _field_status(f.name, value, unsupported),
                                 "source": FIELD_SOURCES.get(f.name, ("", "?"))[1]}
        times = poll_ms[d.index]
        gpus.append({
            **d.to_meta(),
            "gpm_supported": backend.gpm_supported(d.index),
            "unsupported_metrics": sorted(unsupported),
            "poll_ms": {"first": round(times[0], 3) if times else None,
                        "median": round(statistics.median(times), 3) if times else None,
                        "max": round(max(times), 3) if times else None},
            "error": errors.get(d.index),
            "fields": per_field,
        })
    return {"probe": PROBE_SCHEMA, "available": True, "reason": None, "versions": _versions(backend),
            "polls": max(1, polls), "interval_ms": round(interval_s * 1000.0, 3), "gpus": gpus}


def _versions(backend: ProbedBackend | None) -> dict[str, str | None]:
    from importlib import metadata

    out: dict[str, str | None] = {"driver": None, "nvml": None, "nvidia-ml-py": None}
    if backend is not None:
        out.update(backend.versions())
    try:
        out["nvidia-ml-py"] = metadata.version("nvidia-ml-py")
    except metadata.PackageNotFoundError:
        pass
    return out


def unavailable(reason: str) -> dict[str, Any]:
    """The probe document of a machine without a usable NVML."""
    return {"probe": PROBE_SCHEMA, "available": False, "reason": reason, "versions": _versions(None),
            "polls": 0, "interval_ms": None, "gpus": []}


def main(argv: Sequence[str] | None = None,
         open_backend: Callable[[], ProbedBackend] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpuprof.record.probe",
                                 description="What gpuprof's NVML sampler reads on this machine (JSON).")
    ap.add_argument("--polls", type=int, default=5, help="polls of each GPU (GPM needs two); default 5")
    ap.add_argument("--interval-ms", type=float, default=200.0, help="time between polls; default 200")
    ap.add_argument("-o", "--output", default="-", help="file to write the JSON to; default stdout")
    args = ap.parse_args(argv)
    if args.polls < 1 or args.interval_ms < 0:
        print("gpuprof probe: --polls must be at least 1 and --interval-ms not negative", file=sys.stderr)
        return 2
    if open_backend is None:
        from gpuprof.record.nvml import open_backend as open_nvml

        open_backend = open_nvml
    code = 0
    try:
        backend = open_backend()
    except BackendUnavailable as exc:
        doc, code = unavailable(str(exc)), 1
    else:
        try:
            doc = probe(backend, args.polls, args.interval_ms / 1000.0)
        finally:
            backend.close()
    text = json.dumps(doc, indent=2) + "\n"
    if args.output == "-":
        sys.stdout.write(text)
    else:
        from gpuprof.errors import GpuprofError
        from gpuprof.util.atomic import write_text_atomic

        try:
            write_text_atomic(args.output, text)
        except GpuprofError as exc:
            print(f"gpuprof probe: {exc}", file=sys.stderr)
            return 2
    if not doc["available"]:
        print(f"gpuprof probe: NVML unavailable: {doc['reason']}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
