"""One simulated rank: its host thread and its device streams, as CUDA runs them.

:class:`RankSim` is the rank a scenario's program drives: the host thread of
:class:`~gpuprof.simulate.host.Host` plus the device model, which is the one CUDA gives:

* a launch issued on the host at ``t`` reaches the device after the launch call plus a
  queue latency; the operation starts at ``max(arrival, stream free, dependencies)``, and
  the gap before it on the compute stream is claimed for the reason the host was late (or
  the dependency it waited for);
* kernels, copies and memsets are written as device events with their flow from the
  launch; copies to or from pageable memory, and ``.item()``, block the host until done.

Collectives and point-to-point transfers, which need other ranks, are
:mod:`gpuprof.simulate.comm`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuprof.model.report import Cause
from gpuprof.simulate.engine import COMPUTE_STREAM
from gpuprof.simulate.fixes import FREE_LAUNCHES, NO_SYNC
from gpuprof.simulate.host import Host


class RankSim(Host):
    """One rank: a host thread with its clock ``t`` and device streams, writing a trace."""

    def compute_stream_ready(self) -> float:
        """When work enqueued now on another stream behind the compute stream may start:
        after the compute stream's last op and the events it was made to wait for."""
        return max([self.stream_free[COMPUTE_STREAM], *(end for end, _ in self.deps)])

    # -- device placement -------------------------------------------------------------
    def _place(
        self, stream: int, dur_us: float, arrival_us: float, extra_deps: Sequence[tuple[float, Cause]] = ()
    ) -> float:
        """Start time of an op of ``dur_us`` on ``stream``; claims the gap before it."""
        free = self.stream_free.get(stream, arrival_us)
        start = max(arrival_us, free)
        cause = self.label
        deps = list(extra_deps)
        if stream == COMPUTE_STREAM:
            deps += self.deps
            self.deps = []
        for dep_end, dep_cause in deps:
            if dep_end > start:
                start, cause = dep_end, dep_cause
        if stream == COMPUTE_STREAM:
            self.claim(cause, free, start)
            self.label = Cause.HOST
        self.stream_free[stream] = start + dur_us
        return start

    def emit_device(
        self,
        cat: str,
        name: str,
        stream: int,
        start: float,
        end: float,
        corr: int,
        t_launch: float,
        args: Mapping[str, Any],
        rocm_kind: str = "Dispatch Kernel",
    ) -> None:
        """Write a device op (``name`` as CUDA calls it) with its flow from the launch."""
        if not self.writing:
            return
        sid = self.pf.stream(stream)
        a: dict[str, Any]
        if self.pf.rocm:
            name = self.pf.kernel(name) if cat == "kernel" else name
            a = {"device": self.w.device, "stream": sid, "correlation": corr, "kind": rocm_kind}
        else:
            a = {
                "External id": self.ext,
                "queued": 0,
                "device": self.w.device,
                "context": 1,
                "stream": sid,
                "correlation": corr,
            }
            a.update(args)
        self.w.device_x(cat, name, sid, start, end, a)
        self.w.flow("s", corr, self.w.pid, self.tid, t_launch)
        self.w.flow("f", corr, self.w.device, sid, start)

    def kernel(
        self,
        name: str,
        dur_us: float,
        *,
        stream: int = COMPUTE_STREAM,
        compute: bool = True,
        deps: Sequence[tuple[float, Cause]] = (),
        grid: int = 1024,
    ) -> tuple[float, float]:
        """Launch a kernel; returns its device ``(start_us, end_us)``."""
        launch_args = (
            {"kernel": self.pf.kernel(name), "grid": [grid, 1, 1], "block": [256, 1, 1], "shared memory": 0}
            if self.writing and self.pf.rocm
            else None
        )
        corr, t0, t1 = self.runtime(
            "cudaLaunchKernel", 211, self.jit(self.timing.launch_us), launch=True, args=launch_args
        )
        dur = self.jit(dur_us, "device")
        start = self._place(stream, dur, t1 + self.jit(self.timing.queue_us), deps)
        end = start + dur
        if self.writing:
            self.emit_device(
                "kernel",
                name,
                stream,
                start,
                end,
                corr,
                t0,
                {
                    "registers per thread": 64,
                    "shared memory": 16384,
                    "blocks per SM": round(grid / 132, 6),
                    "warps per SM": round(grid * 4 / 132, 6),
                    "grid": [grid, 1, 1],
                    "block": [128, 1, 1],
                    "est. achieved occupancy %": 50 if grid >= 132 else 3,
                },
            )
        if compute:
            self.compute_s.append(start)
            self.compute_e.append(end)
            self.phase_compute_us[self.phase] = self.phase_compute_us.get(self.phase, 0.0) + dur
        else:
            self.claim(Cause.MEMORY, start, end)
        return start, end

    def aten(
        self, name: str, kernel: str, dur_us: float, *, op_us: float | None = None, grid: int = 1024
    ) -> tuple[float, float]:
        """One framework operator that launches one compute kernel."""
        with self.op(name):
            self.idle(self.jit(self.timing.op_us if op_us is None else op_us))
            return self.kernel(kernel, dur_us, grid=grid)

    def memcpy(
        self,
        kind: str,
        nbytes: int,
        *,
        pinned: bool,
        bw_gbps: float,
        stream: int = COMPUTE_STREAM,
        deps: Sequence[tuple[float, Cause]] = (),
        sync_call: bool = False,
    ) -> tuple[float, float]:
        """``cudaMemcpyAsync``; a copy to or from pageable memory blocks the host until done.

        ``sync_call``: a synchronous copy call (ROCm's ``hipMemcpyWithStream`` behind
        ``.item()``), which blocks too. Under ``no_sync`` neither blocks (the host memory
        is pinned and the call asynchronous); the copy itself takes as long."""
        blocking = sync_call or (not pinned and kind != "DtoD")
        if blocking:
            self.seen.add(NO_SYNC)
            if NO_SYNC in self.fixes:
                blocking, pinned, sync_call = False, True, False
        name = "cudaMemcpyWithStream" if sync_call else "cudaMemcpyAsync"
        corr = self._next_corr()
        t0 = self.t
        cost = self.jit(4.0)
        if not sync_call:  # an asynchronous copy is launched like a kernel
            self.seen.add(FREE_LAUNCHES)
            cost = 0.0 if self._free_ops else cost * self.host_factor
        t1 = self.t = t0 + cost
        dur = 1.5 + nbytes / (bw_gbps * 1e3)
        start = self._place(stream, dur, t1 + self.jit(self.timing.queue_us), deps)
        end = start + dur
        if self.writing:
            self.emit_device(
                "gpu_memcpy",
                self.pf.memcpy_name(kind, pinned),
                stream,
                start,
                end,
                corr,
                t0,
                {"bytes": nbytes, "memory bandwidth (GB/s)": round(nbytes / max(dur, 1e-3) / 1e3, 4)},
                rocm_kind=kind,
            )
        self.claim(Cause.MEMORY, start, end)
        tail = self.jit(2.0)
        if blocking:
            # The driver stages pageable memory through a pinned buffer: the call returns
            # only when the copy is done, and the device then waits for the next launch.
            self.t = max(t1, end) + tail
            self.label = Cause.MEMORY
        self._runtime_event(name, 41, corr, t0, self.t)
        return start, end

    def memset(self, nbytes: int, stream: int = COMPUTE_STREAM) -> tuple[float, float]:
        corr, t0, t1 = self.runtime("cudaMemsetAsync", 51, self.jit(3.0), launch=True)
        dur = 1.0 + nbytes / 1.5e6
        start = self._place(stream, dur, t1 + self.jit(self.timing.queue_us))
        end = start + dur
        if self.writing:
            self.emit_device(
                "gpu_memset",
                "Memset (Device)",
                stream,
                start,
                end,
                corr,
                t0,
                {"bytes": nbytes, "memory bandwidth (GB/s)": round(nbytes / dur / 1e3, 4)},
                rocm_kind="Device",
            )
        self.claim(Cause.MEMORY, start, end)
        return start, end

    def item(self) -> None:
        """``tensor.item()``: a 4-byte copy to pageable memory and a stream synchronize
        (on ROCm one synchronous ``hipMemcpyWithStream``)."""
        with self.op("aten::item"), self.op("aten::_local_scalar_dense"):
            if self.pf.rocm:
                self.memcpy("DtoH", 4, pinned=False, bw_gbps=1.0, sync_call=True)
                self.jit(3.0)  # the CUDA path's synchronize draw, so both platforms draw alike
            else:
                self.memcpy("DtoH", 4, pinned=False, bw_gbps=1.0)
                self.stream_sync()

