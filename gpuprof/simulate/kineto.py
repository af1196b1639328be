"""Streaming writer of new-schema Kineto (PyTorch profiler) JSON traces.

The output has the layout of the traces ``torch.profiler`` writes with CUPTI on a GPU
job: the header keys (``schemaVersion``, ``deviceProperties``, ``distributedInfo``)
come first, then ``traceEvents``, then the trailer keys
(``traceName``, ``displayTimeUnit``, ``baseTimeNanoseconds``). Events are encoded and
written one at a time as the simulator produces them, so a trace of a gigabyte never has
to fit in memory as Python objects.

Times handed to the writer are microseconds on the simulated clock; the writer adds
:data:`CLOCK_ORIGIN_US` so that timestamps look like the large monotonic-clock values of
real traces, and rounds to nanoseconds as Kineto does.
"""

from __future__ import annotations

import gzip
import io
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import msgspec

# Real Kineto timestamps are microseconds on the host's monotonic clock (large numbers);
# a fixed origin keeps the simulated ones in the same range.
CLOCK_ORIGIN_US = 4_458_000_000_000.0
BASE_TIME_NS = 1_711_964_646_000_000_000

# Kineto puts GPU events of device N under pid N; the host process has its own pid.
_ENC = msgspec.json.Encoder()


def _ts(t_us: float) -> float:
    return round(CLOCK_ORIGIN_US + t_us, 3)


def _dur(d_us: float) -> float:
    return round(max(d_us, 0.0), 3)


class TraceWriter(Protocol):
    """What the engine writes a rank's events to: a :class:`KinetoWriter` or a :class:`NullWriter`."""

    enabled: bool
    pid: int
    device: int

    def name_thread(self, pid: int, tid: int, name: str) -> None: ...

    def host_x(
        self, cat: str, name: str, tid: int, start_us: float, end_us: float, args: Mapping[str, Any]
    ) -> None: ...

    def device_x(
        self, cat: str, name: str, stream: int, start_us: float, end_us: float, args: Mapping[str, Any]
    ) -> None: ...

    def flow(self, ph: str, corr: int, pid: int, tid: int, t_us: float) -> None: ...

    def memory(
        self, tid: int, t_us: float, nbytes: int, allocated_bytes: int, reserved_bytes: int
    ) -> None: ...

    def close(self, *, start_us: float, end_us: float, trace_name: str) -> None: ...

    def abort(self) -> None: ...


class NullWriter:
    """Writes nothing: stands in for a rank's trace when only the simulation's timing is
    needed (a what-if re-run, or a layout written from other records). The engine skips
    building events when ``enabled`` is false."""

    enabled = False

    def __init__(self, *, pid: int, device: int) -> None:
        self.pid = pid
        self.device = device

    def name_thread(self, pid: int, tid: int, name: str) -> None:
        pass

    def host_x(
        self, cat: str, name: str, tid: int, start_us: float, end_us: float, args: Mapping[str, Any]
    ) -> None:
        pass

    def device_x(
        self, cat: str, name: str, stream: int, start_us: float, end_us: float, args: Mapping[str, Any]
    ) -> None:
        pass

    def flow(self, ph: str, corr: int, pid: int, tid: int, t_us: float) -> None:
        pass

    def memory(self, tid: int, t_us: float, nbytes: int, allocated_bytes: int, reserved_bytes: int) -> None:
        pass

    def close(self, *, start_us: float, end_us: float, trace_name: str) -> None:
        pass

    def abort(self) -> None:
        pass


class KinetoWriter:
    """Writes one rank's trace to ``path`` (``.json.gz`` or ``.json``).

    The file is written under a temporary name and renamed into place by :meth:`close`,
    so an interrupted simulation never leaves a half-written trace behind.
    """

    def __init__(
        self,
        path: Path,
        *,
        pid: int,
        device: int,
        device_properties: Sequence[Mapping[str, Any]],
        distributed_info: Mapping[str, Any] | None,
        compresslevel: int = 6,
        header: Mapping[str, Any] | None = None,
    ) -> None:
        self.enabled = True
        self.path = path
        self.pid = pid
        self.device = device
        self._tmp = path.with_name(path.name + ".part")
        raw: io.BufferedWriter = open(self._tmp, "wb")  # noqa: SIM115 - closed in close()
        self._raw = raw
        self._out: Any = (
            gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=compresslevel, mtime=0)
            if path.name.endswith(".gz")
            else raw
        )
        self._first = True
        self._threads: dict[tuple[int, int], str] = {}
        head: dict[str, Any] = {"schemaVersion": 1, "deviceProperties": list(device_properties)}
        head.update(header or {})
        if distributed_info is not None:
            head["distributedInfo"] = dict(distributed_info)
        text = _ENC.encode(head)
        self._out.write(text[:-1] + b', "traceEvents": [\n')
        self.events_written = 0

    # -- raw events -------------------------------------------------------------------
    def event(self, ev: Mapping[str, Any]) -> None:
        if not self._first:
            self._out.write(b",\n")
        self._first = False
        self._out.write(_ENC.encode(ev))
        self.events_written += 1

    def name_thread(self, pid: int, tid: int, name: str) -> None:
        self._threads[(pid, tid)] = name

    # -- host side --------------------------------------------------------------------
    def host_x(
        self, cat: str, name: str, tid: int, start_us: float, end_us: float, args: Mapping[str, Any]
    ) -> None:
        self.event(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": self.pid,
                "tid": tid,
                "ts": _ts(start_us),
                "dur": _dur(end_us - start_us),
                "args": args,
            }
        )

    def flow(self, ph: str, corr: int, pid: int, tid: int, t_us: float) -> None:
        ev: dict[str, Any] = {
            "ph": ph,
            "id": corr,
            "pid": pid,
            "tid": tid,
            "ts": _ts(t_us),
            "cat": "ac2g",
            "name": "ac2g",
        }
        if ph == "f":
            ev["bp"] = "e"
        self.event(ev)

    def memory(self, tid: int, t_us: float, nbytes: int, allocated_bytes: int, reserved_bytes: int) -> None:
        """A ``[memory]`` instant event (``profile_memory=True``) for this rank's GPU."""
        self.event(
            {
                "ph": "i",
                "cat": "cpu_instant_event",
                "s": "t",
                "name": "[memory]",
                "pid": self.pid,
                "tid": tid,
                "ts": _ts(t_us),
                "args": {
                    "Total Reserved": reserved_bytes,
                    "Total Allocated": allocated_bytes,
                    "Bytes": nbytes,
                    "Addr": 139_800_000_000_000 + allocated_bytes % 4096 * 512,
                    "Device Id": self.device,
                    "Device Type": 1,
                },
            }
        )

    # -- device side ------------------------------------------------------------------
    def device_x(
        self, cat: str, name: str, stream: int, start_us: float, end_us: float, args: Mapping[str, Any]
    ) -> None:
        self.event(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": self.device,
                "tid": stream,
                "ts": _ts(start_us),
                "dur": _dur(end_us - start_us),
                "args": args,
            }
        )
        self._threads.setdefault((self.device, stream), f"stream {stream} ")

    # -- closing ----------------------------------------------------------------------
    def close(self, *, start_us: float, end_us: float, trace_name: str) -> None:
        """Write metadata events and the trailer keys, then move the file into place."""
        meta_ts = _ts(start_us)

        def meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> None:
            self.event({"name": name, "ph": "M", "ts": meta_ts, "pid": pid, "tid": tid, "args": args})

        for pid, labels in ((self.pid, "CPU"), (self.device, f"GPU {self.device}")):
            meta("process_name", pid, 0, {"name": "python3"})
            meta("process_labels", pid, 0, {"labels": labels})
        for (pid, tid), thread in sorted(self._threads.items()):
            meta("thread_name", pid, tid, {"name": thread})
            meta("thread_sort_index", pid, tid, {"sort_index": tid})
        self.event(
            {
                "ph": "X",
                "cat": "Trace",
                "ts": meta_ts,
                "dur": _dur(end_us - start_us),
                "pid": "Spans",
                "tid": "PyTorch Profiler",
                "name": "PyTorch Profiler (0)",
                "args": {"Op count": 0},
            }
        )
        self.event(
            {
                "name": "Iteration Start: PyTorch Profiler",
                "ph": "i",
                "s": "g",
                "pid": "Traces",
                "tid": "Trace PyTorch Profiler",
                "ts": meta_ts,
            }
        )
        self.event(
            {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": _ts(end_us)}
        )
        tail = {"traceName": trace_name, "displayTimeUnit": "ms", "baseTimeNanoseconds": BASE_TIME_NS}
        self._out.write(b"\n], " + _ENC.encode(tail)[1:])
        if self._out is not self._raw:
            self._out.close()
        self._raw.close()
        os.replace(self._tmp, self.path)

    def abort(self) -> None:
        """Close and delete the partial file (used when the simulation fails)."""
        try:
            if self._out is not self._raw:
                self._out.close()
            self._raw.close()
        finally:
            self._tmp.unlink(missing_ok=True)
