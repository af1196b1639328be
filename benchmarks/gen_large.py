"""Stream large, realistic Kineto traces to disk: one file per rank, sized by bytes.

    python benchmarks/gen_large.py OUT_DIR --ranks 8 --mb-per-rank 64 [--gzip] [--seed 0]

Each rank's file has the layout PyTorch's profiler writes today (the new Kineto schema, as
in ``../shared/traces/a100-2rank-nccl``): ``distributedInfo`` and ``deviceProperties``,
process/thread metadata, and per step a ``ProfilerStep#N`` annotation around

* a data-loader fetch and a host-to-device input copy (``aten::to`` -> ``cudaMemcpyAsync``
  -> ``Memcpy HtoD (Pageable -> Device)``),
* a forward pass of ``--layers`` layers (``aten::linear`` / ``aten::addmm`` GEMMs,
  layer norm, GELU), each op's ``cudaLaunchKernel`` tied to its kernel by ``correlation``
  and an ``ac2g`` flow pair,
* a backward pass on the autograd thread whose gradient buckets are all-reduced by DDP
  (``record_param_comms`` + ``nccl:all_reduce`` + ``ncclKernel_AllReduce_RING_LL_Sum_float``
  on the NCCL stream, with the ``Collective name`` / ``Process Group`` args),
* a ``cudaMemsetAsync`` for the gradient reset, the optimizer's fused kernels, and a
  ``loss.item()`` that synchronizes the host with the device.

Ranks are consistent with each other: an all-reduce ends on every rank at the same time,
when the last rank has joined it, so a slow rank (one designated straggler, and a random
data-loader stall now and then) makes the others wait in communication, as in a real job.
Timings are drawn from a seeded generator, so the same arguments give the same bytes.

The writer streams: memory stays a few MB whatever the size, so 1 GB per rank or 128
ranks can be made on a small machine. Only the standard library is used.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO

MB = 1_000_000
CPU_PID_BASE = 3_100_000
COMPUTE_STREAM = 7
NCCL_STREAM = 20
GPUS_PER_NODE = 8
BASE_TS_US = 4_458_676_388_068.751  # a realistic CLOCK_MONOTONIC-like origin, in us
STEP_GAP_US = 150.0

GEMM = "ampere_sgemm_128x64_tn"
GEMM_BWD = "ampere_sgemm_128x128_nn"
GELU = "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2>)"
LAYER_NORM = "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float, float const*, float const*, float const*, float*, float*, float*)"
LN_BWD = "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel<float, float>(float const*, float const*, float const*, float const*, float const*, float*, int)"
ALLREDUCE = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
ADAM = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)0, false>, float*, double, double, double, double, double, double, bool, float*, float*>(at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)0, false>, float*, double, double, double, double, double, double, bool, float*, float*)"

FWD_KERNEL_ARGS = ', "registers per thread": 128, "shared memory": 16384, "grid": [1024, 1, 1], "block": [256, 1, 1]'
BWD_KERNEL_ARGS = ', "registers per thread": 128, "shared memory": 32768, "grid": [2048, 1, 1], "block": [256, 1, 1]'


@dataclass(frozen=True)
class Shape:
    """The simulated job: what one rank does in one step (times in us)."""

    layers: int = 48
    buckets: int = 8
    gemm_us: float = 180.0
    elementwise_us: float = 25.0
    host_op_us: float = 18.0
    launch_us: float = 6.0
    launch_latency_us: float = 4.0
    allreduce_bytes: int = 25 * 1024 * 1024
    allreduce_us: float = 2400.0
    input_copy_bytes: int = 64 * 1024 * 1024
    input_copy_us: float = 2600.0
    straggler_slowdown: float = 1.12
    stall_probability: float = 0.03
    stall_us: float = 30_000.0


def rank_factor(seed: int, step: int, rank: int, world: int, shape: Shape) -> tuple[float, float]:
    """(speed factor, data-loader delay in us) of ``rank`` in ``step``: shared by all ranks.

    Every rank computes every other rank's factor from the same seeds, so the ranks agree
    on when each all-reduce can finish without ever talking to each other.
    """
    rng = random.Random(f"{seed}:{step}:{rank}")  # str seeds hash with sha512: stable across runs
    f = 1.0 + rng.uniform(-0.02, 0.02)
    if world > 1 and rank == world // 2:
        f *= shape.straggler_slowdown
    delay = shape.stall_us * rng.uniform(0.7, 1.3) if rng.random() < shape.stall_probability else 0.0
    return f, delay


class RankWriter:
    """Writes one rank's events as JSON text, keeping only counters and cursors in memory."""

    def __init__(self, fh: IO[str], rank: int, world: int, seed: int, shape: Shape) -> None:
        self.fh = fh
        self.rank = rank
        self.world = world
        self.seed = seed
        self.shape = shape
        self.device = rank % GPUS_PER_NODE
        self.pid = CPU_PID_BASE + rank
        self.main_tid = self.pid
        self.bwd_tid = self.pid + 9_503
        self.ext = 0
        self.corr = 100_000
        self.first = True
        self.written_bytes = 0
        self.events = 0

    # -- raw output -------------------------------------------------------------------
    def emit(self, text: str) -> None:
        if self.first:
            self.first = False
        else:
            text = ",\n" + text
        self.fh.write(text)
        self.written_bytes += len(text)
        self.events += 1

    def x(
        self, cat: str, name: str, pid: int | str, tid: int | str, ts: float, dur: float, args: str
    ) -> None:
        self.emit(
            f'{{"ph": "X", "cat": "{cat}", "name": {json.dumps(name)}, "pid": {pid}, "tid": {tid}, '
            f'"ts": {ts:.3f}, "dur": {dur:.3f}, "args": {{{args}}}}}'
        )

    def next_ext(self) -> int:
        self.ext += 1
        return self.ext

    def cpu_op(self, name: str, tid: int, ts: float, dur: float, ext: int, extra: str = "") -> None:
        self.x(
            "cpu_op",
            name,
            self.pid,
            tid,
            ts,
            dur,
            f'"External id": {ext}, "Record function id": {ext}{extra}',
        )

    def launch(
        self,
        tid: int,
        ts: float,
        ext: int,
        gpu_cat: str,
        gpu_name: str,
        stream: int,
        start: float,
        dur: float,
        api: str = "cudaLaunchKernel",
        gpu_args: str = "",
    ) -> None:
        """A runtime call on ``tid`` at ``ts`` and the device activity it starts at ``start``."""
        self.corr += 1
        c = self.corr
        self.x(
            "cuda_runtime",
            api,
            self.pid,
            tid,
            ts,
            self.shape.launch_us,
            f'"External id": {ext}, "cbid": 211, "correlation": {c}',
        )
        self.emit(
            f'{{"ph": "s", "id": {c}, "pid": {self.pid}, "tid": {tid}, "ts": {ts:.3f}, "cat": "ac2g", "name": "ac2g"}}'
        )
        common = f'"External id": {ext}, "queued": 0, "device": {self.device}, "context": 1, "stream": {stream}, "correlation": {c}'
        self.x(gpu_cat, gpu_name, self.device, stream, start, dur, common + gpu_args)
        self.emit(
            f'{{"ph": "f", "id": {c}, "pid": {self.device}, "tid": {stream}, "ts": {start:.3f}, '
            f'"cat": "ac2g", "name": "ac2g", "bp": "e"}}'
        )

    def compute_kernel(self, tid: int, ts: float, ext: int, name: str, dur: float, free_at: float, gpu_args: str) -> float:
        """A kernel launched from ``tid`` at ``ts`` onto the compute stream: it starts once the
        stream is free (``free_at``) and the launch has landed; returns when the stream is
        free again."""
        start = max(free_at, ts + self.shape.launch_latency_us)
        self.launch(tid, ts, ext, "kernel", name, COMPUTE_STREAM, start, dur, gpu_args=gpu_args)
        return start + dur

    # -- the file ---------------------------------------------------------------------
    def header(self) -> None:
        ranks = list(range(self.world))
        dist = {
            "backend": "nccl",
            "rank": self.rank,
            "world_size": self.world,
            "pg_count": 1,
            "pg_config": [
                {
                    "pg_name": "0",
                    "pg_desc": "default_pg",
                    "backend_config": "cuda:nccl",
                    "pg_size": self.world,
                    "ranks": ranks,
                }
            ],
            "nccl_version": "2.21.5",
        }
        props = [
            {
                "id": self.device,
                "name": "NVIDIA H100 80GB HBM3",
                "totalGlobalMem": 85_045_231_616,
                "computeMajor": 9,
                "computeMinor": 0,
                "numSms": 132,
                "warpSize": 32,
            }
        ]
        self.fh.write(
            '{\n  "schemaVersion": 1,\n  "deviceProperties": '
            + json.dumps(props)
            + ',\n  "distributedInfo": '
            + json.dumps(dist)
            + ',\n  "record_shapes": 1,\n  "with_stack": 0,\n  "traceEvents": [\n'
        )
        meta = [
            (self.pid, 0, "process_name", '"name": "python3.11"'),
            (self.pid, 0, "process_labels", '"labels": "CPU"'),
            (self.device, 0, "process_name", '"name": "python3.11"'),
            (self.device, 0, "process_labels", f'"labels": "GPU {self.device}"'),
            (self.device, COMPUTE_STREAM, "thread_name", f'"name": "stream {COMPUTE_STREAM} "'),
            (self.device, NCCL_STREAM, "thread_name", f'"name": "stream {NCCL_STREAM} "'),
            (self.pid, self.main_tid, "thread_name", f'"name": "thread {self.main_tid} (pt_main_thread)"'),
            (self.pid, self.bwd_tid, "thread_name", f'"name": "thread {self.bwd_tid} (pt_autograd_0)"'),
        ]
        for pid, tid, name, args in meta:
            self.emit(
                f'{{"name": "{name}", "ph": "M", "ts": {BASE_TS_US:.3f}, "pid": {pid}, "tid": {tid}, "args": {{{args}}}}}'
            )

    def footer(self, start_us: float, end_us: float) -> None:
        self.emit(
            f'{{"ph": "X", "cat": "Trace", "ts": {start_us:.3f}, "dur": {end_us - start_us:.3f}, "pid": "Spans", '
            f'"tid": "PyTorch Profiler", "name": "PyTorch Profiler (0)", "args": {{"Op count": 0}}}}'
        )
        self.fh.write(
            '\n  ],\n  "traceName": "gen_large.py", "displayTimeUnit": "ms", '
            '"baseTimeNanoseconds": 1711964646000000000\n}\n'
        )


def step_plan(seed: int, step: int, world: int, shape: Shape) -> tuple[list[float], list[float]]:
    """Per rank, the speed factor and the data-loader delay of this step."""
    fs: list[float] = []
    ds: list[float] = []
    for r in range(world):
        f, d = rank_factor(seed, step, r, world, shape)
        fs.append(f)
        ds.append(d)
    return fs, ds


def bucket_ready_offsets(shape: Shape) -> tuple[float, list[float]]:
    """Offsets (at speed factor 1, from the step start after the data loader) at which the
    forward pass ends and each gradient bucket becomes ready on the device."""
    fwd = shape.input_copy_us + shape.layers * (shape.gemm_us + 2 * shape.elementwise_us)
    per_layer_bwd = 2 * shape.gemm_us + 2 * shape.elementwise_us
    layers_per_bucket = max(1, shape.layers // shape.buckets)
    ready = [fwd + (b + 1) * layers_per_bucket * per_layer_bwd for b in range(shape.buckets)]
    return fwd, ready


def write_step(w: RankWriter, step: int, t0: float, fs: list[float], ds: list[float]) -> float:
    """Write one step of rank ``w.rank`` starting at ``t0``; returns the common step end."""
    sh = w.shape
    r = w.rank
    f = fs[r]
    rng = random.Random(f"{w.seed}:{step}:{r}:jitter")
    _, ready = bucket_ready_offsets(sh)
    # Every rank can start bucket b's all-reduce at ds[q] + fs[q] * ready[b]; the collective
    # ends for everyone once the last rank joined it and the transfer is done.
    comm_end: list[float] = []
    prev_end = 0.0
    for b in range(sh.buckets):
        last_join = max(ds[q] + fs[q] * ready[b] for q in range(len(fs)))
        start = max(last_join, prev_end)
        prev_end = start + sh.allreduce_us
        comm_end.append(prev_end)

    main, bwd = w.main_tid, w.bwd_tid
    step_ext = w.next_ext()
    host = t0 + 5.0
    # data loader (stalls on some steps) and the input copy
    dl_ext = w.next_ext()
    dl_dur = 400.0 * f + ds[r]
    w.cpu_op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", main, host, dl_dur, dl_ext)
    host += dl_dur + 10.0
    gpu = host  # the device is idle until the first launch
    ext = w.next_ext()
    copy_host = sh.host_op_us * f + sh.launch_us
    w.cpu_op("aten::to", main, host, copy_host + 4.0, ext)
    w.cpu_op("aten::copy_", main, host + 2.0, copy_host, w.next_ext())
    start = max(gpu, host + 4.0 + sh.launch_latency_us)
    dur = sh.input_copy_us * f
    w.launch(
        main,
        host + 4.0,
        ext,
        "gpu_memcpy",
        "Memcpy HtoD (Pageable -> Device)",
        COMPUTE_STREAM,
        start,
        dur,
        api="cudaMemcpyAsync",
        gpu_args=f', "bytes": {sh.input_copy_bytes}, "memory bandwidth (GB/s)": 25.8',
    )
    gpu = start + dur
    host += copy_host + 6.0
    # forward
    fwd_kernels = (
        (("aten::linear", "aten::addmm"), GEMM, sh.gemm_us),
        (("aten::layer_norm", "aten::native_layer_norm"), LAYER_NORM, sh.elementwise_us),
        (("aten::gelu", "aten::gelu"), GELU, sh.elementwise_us),
    )
    for _layer in range(sh.layers):
        for (outer, inner), kname, kus in fwd_kernels:
            ext = w.next_ext()
            hd = sh.host_op_us * f * rng.uniform(0.8, 1.2)
            w.cpu_op(outer, main, host, hd + sh.launch_us + 2.0, ext)
            w.cpu_op(inner, main, host + 1.0, hd + sh.launch_us, w.next_ext())
            dur = kus * f * rng.uniform(0.95, 1.05)
            gpu = w.compute_kernel(main, host + 1.0 + hd, ext, kname, dur, gpu, FWD_KERNEL_ARGS)
            host += hd + sh.launch_us + 4.0
    # backward on the autograd thread; DDP all-reduces each bucket as it becomes ready
    ext = w.next_ext()
    w.cpu_op("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", main, host, 8.0, ext)
    host += 10.0
    layers_per_bucket = max(1, sh.layers // sh.buckets)
    bwd_kernels = (
        ("AddmmBackward0", "aten::mm", GEMM_BWD, sh.gemm_us),
        ("AddmmBackward0", "aten::mm", GEMM_BWD, sh.gemm_us),
        ("NativeLayerNormBackward0", "aten::native_layer_norm_backward", LN_BWD, sh.elementwise_us),
        ("GeluBackward0", "aten::gelu_backward", GELU, sh.elementwise_us),
    )
    nccl_gpu = 0.0
    for layer in range(sh.layers):
        for fn, op, kname, kus in bwd_kernels:
            ext = w.next_ext()
            hd = sh.host_op_us * f * rng.uniform(0.8, 1.2)
            w.cpu_op(
                f"autograd::engine::evaluate_function: {fn}",
                bwd,
                host,
                hd + sh.launch_us + 6.0,
                ext,
                ', "Sequence number": ' + str(layer),
            )
            w.cpu_op(fn, bwd, host + 1.0, hd + sh.launch_us + 4.0, w.next_ext())
            w.cpu_op(op, bwd, host + 2.0, hd + sh.launch_us, w.next_ext())
            dur = kus * f * rng.uniform(0.95, 1.05)
            gpu = w.compute_kernel(bwd, host + 2.0 + hd, ext, kname, dur, gpu, BWD_KERNEL_ARGS)
            host += hd + sh.launch_us + 8.0
        b = (layer + 1) // layers_per_bucket - 1
        if (layer + 1) % layers_per_bucket == 0 and b < sh.buckets:
            ext = w.next_ext()
            nelems = sh.allreduce_bytes // 4
            coll = (
                f', "Collective name": "allreduce", "In msg nelems": {nelems}, "Out msg nelems": {nelems}, '
                f'"Group size": {w.world}, "dtype": "Float", "In split size": "[]", "Out split size": "[]", '
                f'"Process Group Name": "0", "Process Group Description": "default_pg", '
                f'"Process Group Ranks": "{list(range(w.world))}"'
            )
            w.cpu_op(
                "record_param_comms",
                bwd,
                host,
                40.0,
                ext,
                coll.replace(
                    '"Process Group Ranks"',
                    '"Global rank start": 0, "Global rank stride": 1, "Process Group Ranks"',
                ),
            )
            w.x(
                "user_annotation",
                "nccl:all_reduce",
                w.pid,
                bwd,
                host + 2.0,
                36.0,
                f'"External id": {w.next_ext()}',
            )
            ts = host + 20.0
            end = t0 + comm_end[b]
            # the kernel starts when this rank joins (its gradients are ready) and ends with the last rank
            own_join = t0 + ds[r] + f * ready[b]
            start = max(nccl_gpu, ts + sh.launch_latency_us, min(own_join, end - 1.0))
            w.launch(
                bwd,
                ts,
                ext,
                "kernel",
                ALLREDUCE,
                NCCL_STREAM,
                start,
                max(end - start, 1.0),
                api="cudaLaunchKernelExC",
                gpu_args=', "registers per thread": 96, "shared memory": 87568, "grid": [8, 1, 1], "block": [544, 1, 1]'
                + coll,
            )
            nccl_gpu = end
            host += 44.0
    # optimizer: waits for the last all-reduce (DDP's finalize), then a few fused kernels
    ext = w.next_ext()
    w.x(
        "cuda_runtime",
        "cudaStreamWaitEvent",
        w.pid,
        main,
        host,
        3.0,
        f'"External id": {ext}, "cbid": 147, "correlation": 0',
    )
    host = max(host + 4.0, t0 + comm_end[-1] - 200.0)
    gpu = max(gpu, t0 + comm_end[-1])
    opt_ext = w.next_ext()
    opt_start = host
    ext = w.next_ext()
    w.cpu_op("aten::zero_", main, host, sh.host_op_us + sh.launch_us, ext)
    start = max(gpu, host + sh.launch_latency_us)
    w.launch(
        main,
        host + 2.0,
        ext,
        "gpu_memset",
        "Memset (Device)",
        COMPUTE_STREAM,
        start,
        30.0 * f,
        api="cudaMemsetAsync",
        gpu_args=', "bytes": 104857600, "memory bandwidth (GB/s)": 2100.0',
    )
    gpu = start + 30.0 * f
    host += sh.host_op_us + sh.launch_us + 3.0
    for _ in range(4):
        ext = w.next_ext()
        w.cpu_op("aten::_fused_adam_", main, host, sh.host_op_us + sh.launch_us, ext)
        start = max(gpu, host + 2.0 + sh.launch_latency_us)
        dur = 300.0 * f
        w.launch(
            main,
            host + 2.0,
            ext,
            "kernel",
            ADAM,
            COMPUTE_STREAM,
            start,
            dur,
            gpu_args=', "registers per thread": 64, "shared memory": 0, "grid": [320, 1, 1], "block": [512, 1, 1]',
        )
        gpu = start + dur
        host += sh.host_op_us + sh.launch_us + 3.0
    w.cpu_op("Optimizer.step#FusedAdam.step", main, opt_start, host - opt_start, opt_ext)
    # loss.item(): a device-to-host copy and a synchronize that blocks the host
    ext = w.next_ext()
    start = max(gpu, host + 2.0 + sh.launch_latency_us)
    w.launch(
        main,
        host + 2.0,
        ext,
        "gpu_memcpy",
        "Memcpy DtoH (Device -> Pageable)",
        COMPUTE_STREAM,
        start,
        3.0,
        api="cudaMemcpyAsync",
        gpu_args=', "bytes": 4, "memory bandwidth (GB/s)": 0.002',
    )
    gpu = start + 3.0
    sync_dur = max(gpu - (host + 9.0), 1.0)
    w.x(
        "cuda_runtime",
        "cudaStreamSynchronize",
        w.pid,
        main,
        host + 9.0,
        sync_dur,
        f'"External id": {ext}, "cbid": 131, "correlation": {w.corr + 1}',
    )
    w.corr += 1
    w.cpu_op("aten::item", main, host, sync_dur + 12.0, ext)
    host += sync_dur + 14.0
    own_end = max(host, gpu)
    w.x(
        "user_annotation",
        f"ProfilerStep#{step}",
        w.pid,
        main,
        t0,
        own_end - t0,
        f'"External id": {step_ext}, "Record function id": {step_ext}',
    )
    w.x(
        "gpu_user_annotation",
        f"ProfilerStep#{step}",
        w.device,
        COMPUTE_STREAM,
        t0 + 20.0,
        own_end - t0 - 20.0,
        f'"External id": {step_ext}',
    )
    # the next step starts on every rank once the slowest rank's step is over
    opt_tail = 4 * 300.0 + 100.0
    return t0 + comm_end[-1] + max(fs) * opt_tail + STEP_GAP_US


def write_rank(
    path: Path, rank: int, world: int, target_bytes: int, seed: int, shape: Shape, compress: bool
) -> tuple[int, int, int]:
    """Write one rank's trace of about ``target_bytes`` (uncompressed); returns (steps, events, bytes)."""
    tmp = path.with_name(path.name + ".part")
    with (
        gzip.open(tmp, "wt", compresslevel=1, encoding="utf-8")
        if compress
        else open(tmp, "w", encoding="utf-8", buffering=1 << 20)
    ) as fh:
        w = RankWriter(fh, rank, world, seed, shape)
        w.header()
        t = BASE_TS_US + 20_000.0
        start = t
        step = 1
        # stop before the next step would overshoot the target by more than half a step
        per_step = None
        while True:
            before = w.written_bytes
            fs, ds = step_plan(seed, step, world, shape)
            t = write_step(w, step, t, fs, ds)
            per_step = w.written_bytes - before
            step += 1
            if w.written_bytes + per_step / 2 >= target_bytes:
                break
        w.footer(start - 100.0, t)
        size = w.written_bytes
    tmp.replace(path)
    return step - 1, w.events, size


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="folder to write rank<N>.pt.trace.json[.gz] into (created)")
    p.add_argument("--ranks", type=int, default=1)
    p.add_argument(
        "--mb-per-rank",
        type=float,
        default=100.0,
        help="uncompressed size of each rank's file, in MB (1e6 bytes)",
    )
    p.add_argument("--layers", type=int, default=Shape.layers)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gzip", action="store_true", help="write .json.gz (compression level 1)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.ranks < 1 or a.mb_per_rank <= 0:
        print("gen_large.py: --ranks and --mb-per-rank must be positive", file=sys.stderr)
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    shape = Shape(layers=a.layers)
    total = 0
    for r in range(a.ranks):
        name = f"rank{r}.pt.trace.json" + (".gz" if a.gzip else "")
        steps, events, size = write_rank(
            a.out / name, r, a.ranks, int(a.mb_per_rank * MB), a.seed, shape, a.gzip
        )
        total += size
        print(f"{a.out / name}: {steps} steps, {events} events, {size / MB:.1f} MB", file=sys.stderr)
    print(f"{a.ranks} rank(s), {total / MB:.1f} MB of JSON in {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
