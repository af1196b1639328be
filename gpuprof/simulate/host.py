"""One simulated rank's host thread: its clock, framework operators, runtime calls, waits.

:class:`Host` keeps the rank's simulated clock ``t`` and everything the host does that
costs host time: ``ProfilerStep#N`` and framework-operator ranges, CUDA runtime calls,
Python between operators, synchronizations that block until a stream drains, allocator
calls, DataLoader waits. What it issues goes straight to the rank's
:class:`~gpuprof.simulate.kineto.KinetoWriter` (named for the rank's
:class:`~gpuprof.simulate.platform.Platform`), or nowhere when a
:class:`~gpuprof.simulate.kineto.NullWriter` stands in (a what-if re-run needs only step
times). Beside it, it keeps the *ground truth*: the compute intervals, and for every stretch
of the compute stream without compute the reason it knows for it (see
:mod:`gpuprof.simulate.truth`). The device streams themselves, where launched work lands,
are :class:`~gpuprof.simulate.rank.RankSim`'s, which builds on this class. Times are
microseconds on the simulated clock.

What-if fixes
    A rank runs with a set of fixes (:mod:`gpuprof.simulate.fixes`) that change what the
    host and the transfers cost; ``seen`` collects the fixes that this rank's work gives
    something to remove (a blocking sync, a DataLoader wait, an allocator call, ...).

Host speed
    ``host_factor`` (1 by default) multiplies the host's own work, what ``free_host``
    removes: Python between operators, framework operators and launch calls. A program sets
    it for a rank whose host is slower (a busier node, CPU cores shared with DataLoader
    workers); waits, syncs and allocator calls are not the host's work and keep their time.

Random draws
    Every duration is jittered by draws from a stream of its own per (seed, rank, purpose,
    step): ``host`` (operator, launch and Python costs), ``device`` (kernel durations),
    ``data`` (DataLoader waits) and ``alloc`` (allocator calls). A fix that removes a call
    still makes its draw, so that the fixed job differs from the original only by the fix.
    With noise (``Timing.step_cv``, ``run_cv``), every duration of a step is also scaled by
    the step's and the run's factor, each from a stream of its own.
"""

from __future__ import annotations

import math
import random
from array import array
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from gpuprof.model.report import Cause
from gpuprof.simulate.engine import (
    COMPUTE_STREAM,
    COPY_STREAM,
    NCCL_STREAM,
    P2P_STREAM,
    Job,
    SimulationError,
    Timing,
)
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

# A DataLoader wait longer than this starves the device for data (the ground truth's
# dataloader cause); a shorter one is the iterator's own cost, which no_dataloader removes too.
DATA_WAIT_US = 50.0

DEFAULT_TIMING = Timing()


class Host:
    """One rank's host thread with its clock ``t``, writing a trace; the streams' state
    (when each is free, what the next compute op waits for) is kept here too."""

    def __init__(
        self,
        job: Job,
        rank: int,
        writer: TraceWriter,
        seed: int,
        timing: Timing = DEFAULT_TIMING,
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
        self._run_noise = self._noise_factor(timing.run_cv, f"{seed}/run-noise")
        self._noise = self._run_noise
        self._cpu_depth = 0  # framework operators (cpu_op) open around the host's work
        self._free_host = FREE_HOST in self.fixes
        self._free_ops = FREE_LAUNCHES in self.fixes or self._free_host
        # time factor of the host's own work (see "Host speed" above); set by the program
        self.host_factor = 1.0
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
        return max(us * 0.05, us * (1.0 + rng.gauss(0.0, self.timing.jitter))) * self._noise

    @staticmethod
    def _noise_factor(cv: float, stream: str) -> float:
        """exp(N(0, cv)) from its own stream (1.0, drawing nothing, for cv 0)."""
        return math.exp(random.Random(stream).gauss(0.0, cv)) if cv > 0 else 1.0

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
        self.t += max(us, 0.0) * (self.host_factor if work else 1.0)

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
        self.t += 0.0 if free else enter * self.host_factor
        self._ext_stack.append(ext)
        self._cpu_depth += framework
        try:
            yield ext
        finally:
            self._ext_stack.pop()
            self._cpu_depth -= framework
            leave = self.jit(1.0)
            self.t += 0.0 if free else leave * self.host_factor
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
        step_noise = self._noise_factor(self.timing.step_cv, f"{self.seed}/{self.rank}/step-noise/{number}")
        self._noise = self._run_noise * step_noise
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
            dur_us = 0.0 if self._free_ops else dur_us * self.host_factor
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

    # -- end of the job ---------------------------------------------------------------
    def finish(self) -> None:
        """Claim the tail of the window after the last device work (the host's reason)."""
        if self.window is None:
            raise SimulationError(f"rank {self.rank}: the program ran no profiled step")
        free = max(self.stream_free.get(COMPUTE_STREAM, self.window[1]), self.window[0])
        self.claim(self.label, free, self.window[1])


