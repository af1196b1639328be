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

Everything the simulator emits goes straight to the rank's :class:`KinetoWriter` (named
for the rank's :class:`~gpuprof.simulate.platform.Platform`), or nowhere when a
:class:`~gpuprof.simulate.kineto.NullWriter` stands in (a what-if re-run needs only step
times). Beside it, the simulator keeps the *ground truth*: the compute intervals, and for
every stretch of the compute stream without compute the reason it knows for it (see
:mod:`gpuprof.simulate.truth`). Times are microseconds on the simulated clock.

What-if fixes
    A rank runs with a set of fixes (:mod:`gpuprof.simulate.fixes`) that change what the
    host and the transfers cost; ``seen`` collects the fixes that this rank's work gives
    something to remove (a blocking sync, a DataLoader wait, an allocator call, ...).

Random draws
    Every duration is jittered by draws from a stream of its own per (seed, rank, purpose,
    step): ``host`` (operator, launch and Python costs), ``device`` (kernel durations),
    ``data`` (DataLoader waits) and ``alloc`` (allocator calls). A fix that removes a call
    still makes its draw, so that the fixed job differs from the original only by the fix.
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
from gpuprof.simulate.fixes import (
    DOUBLE_BANDWIDTH,
    FREE_HOST,
    FREE_LAUNCHES,
    NO_ALLOCATOR,
    NO_DATALOADER,
    NO_SYNC,
    OVERLAP_COLLECTIVES,
)
from gpuprof.simulate.kineto import TraceWriter
from gpuprof.simulate.platform import CUDA, Platform

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


# A DataLoader wait longer than this starves the device for data (the ground truth's
# dataloader cause); a shorter one is the iterator's own cost, which no_dataloader removes too.
DATA_WAIT_US = 50.0


class RankSim:
    """One rank: a host thread with its clock ``t`` and device streams, writing a trace."""

    def __init__(
        self,
        job: Job,
        rank: int,
        writer: TraceWriter,
        seed: int,
        timing: Timing = Timing(),
        *,
        fixes: frozenset[str] = frozenset(),
        platform: Platform = CUDA,
    ) -> None:
        self.job = job
        self.rank = rank
        self.w = writer
        self.writing = writer.enabled
        self.seed = seed
        self.timing = timing
        self.fixes = frozenset(fixes)
        self.pf = platform
        self.seen: set[str] = set()  # fixes that this rank's work gives something to remove
        self._rngs: dict[str, random.Random] = {}
        self._step_no = 0
        self._cpu_depth = 0  # framework operators (cpu_op) open around the host's work
        self._free_host = FREE_HOST in self.fixes
        self._free_ops = FREE_LAUNCHES in self.fixes or self._free_host
        # Megatron-style timer ops (lane, name, start, end, args), recorded when wanted
        self.timers: list[tuple[str, str, float, float, dict[str, Any]]] | None = None
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

    def jit(self, us: float, purpose: str = "host") -> float:
        """``us`` with the configured relative jitter (never below 5 % of it), drawn from
        this rank's stream for ``purpose`` in the current step."""
        rng = self._rngs.get(purpose)
        if rng is None:
            rng = random.Random(f"{self.seed}/{self.rank}/{purpose}/{self._step_no}")
            self._rngs[purpose] = rng
        return max(us * 0.05, us * (1.0 + rng.gauss(0.0, self.timing.jitter)))

    def timer(self, lane: str, name: str, start_us: float, end_us: float, **args: Any) -> None:
        """A Megatron-style timer op (kept only when the op-level timeline is written)."""
        if self.timers is not None:
            self.timers.append((lane, name, start_us, end_us, args))

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

    def compute_stream_ready(self) -> float:
        """When work enqueued now on another stream behind the compute stream may start:
        after the compute stream's last op and the events it was made to wait for."""
        return max([self.stream_free[COMPUTE_STREAM], *(end for end, _ in self.deps)])

    def idle(self, us: float, *, work: bool = True) -> None:
        """Host time spent in Python or inside an operator with no launch (overhead);
        ``work=False``: the host waits for something else (the DataLoader).

        Under ``free_launches``, time inside a framework operator costs nothing; under
        ``free_host``, all of the host's own work does."""
        if work and us > 0:
            self.seen.add(FREE_HOST)
            if self._free_host:
                return
        if self._free_ops and self._cpu_depth and work:
            return
        self.t += max(us, 0.0)

    # -- host ranges ------------------------------------------------------------------
    @contextmanager
    def op(self, name: str, cat: str = "cpu_op", args: Mapping[str, Any] | None = None) -> Iterator[int]:
        """A framework operator (``cpu_op``) or ``record_function`` range around the body."""
        ext = self._next_ext()
        start = self.t
        framework = cat == "cpu_op"
        free = (framework and self._free_ops) or self._free_host
        self.seen.add(FREE_HOST)
        enter = self.jit(1.5)
        self.t += 0.0 if free else enter
        self._ext_stack.append(ext)
        self._cpu_depth += framework
        try:
            yield ext
        finally:
            self._ext_stack.pop()
            self._cpu_depth -= framework
            leave = self.jit(1.0)
            self.t += 0.0 if free else leave
            if self.writing:
                a: dict[str, Any] = {"External id": ext, "Record function id": ext}
                if args:
                    a.update(args)
                self.w.host_x(cat, name, self.tid, start, self.t, a)

    @contextmanager
    def step(self, number: int) -> Iterator[None]:
        """``ProfilerStep#N``: the analysis window is the span of these."""
        start = self.t
        self._step_no = number
        self._rngs = {}
        if self.window is None:
            self.window = (start, start)
            for s in (COMPUTE_STREAM, COPY_STREAM, NCCL_STREAM, P2P_STREAM):
                self.stream_free[s] = start
        with self.op(f"ProfilerStep#{number}", cat="user_annotation"):
            yield
        self.steps.append((number, start, self.t))
        self.window = (self.window[0], self.t)

    def runtime(
        self,
        name: str,
        cbid: int,
        dur_us: float,
        *,
        launch: bool = False,
        args: Mapping[str, Any] | None = None,
    ) -> tuple[int, float, float]:
        """A CUDA runtime call of ``dur_us`` (given by its CUDA name; written as the
        platform names it). A ``launch`` (kernel, copy, memset, stream-event call) costs
        nothing under ``free_launches``."""
        corr = self._next_corr()
        if launch:
            self.seen.add(FREE_LAUNCHES)
            if self._free_ops:
                dur_us = 0.0
        start = self.t
        self.t += dur_us
        self._runtime_event(name, cbid, corr, start, self.t, args)
        return corr, start, self.t

    def _runtime_event(
        self, name: str, cbid: int, corr: int, start: float, end: float, args: Mapping[str, Any] | None = None
    ) -> None:
        if not self.writing:
            return
        written, id_key, id_value = self.pf.runtime(name, cbid)
        a: dict[str, Any] = {"External id": self.ext, id_key: id_value, "correlation": corr}
        if args and self.pf.rocm:
            a.update(args)  # roctracer puts the kernel's name and shape on its launch
        self.w.host_x("cuda_runtime", written, self.tid, start, end, a)

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
            cost = 0.0 if self._free_ops else cost
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

    # -- host blocking ----------------------------------------------------------------
    def _blocking_call(self, name: str, cbid: int, until_us: float, extra_us: float, label: Cause) -> None:
        """A runtime call that returns ``extra_us`` after ``until_us`` (or after its start)."""
        corr = self._next_corr()
        t0 = self.t
        self.t = max(self.t, until_us) + extra_us
        self._runtime_event(name, cbid, corr, t0, self.t)
        self.label = label

    def stream_sync(self, stream: int = COMPUTE_STREAM) -> None:
        """``cudaStreamSynchronize``: the host waits for the stream to drain (not called
        under ``no_sync``)."""
        self.seen.add(NO_SYNC)
        extra = self.jit(3.0)
        if NO_SYNC not in self.fixes:
            self._blocking_call(
                "cudaStreamSynchronize", 131, self.stream_free.get(stream, self.t), extra, Cause.SYNC
            )

    def device_sync(self) -> None:
        """``cudaDeviceSynchronize``: the host waits for every stream to drain (not called
        under ``no_sync``)."""
        self.seen.add(NO_SYNC)
        extra = self.jit(3.0)
        if NO_SYNC not in self.fixes:
            self._blocking_call(
                "cudaDeviceSynchronize", 165, max([self.t, *self.stream_free.values()]), extra, Cause.SYNC
            )

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

    def cuda_free(self, dur_us: float) -> None:
        """``cudaFree``: synchronizes the whole device, then releases memory (free and
        asynchronous under ``no_allocator``)."""
        self.seen.add(NO_ALLOCATOR)
        extra = self.jit(dur_us, "alloc")
        if NO_ALLOCATOR not in self.fixes:
            self._blocking_call(
                "cudaFree", 17, max([self.t, *self.stream_free.values()]), extra, Cause.MEMORY
            )

    def cuda_malloc(self, dur_us: float) -> None:
        """``cudaMalloc`` (free under ``no_allocator``)."""
        self.seen.add(NO_ALLOCATOR)
        cost = self.jit(dur_us, "alloc")
        if NO_ALLOCATOR not in self.fixes:
            self.runtime("cudaMalloc", 20, cost)
            self.label = Cause.MEMORY

    def memory(self, allocated_delta_bytes: int, reserved_delta_bytes: int = 0) -> None:
        """Record a caching-allocator change as a ``[memory]`` event (profile_memory=True)."""
        self.allocated_bytes += allocated_delta_bytes
        self.reserved_bytes = max(self.reserved_bytes + reserved_delta_bytes, self.allocated_bytes)
        if self.writing:
            self.w.memory(self.tid, self.t, allocated_delta_bytes, self.allocated_bytes, self.reserved_bytes)

    def dataloader_next(self, wait_us: float, multiprocessing: bool = True) -> None:
        """The host waits in the DataLoader iterator for the next batch (no wait under
        ``no_dataloader``)."""
        kind = "_MultiProcessingDataLoaderIter" if multiprocessing else "_SingleProcessDataLoaderIter"
        wait = self.jit(wait_us, "data")
        self.seen.add(NO_DATALOADER)
        if NO_DATALOADER in self.fixes:
            wait = 0.0
        with self.op(f"enumerate(DataLoader)#{kind}.__next__", cat="user_annotation"):
            self.idle(wait, work=False)
        if wait > DATA_WAIT_US:
            self.label = Cause.DATALOADER

    def transfer_us(self, us: float, *, collective: bool) -> float:
        """The transfer time of a collective or point-to-point op under this rank's fixes."""
        self.seen.add(DOUBLE_BANDWIDTH)
        if collective:
            self.seen.add(OVERLAP_COLLECTIVES)
            if OVERLAP_COLLECTIVES in self.fixes:
                return 0.0
        return us / 2.0 if DOUBLE_BANDWIDTH in self.fixes else us

    # -- end of the job --------------------------------------------------------------- ----------------------------------------------------------------
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
