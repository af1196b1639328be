"""Classification of events by name, in one place.

Every reader calls these functions to fill the ``category`` (and, for copies, the
``copy_kind``/``pageable``) columns of the timeline tables. The rules work on names only
(plus, for a few communication kernels, the name of the host op that launched them), so
they apply to Kineto traces from CUDA and ROCm, old and new schemas, and to op-level
timelines alike.

Classification is done once per *unique* name (see :func:`categories_for_names`), never
per event: a trace of millions of events has a few thousand distinct names.

Communication kernels whose name does not say whether they are collective or
point-to-point (``ncclKernel_SendRecv``, ``ncclDevKernel_SendRecv``, ROCm's
``ncclDevKernel_Generic``) are refined with :func:`refine_comm_category` from the host op
that launched them: a ``SendRecv`` kernel launched under ``c10d::alltoall_base_`` is an
all-to-all (a collective), not a point-to-point transfer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache

from gpuprof.model.timeline import Category, CopyKind, Kind

# --- device kernels -------------------------------------------------------------------

# NCCL / RCCL kernels: ncclKernel_AllReduce_RING_LL_Sum_float, ncclDevKernel_AllGather_RING_LL,
# ncclDevKernel_Generic (ROCm), ncclKernel_SendRecv_..., rccl variants. Matched on the
# lower-cased name with plain substring tests: templated kernel names run to thousands of
# characters, where regular expressions with many alternatives are slow.
_NCCL_KERNEL_MARKS: tuple[str, ...] = ("ncclkernel", "nccldevkernel", "rcclkernel", "rccldevkernel")
_P2P_KERNEL = re.compile(r"(?:SendRecv|_Send_|_Recv_|_Send\b|_Recv\b|Send\(|Recv\()")
# Kernels whose name alone does not tell collective from point-to-point.
_AMBIGUOUS_KERNEL_MARKS: tuple[str, ...] = ("sendrecv", "generic")
# Collectives implemented outside NCCL: PyTorch symmetric memory, vLLM / TRT-LLM custom
# all-reduce kernels.
_OTHER_COLL_KERNEL_MARKS: tuple[str, ...] = (
    "multimem_all_reduce",
    "multimem_all_gather",
    "multimem_reduce_scatter",
    "multimem_one_shot",
    "one_shot_all_reduce",
    "two_shot_all_reduce",
    "symm_mem::",
    "symmetric_memory::",
    "cross_device_reduce",
    "allreduce_fusion",
    "userbuffers_",
    "all_reduce_kernel",
    "all_gather_kernel",
    "reduce_scatter_kernel",
    "alltoall_kernel",
    "all_to_all_kernel",
)


def _is_nccl_kernel(low: str) -> bool:
    return any(m in low for m in _NCCL_KERNEL_MARKS)


# --- host ops and API calls -----------------------------------------------------------

_SYNC_CALLS = frozenset(
    {
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaEventSynchronize",
        "cudaThreadSynchronize",
        "cuStreamSynchronize",
        "cuCtxSynchronize",
        "cuEventSynchronize",
        "hipStreamSynchronize",
        "hipDeviceSynchronize",
        "hipEventSynchronize",
        "hipCtxSynchronize",
        # Blocking copies: the host waits until the copy (and all work before it) is done.
        "cudaMemcpy",
        "cudaMemcpy2D",
        "cudaMemcpy3D",
        "cudaMemcpyToSymbol",
        "cudaMemcpyFromSymbol",
        "cudaMemcpyPeer",
        "cuMemcpy",
        "cuMemcpyDtoH",
        "cuMemcpyHtoD",
        "cuMemcpyDtoD",
        "hipMemcpy",
        "hipMemcpy2D",
        "hipMemcpyWithStream",  # ROCm's synchronous copy used by PyTorch for .item()/.cpu()
        "hipMemcpyDtoH",
        "hipMemcpyHtoD",
        "hipMemcpyDtoD",
        # Framework ops that block on the device.
        "aten::item",
        "aten::_local_scalar_dense",
    }
)
_ALLOC_PREFIXES: tuple[str, ...] = (
    "cudaMalloc",
    "cudaFree",
    "cudaHostAlloc",
    "cudaHostRegister",
    "cudaHostUnregister",
    "cuMemAlloc",
    "cuMemFree",
    "cuMemCreate",
    "cuMemRelease",
    "cuMemMap",
    "cuMemUnmap",
    "cuMemAddressReserve",
    "cuMemAddressFree",
    "cuMemHostAlloc",
    "hipMalloc",
    "hipFree",
    "hipHostMalloc",
    "hipHostFree",
    "hipExtMallocWithFlags",
    "hipMemCreate",
    "hipMemRelease",
    "hipMemMap",
    "hipMemUnmap",
)
_ALLOC_SUBSTRINGS: tuple[str, ...] = ("CachingAllocator", "empty_cache", "emptyCache")
_LAUNCH_PREFIXES: tuple[str, ...] = (
    "cudaLaunch",  # cudaLaunchKernel, cudaLaunchKernelExC, cudaLaunchCooperativeKernel, ...
    "cuLaunch",  # cuLaunchKernel, cuLaunchKernelEx, cuLaunchCooperativeKernel
    "cudaGraphLaunch",
    "cuGraphLaunch",
    "cudaMemcpyAsync",
    "cudaMemcpy2DAsync",
    "cudaMemcpy3DAsync",
    "cudaMemcpyPeerAsync",
    "cudaMemcpyToSymbolAsync",
    "cudaMemcpyFromSymbolAsync",
    "cudaMemsetAsync",
    "cudaMemset2DAsync",
    "cuMemcpyAsync",
    "cuMemcpyHtoDAsync",
    "cuMemcpyDtoHAsync",
    "cuMemcpyDtoDAsync",
    "cuMemsetD8Async",
    "cuMemsetD32Async",
    "hipLaunch",  # hipLaunchKernel, hipLaunchCooperativeKernel
    "hipExtLaunch",
    "hipModuleLaunch",
    "hipExtModuleLaunch",
    "hipGraphLaunch",
    "hipMemcpyAsync",
    "hipMemcpy2DAsync",
    "hipMemcpyPeerAsync",
    "hipMemsetAsync",
    "hipMemsetD8Async",
    "hipMemsetD32Async",
)
_STEP = re.compile(r"^ProfilerStep#\d+$")
STEP_NUMBER = re.compile(r"^ProfilerStep#(\d+)$")
# Other host ranges that bracket one training step, in order of precedence (see
# gpuprof.readers.stepmarkers): a ``## train_step ##`` label, Lightning's
# ``run_training_batch``, HF Trainer's / Lightning's ``training_step`` and a user's
# ``train_step`` (as annotations or Python frames ``file.py(82): train_step``).
STEP_RANGE_MARKERS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("## train_step ##", re.compile(r"^##\s*train(?:ing)?[ _]step\s*##$", re.IGNORECASE)),
    ("run_training_batch", re.compile(r"(?:^|[.\]\s])run_training_batch$")),
    ("training_step", re.compile(r"(?:^|[.\]\s])train(?:ing)?_step$")),
)


def is_step_marker(name: str) -> bool:
    """True for ``ProfilerStep#N`` and the other host ranges that bracket a training step."""
    return bool(_STEP.match(name)) or any(p.search(name) for _, p in STEP_RANGE_MARKERS)


# Host-side communication: nccl:all_reduce, c10d::allreduce_, record_param_comms,
# vllm::all_reduce, gloo:all_reduce, symm_mem ops.
_HOST_COMM_PREFIXES: tuple[str, ...] = (
    "nccl:",
    "c10d::",
    "gloo:",
    "rccl:",
    "c10d_functional::",
    "_c10d_functional::",
    "symm_mem::",
    "vllm::all_reduce",
    "vllm::all_gather",
    "vllm::reduce_scatter",
    "record_param_comms",
)
# Point-to-point host ops and collective names (as in ``Collective name`` args).
_P2P_WORDS = re.compile(
    r"(?:^|[:_.])(?:send|recv|isend|irecv|batch_isend_irecv|sendrecv)(?:_|$)", re.IGNORECASE
)
# Names that make a host op (or profiler collective name) a collective.
_COLLECTIVE_WORDS = re.compile(
    r"all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|broadcast|barrier|"
    r"(?:^|[:_])reduce(?:_|$)|(?:^|[:_])gather(?:_|$)|(?:^|[:_])scatter(?:_|$)",
    re.IGNORECASE,
)

# --- op-level timelines (framework timers, e.g. Megatron) -----------------------------

_TIMER_P2P = re.compile(r"(?:^|-)(?:send|recv)(?:-|$)")
# Megatron's "optimizer-clip-main-grad" ends in the all-reduce of the gradient norm over the
# data-parallel (and model-parallel) group, and waits in it for the slowest member;
# "all-grads-sync" is its data-parallel gradient all-reduce without the distributed optimizer.
_TIMER_COLL = re.compile(
    r"all-reduce|all-gather|reduce-scatter|all-to-all|allreduce|allgather|broadcast|clip-main-grad|grads-sync"
)
_TIMER_COMPUTE = re.compile(r"(?:^|-)(?:compute|optimizer|forward|backward)(?:-|$)|^optimizer")
_TIMER_DATA = re.compile(r"batch-generator|data-?load|get-batch")

# --- copies --------------------------------------------------------------------------

_COPY_DIRECTIONS: Mapping[str, CopyKind] = {
    "HtoD": CopyKind.HTOD,
    "DtoH": CopyKind.DTOH,
    "DtoD": CopyKind.DTOD,
    "HtoH": CopyKind.HTOH,
    "PtoP": CopyKind.PTOP,
}
_COPY_NAME = re.compile(r"Memcpy\s+(\w+)(?:\s*\(([^)]*)\))?")


def classify_kernel(name: str) -> Category:
    """Category of a GPU kernel from its name alone (COLLECTIVE, P2P or COMPUTE)."""
    low = name.lower()
    if _is_nccl_kernel(low):
        if _P2P_KERNEL.search(name):
            return Category.P2P
        return Category.COLLECTIVE
    if any(m in low for m in _OTHER_COLL_KERNEL_MARKS):
        return Category.COLLECTIVE
    return Category.COMPUTE


def is_ambiguous_comm_kernel(name: str) -> bool:
    """True for NCCL/RCCL kernels whose name does not say collective vs point-to-point.

    Their category must be refined from the launching host op with
    :func:`refine_comm_category`.
    """
    low = name.lower()
    return _is_nccl_kernel(low) and any(m in low for m in _AMBIGUOUS_KERNEL_MARKS)


def comm_kind_of_context(context: Iterable[str]) -> Category | None:
    """COLLECTIVE / P2P as told by host op names or collective names around a launch.

    ``context`` is the names of the enclosing host ops (innermost first) and/or the
    profiler's ``Collective name``; the innermost name that says anything decides.
    Returns ``None`` when no name tells.
    """
    for ctx in context:
        # Only communication ops and bare collective names count: ``aten::scatter_`` or
        # an autograd node that happens to contain "gather" says nothing about NCCL.
        if not ctx or (":" in ctx and not ctx.startswith(_HOST_COMM_PREFIXES)):
            continue
        if _P2P_WORDS.search(ctx):
            return Category.P2P
        if _COLLECTIVE_WORDS.search(ctx):
            return Category.COLLECTIVE
    return None


def refine_comm_category(name: str, base: Category, context: Sequence[str]) -> Category:
    """Category of a communication kernel given its launch context.

    Only kernels whose name is ambiguous (``SendRecv``, ``Generic``) change: a SendRecv
    kernel under ``c10d::alltoall_base_`` / ``nccl:all_to_all`` is COLLECTIVE; a Generic
    kernel under ``nccl:send`` is P2P.
    """
    if base not in (Category.COLLECTIVE, Category.P2P) or not is_ambiguous_comm_kernel(name):
        return base
    told = comm_kind_of_context(context)
    return base if told is None else told


def classify_host(kind: Kind, name: str) -> Category:
    """Category of a host event (framework op, runtime/driver call, annotation, frame)."""
    if is_step_marker(name):
        return Category.STEP
    if name in _SYNC_CALLS:
        return Category.SYNC
    if name.startswith(_ALLOC_PREFIXES) or any(s in name for s in _ALLOC_SUBSTRINGS):
        return Category.ALLOC
    if kind in (Kind.RUNTIME, Kind.DRIVER) and name.startswith(_LAUNCH_PREFIXES):
        return Category.LAUNCH
    if name.startswith("enumerate(DataLoader)") or (
        "torch/utils/data/dataloader.py" in name and "__next__" in name
    ):
        return Category.DATALOAD
    if name.startswith(_HOST_COMM_PREFIXES):
        if name.startswith("record_param_comms"):
            return Category.COLLECTIVE  # refined per event from its ``Collective name``
        return Category.P2P if _P2P_WORDS.search(name) else Category.COLLECTIVE
    return Category.OTHER


def classify_timer(name: str) -> Category:
    """Category of an op of an op-level timeline (framework timers, e.g. Megatron)."""
    low = name.lower()
    if _TIMER_COLL.search(low):
        return Category.COLLECTIVE
    if _TIMER_P2P.search(low):
        return Category.P2P
    if _TIMER_DATA.search(low):
        return Category.DATALOAD
    if _TIMER_COMPUTE.search(low):
        return Category.COMPUTE
    return Category.OTHER


@lru_cache(maxsize=65536)
def classify(kind: Kind, name: str) -> Category:
    """Category of an event of any kind from its name (no launch context)."""
    if kind == Kind.KERNEL:
        return classify_kernel(name)
    if kind == Kind.MEMCPY:
        return Category.COPY
    if kind == Kind.MEMSET:
        return Category.MEMSET
    if kind == Kind.GPU_ANNOTATION:
        return Category.STEP if _STEP.match(name) else Category.OTHER
    if kind == Kind.TIMER:
        return classify_timer(name)
    return classify_host(kind, name)


def categories_for_names(kind: Kind, names: Sequence[str]) -> list[int]:
    """Category codes for each of ``names`` (use over a categorical's categories)."""
    return [int(classify(kind, n)) for n in names]


def collective_category(coll_name: str) -> Category | None:
    """COLLECTIVE or P2P for a profiler ``Collective name`` (``allreduce``, ``send``...)."""
    if not coll_name:
        return None
    return comm_kind_of_context((coll_name,))


@lru_cache(maxsize=4096)
def parse_copy(name: str) -> tuple[CopyKind, bool]:
    """Direction and pageable flag of a copy from its name.

    ``Memcpy HtoD (Pageable -> Device)`` -> (HTOD, True);
    ``Memcpy DtoH (Device -> Pinned)`` -> (DTOH, False);
    ``Memcpy PtoP`` -> (PTOP, False). Unrecognized copies are (UNKNOWN, False).
    """
    m = _COPY_NAME.search(name)
    if m is None:
        return CopyKind.UNKNOWN, False
    kind = _COPY_DIRECTIONS.get(m.group(1), CopyKind.UNKNOWN)
    endpoints = m.group(2) or ""
    return kind, "Pageable" in endpoints
