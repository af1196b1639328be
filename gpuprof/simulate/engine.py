"""A discrete-event model of a training job: each rank's host thread and device streams.

Each rank runs a *program*: a generator that calls :class:`RankSim` methods for what the
host does (operators, kernel launches, copies, synchronizations, waiting for data) and
``yield from``s the methods that need other ranks (collectives, point-to-point receives).
:func:`run_job` interleaves the programs; simulated time is kept per rank and is never
coupled to the order in which the scheduler runs them.

The device model is the one CUDA gives:

* a launch issued on the host at ``t`` reaches the device after the launch call plus a
  queue latency; the operation starts at ``max(arrival, stream free, dependencies)``;
* a collective starts transferring on every rank when the last rank's kernel has started,
  so early ranks sit inside the NCCL kernel waiting (what a straggler looks like in a real
  trace); point-to-point data is buffered: a receive ends when the sender's data is there.

Everything the simulator emits goes straight to the rank's :class:`KinetoWriter`. Beside
it, the simulator keeps the *ground truth*: the compute intervals, and for every stretch
of the compute stream without compute the reason it knows for it (see
:mod:`gpuprof.simulate.truth`). Times are microseconds on the simulated clock.
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from gpuprof.errors import GpuprofError
from gpuprof.model.report import Cause
from gpuprof.simulate.kineto import KinetoWriter

COMPUTE_STREAM = 7
COPY_STREAM = 13
NCCL_STREAM = 20
P2P_STREAM = 24

Program = Generator["Wait", None, None]


class SimulationError(GpuprofError):
    """The scenario cannot be simulated (inconsistent knobs or a schedule that deadlocks)."""


@dataclass(frozen=True)
class Wait:
    """Yielded by a program: resume me when ``key`` is resolved by the job."""

    key: tuple[Any, ...]


@dataclass(frozen=True)
class Timing:
    """Host-side costs, microseconds; jittered per call by the rank's random generator."""

    launch_us: float = 5.0  # cudaLaunchKernel call on the host
    queue_us: float = 3.0  # from the end of the launch call to the earliest device start
    op_us: float = 9.0  # framework + Python overhead of one operator around its launches
    jitter: float = 0.03  # relative standard deviation of every duration


@dataclass
class Job:
    """Shared state of all ranks: rendezvous of collectives and point-to-point data."""

    world_size: int
    arrivals: dict[tuple[Any, ...], dict[int, float]] = field(default_factory=dict)
    resolved: dict[tuple[Any, ...], tuple[float, float]] = field(default_factory=dict)
    woken: list[tuple[Any, ...]] = field(default_factory=list)
    # times ranks report for job-level ground truth (e.g. when each stage's pipeline work ended)
    marks: dict[tuple[Any, ...], dict[int, float]] = field(default_factory=dict)

    def post(
        self, key: tuple[Any, ...], rank: int, arrival_us: float, group_size: int, transfer_us: float
    ) -> None:
        got = self.arrivals.setdefault(key, {})
        if rank in got:
            raise SimulationError(f"rank {rank} posted {key} twice")
        got[rank] = arrival_us
        if len(got) == group_size:
            start = max(got.values())
            self.resolved[key] = (start, start + transfer_us)
            del self.arrivals[key]
            self.woken.append(key)

    def post_data(self, key: tuple[Any, ...], ready_us: float) -> None:
        self.resolved[key] = (ready_us, ready_us)
        self.woken.append(key)


class RankSim:
    """One rank: a host thread with its clock ``t`` and device streams, writing a trace."""

    def __init__(
        self, job: Job, rank: int, writer: KinetoWriter, seed: int, timing: Timing = Timing()
    ) -> None:
        self.job = job
        self.rank = rank
        self.w = writer
        self.rng = random.Random(seed * 1_000_003 + rank * 7919 + 17)
        self.timing = timing
        self.tid = writer.pid  # the main thread
        self.t = 0.0
        self.stream_free: dict[int, float] = {}
        self.label = Cause.HOST  # why the host is late with its next compute-stream launch
        self.deps: list[tuple[float, Cause]] = []  # device events the next compute op waits for
        self._ext = 0
        self._corr = 1000 * (rank + 1)
        self._ext_stack: list[int] = []
        self.window: tuple[float, float] | None = None
        self.steps: list[tuple[int, float, float]] = []
        self.compute_s = array("d")
        self.compute_e = array("d")
        self.claims: dict[Cause, tuple[array, array]] = {c: (array("d"), array("d")) for c in Cause}
        self.phase = "main"
        self.phase_compute_us: dict[str, float] = {}
        self.wait_cause = Cause.STRAGGLER  # cause of waiting inside a collective for a late rank
        self.allocated_bytes = 0  # caching allocator state, for [memory] events
        self.reserved_bytes = 0
        writer.name_thread(writer.pid, self.tid, f"thread {self.tid} (pt_main_thread)")

    # -- helpers ----------------------------------------------------------------------
    def mark(self, key: tuple[Any, ...], t_us: float) -> None:
        """Report a time for job-level bookkeeping (read by a plan's ``post``)."""
        self.job.marks.setdefault(key, {})[self.rank] = t_us

    def jit(self, us: float) -> float:
        """``us`` with the configured relative jitter (never below 5 % of it)."""
        return max(us * 0.05, us * (1.0 + self.rng.gauss(0.0, self.timing.jitter)))

    def claim(self, cause: Cause, start_us: float, end_us: float) -> None:
        if end_us > start_us:
            s, e = self.claims[cause]
            s.append(start_us)
            e.append(end_us)

    def _next_ext(self) -> int:
        self._ext += 1
        return self._ext

    def _next_corr(self) -> int:
        self._corr += 1
        return self._corr

    @property
    def ext(self) -> int:
        return self._ext_stack[-1] if self._ext_stack else 0

    def idle(self, us: float) -> None:
        """Host time spent in Python with no profiled operator (interpreter overhead)."""
        self.t += max(us, 0.0)

    # -- host ranges ------------------------------------------------------------------
    @contextmanager
    def op(self, name: str, cat: str = "cpu_op", args: Mapping[str, Any] | None = None) -> Iterator[int]:
        """A framework operator (``cpu_op``) or ``record_function`` range around the body."""
        ext = self._next_ext()
        start = self.t
        self.t += self.jit(1.5)
        self._ext_stack.append(ext)
        try:
            yield ext
        finally:
            self._ext_stack.pop()
            self.t += self.jit(1.0)
            a: dict[str, Any] = {"External id": ext, "Record function id": ext}
            if args:
                a.update(args)
            self.w.host_x(cat, name, self.tid, start, self.t, a)

    @contextmanager
    def step(self, number: int) -> Iterator[None]:
        """``ProfilerStep#N``: the analysis window is the span of these."""
        start = self.t
        if self.window is None:
            self.window = (start, start)
            for s in (COMPUTE_STREAM, COPY_STREAM, NCCL_STREAM, P2P_STREAM):
                self.stream_free[s] = start
        with self.op(f"ProfilerStep#{number}", cat="user_annotation"):
            yield
        self.steps.append((number, start, self.t))
        self.window = (self.window[0], self.t)

    def runtime(self, name: str, cbid: int, dur_us: float) -> tuple[int, float, float]:
        corr = self._next_corr()
        start = self.t
        self.t += dur_us
        self.w.host_x(
            "cuda_runtime",
            name,
            self.tid,
            start,
            self.t,
            {"External id": self.ext, "cbid": cbid, "correlation": corr},
        )
        return corr, start, self.t

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
    ) -> None:
        a: dict[str, Any] = {
            "External id": self.ext,
            "queued": 0,
            "device": self.w.device,
            "context": 1,
            "stream": stream,
            "correlation": corr,
        }
        a.update(args)
        self.w.device_x(cat, name, stream, start, end, a)
        self.w.flow("s", corr, self.w.pid, self.tid, t_launch)
        self.w.flow("f", corr, self.w.device, stream, start)

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
        corr, t0, t1 = self.runtime("cudaLaunchKernel", 211, self.jit(self.timing.launch_us))
        dur = self.jit(dur_us)
        start = self._place(stream, dur, t1 + self.jit(self.timing.queue_us), deps)
        end = start + dur
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
    ) -> tuple[float, float]:
        """``cudaMemcpyAsync``; a copy to or from pageable memory blocks the host until done."""
        host = "Pinned" if pinned else "Pageable"
        names = {
            "HtoD": f"Memcpy HtoD ({host} -> Device)",
            "DtoH": f"Memcpy DtoH (Device -> {host})",
            "DtoD": "Memcpy DtoD (Device -> Device)",
        }
        corr, t0, t1 = self.runtime("cudaMemcpyAsync", 41, self.jit(4.0))
        dur = 1.5 + nbytes / (bw_gbps * 1e3)
        start = self._place(stream, dur, t1 + self.jit(self.timing.queue_us), deps)
        end = start + dur
        self.emit_device(
            "gpu_memcpy",
            names[kind],
            stream,
            start,
            end,
            corr,
            t0,
            {"bytes": nbytes, "memory bandwidth (GB/s)": round(nbytes / max(dur, 1e-3) / 1e3, 4)},
        )
        self.claim(Cause.MEMORY, start, end)
        if not pinned and kind != "DtoD":
            # The driver stages pageable memory through a pinned buffer: the call returns
            # only when the copy is done, and the device then waits for the next launch.
            self.t = max(self.t, end) + self.jit(2.0)
            self.label = Cause.MEMORY
        return start, end

    def memset(self, nbytes: int, stream: int = COMPUTE_STREAM) -> tuple[float, float]:
        corr, t0, t1 = self.runtime("cudaMemsetAsync", 51, self.jit(3.0))
        dur = 1.0 + nbytes / 1.5e6
        start = self._place(stream, dur, t1 + self.jit(self.timing.queue_us))
        end = start + dur
        self.emit_device(
            "gpu_memset",
            "Memset (Device)",
            stream,
            start,
            end,
            corr,
            t0,
            {"bytes": nbytes, "memory bandwidth (GB/s)": round(nbytes / dur / 1e3, 4)},
        )
        self.claim(Cause.MEMORY, start, end)
        return start, end

    # -- host blocking ----------------------------------------------------------------
    def stream_sync(self, stream: int = COMPUTE_STREAM) -> None:
        """``cudaStreamSynchronize``: the host waits for the stream to drain."""
        corr, t0, _ = self.runtime("cudaStreamSynchronize", 131, 0.0)
        self.t = max(self.t, self.stream_free.get(stream, self.t)) + self.jit(3.0)
        self.w.host_x(
            "cuda_runtime",
            "cudaStreamSynchronize",
            self.tid,
            t0,
            self.t,
            {"External id": self.ext, "cbid": 131, "correlation": corr},
        )
        self.label = Cause.SYNC

    def device_sync(self) -> None:
        """``cudaDeviceSynchronize``: the host waits for every stream to drain."""
        corr, t0, _ = self.runtime("cudaDeviceSynchronize", 165, 0.0)
        self.t = max([self.t] + list(self.stream_free.values())) + self.jit(3.0)
        self.w.host_x(
            "cuda_runtime",
            "cudaDeviceSynchronize",
            self.tid,
            t0,
            self.t,
            {"External id": self.ext, "cbid": 165, "correlation": corr},
        )
        self.label = Cause.SYNC

    def item(self) -> None:
        """``tensor.item()``: a 4-byte copy to pageable memory and a stream synchronize."""
        with self.op("aten::item"), self.op("aten::_local_scalar_dense"):
            self.memcpy("DtoH", 4, pinned=False, bw_gbps=1.0)
            self.stream_sync()

    def cuda_free(self, dur_us: float) -> None:
        """``cudaFree``: synchronizes the whole device, then releases memory."""
        corr, t0, _ = self.runtime("cudaFree", 17, 0.0)
        self.t = max([self.t] + list(self.stream_free.values())) + self.jit(dur_us)
        self.w.host_x(
            "cuda_runtime",
            "cudaFree",
            self.tid,
            t0,
            self.t,
            {"External id": self.ext, "cbid": 17, "correlation": corr},
        )
        self.label = Cause.MEMORY

    def cuda_malloc(self, dur_us: float) -> None:
        self.runtime("cudaMalloc", 20, self.jit(dur_us))
        self.label = Cause.MEMORY

    def memory(self, allocated_delta_bytes: int, reserved_delta_bytes: int = 0) -> None:
        """Record a caching-allocator change as a ``[memory]`` event (profile_memory=True)."""
        self.allocated_bytes += allocated_delta_bytes
        self.reserved_bytes = max(self.reserved_bytes + reserved_delta_bytes, self.allocated_bytes)
        self.w.memory(self.tid, self.t, allocated_delta_bytes, self.allocated_bytes, self.reserved_bytes)

    def dataloader_next(self, wait_us: float, multiprocessing: bool = True) -> None:
        """The host waits in the DataLoader iterator for the next batch."""
        kind = "_MultiProcessingDataLoaderIter" if multiprocessing else "_SingleProcessDataLoaderIter"
        with self.op(f"enumerate(DataLoader)#{kind}.__next__", cat="user_annotation"):
            self.idle(self.jit(wait_us))
        if wait_us > 50.0:
            self.label = Cause.DATALOADER

    # -- communication ----------------------------------------------------------------
    def finish(self) -> None:
        """Claim the tail of the window after the last device work (the host's reason)."""
        if self.window is None:
            raise SimulationError(f"rank {self.rank}: the program ran no profiled step")
        free = max(self.stream_free.get(COMPUTE_STREAM, self.window[1]), self.window[0])
        self.claim(self.label, free, self.window[1])


def run_job(sims: Sequence[RankSim], programs: Sequence[Callable[[RankSim], Program]]) -> None:
    """Run one program per rank to completion, resuming ranks as rendezvous resolve."""
    job = sims[0].job
    gens = [p(s) for p, s in zip(programs, sims)]
    blocked: dict[tuple[Any, ...], list[int]] = {}
    ready = list(range(len(gens)))
    done = 0
    while ready:
        r = ready.pop()
        gen = gens[r]
        while True:
            try:
                w = next(gen)
            except StopIteration:
                done += 1
                break
            if w.key in job.resolved:
                continue
            blocked.setdefault(w.key, []).append(r)
            break
        for key in job.woken:
            ready.extend(blocked.pop(key, []))
        job.woken.clear()
    if done != len(gens):
        waiting = sorted(k for k in blocked)[:3]
        raise SimulationError(f"the simulated schedule deadlocks: ranks wait on {waiting}")
    for s in sims:
        s.finish()
