"""Classification by name: each rule on names whose category is known by construction."""

from __future__ import annotations

import pytest

from gpuprof.model.classify import (
    categories_for_names,
    classify,
    classify_host,
    classify_kernel,
    classify_timer,
    collective_category,
    comm_kind_of_context,
    is_ambiguous_comm_kernel,
    parse_copy,
    refine_comm_category,
)
from gpuprof.model.timeline import Category, CopyKind, Kind

C = Category


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", C.COLLECTIVE),
        ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", C.COLLECTIVE),
        ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", C.COLLECTIVE),
        ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", C.COLLECTIVE),  # ROCm RCCL
        ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", C.P2P),
        ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", C.P2P),
        (
            "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*)",
            C.COLLECTIVE,
        ),
        ("void c10d::symmetric_memory::two_shot_all_reduce_kernel<float, 8>(float*)", C.COLLECTIVE),
        ("one_shot_all_reduce_kernel", C.COLLECTIVE),
        ("symm_mem::multimem_all_gather", C.COLLECTIVE),
        ("void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 32, true, 1>(float)", C.COMPUTE),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>", C.COMPUTE),
        ("ampere_sgemm_128x64_tn", C.COMPUTE),
    ],
)
def test_kernels(name: str, expected: Category) -> None:
    assert classify_kernel(name) == expected
    assert classify(Kind.KERNEL, name) == expected


def test_ambiguous_kernels_are_only_sendrecv_and_generic() -> None:
    assert is_ambiguous_comm_kernel("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t")
    assert is_ambiguous_comm_kernel("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)")
    assert not is_ambiguous_comm_kernel("ncclKernel_AllReduce_RING_LL_Sum_float")
    assert not is_ambiguous_comm_kernel("void gemm_SendRecv_lookalike_kernel")  # not NCCL


def test_sendrecv_under_alltoall_is_collective_and_under_send_is_p2p() -> None:
    k = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"
    dlrm_ctx = ["record_param_comms", "nccl:all_to_all", "c10d::alltoall_base_", "ProfilerStep#10"]
    assert refine_comm_category(k, C.P2P, dlrm_ctx) == C.COLLECTIVE
    assert refine_comm_category(k, C.P2P, ["nccl:send", "c10d::send"]) == C.P2P
    assert refine_comm_category(k, C.P2P, ["c10d::recv_"]) == C.P2P
    assert refine_comm_category(k, C.P2P, []) == C.P2P  # no context: the name decides
    # A plain aten op that happens to contain a collective word says nothing.
    assert refine_comm_category(k, C.P2P, ["aten::scatter_", "aten::gather"]) == C.P2P
    # The innermost telling name wins.
    assert comm_kind_of_context(["nccl:recv", "c10d::alltoall_base_"]) == C.P2P


def test_generic_rocm_kernel_follows_its_host_op() -> None:
    g = "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)"
    assert refine_comm_category(g, C.COLLECTIVE, ["allreduce", "record_param_comms"]) == C.COLLECTIVE
    assert refine_comm_category(g, C.COLLECTIVE, ["send", "record_param_comms"]) == C.P2P


def test_named_collective_kernels_ignore_context() -> None:
    k = "ncclKernel_AllReduce_RING_LL_Sum_float"
    assert refine_comm_category(k, C.COLLECTIVE, ["nccl:send"]) == C.COLLECTIVE
    assert refine_comm_category("some_gemm", C.COMPUTE, ["nccl:all_to_all"]) == C.COMPUTE


@pytest.mark.parametrize(
    ("kind", "name", "expected"),
    [
        (Kind.ANNOTATION, "ProfilerStep#12", C.STEP),
        (Kind.OP, "ProfilerStep#5", C.STEP),
        (Kind.RUNTIME, "cudaStreamSynchronize", C.SYNC),
        (Kind.RUNTIME, "cudaDeviceSynchronize", C.SYNC),
        (Kind.RUNTIME, "cudaEventSynchronize", C.SYNC),
        (Kind.RUNTIME, "hipStreamSynchronize", C.SYNC),
        (Kind.RUNTIME, "hipDeviceSynchronize", C.SYNC),
        (Kind.RUNTIME, "cudaMemcpy", C.SYNC),
        (Kind.RUNTIME, "hipMemcpyWithStream", C.SYNC),
        (Kind.OP, "aten::item", C.SYNC),
        (Kind.OP, "aten::_local_scalar_dense", C.SYNC),
        (Kind.RUNTIME, "cudaMalloc", C.ALLOC),
        (Kind.RUNTIME, "cudaMallocAsync", C.ALLOC),
        (Kind.RUNTIME, "cudaFree", C.ALLOC),
        (Kind.RUNTIME, "cudaHostAlloc", C.ALLOC),
        (Kind.RUNTIME, "hipMalloc", C.ALLOC),
        (Kind.RUNTIME, "hipFree", C.ALLOC),
        (Kind.PYTHON, "torch/cuda/memory.py(192): empty_cache", C.ALLOC),
        (Kind.ANNOTATION, "CachingAllocator::emptyCache", C.ALLOC),
        (Kind.OP, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", C.DATALOAD),
        (Kind.OP, "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", C.DATALOAD),
        (Kind.RUNTIME, "cudaLaunchKernel", C.LAUNCH),
        (Kind.RUNTIME, "cudaLaunchKernelExC", C.LAUNCH),
        (Kind.DRIVER, "cuLaunchKernel", C.LAUNCH),
        (Kind.DRIVER, "cuLaunchKernelEx", C.LAUNCH),
        (Kind.RUNTIME, "hipLaunchKernel", C.LAUNCH),
        (Kind.RUNTIME, "hipExtModuleLaunchKernel", C.LAUNCH),
        (Kind.RUNTIME, "hipExtLaunchKernel", C.LAUNCH),
        (Kind.RUNTIME, "cudaMemcpyAsync", C.LAUNCH),
        (Kind.RUNTIME, "cudaMemsetAsync", C.LAUNCH),
        (Kind.RUNTIME, "hipMemcpyAsync", C.LAUNCH),
        (Kind.OP, "nccl:all_reduce", C.COLLECTIVE),
        (Kind.OP, "nccl:all_to_all", C.COLLECTIVE),
        (Kind.OP, "c10d::allreduce_", C.COLLECTIVE),
        (Kind.OP, "c10d::alltoall_base_", C.COLLECTIVE),
        (Kind.OP, "record_param_comms", C.COLLECTIVE),
        (Kind.OP, "vllm::all_reduce", C.COLLECTIVE),
        (Kind.OP, "gloo:all_reduce", C.COLLECTIVE),
        (Kind.OP, "nccl:send", C.P2P),
        (Kind.OP, "nccl:recv", C.P2P),
        (Kind.OP, "c10d::send", C.P2P),
        (Kind.OP, "c10d::recv_", C.P2P),
        (Kind.OP, "aten::mm", C.OTHER),
        (Kind.RUNTIME, "cudaStreamWaitEvent", C.OTHER),  # waits on the device, not the host
        (Kind.RUNTIME, "cudaEventQuery", C.OTHER),  # non-blocking
        (Kind.OP, "aten::scatter_", C.OTHER),
        (Kind.ANNOTATION, "## forward ##", C.OTHER),
    ],
)
def test_host(kind: Kind, name: str, expected: Category) -> None:
    assert classify_host(kind, name) == expected
    assert classify(kind, name) == expected


def test_launch_names_only_count_as_launches_when_they_are_api_calls() -> None:
    # An operator that merely starts with a launch-like name is not a runtime call.
    assert classify(Kind.OP, "cudaLaunchKernel") == C.OTHER
    assert classify(Kind.RUNTIME, "cudaLaunchKernel") == C.LAUNCH


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("forward-compute", C.COMPUTE),
        ("backward-compute", C.COMPUTE),
        ("optimizer", C.COMPUTE),
        ("optimizer-clip-main-grad", C.COLLECTIVE),  # ends in the all-reduce of the grad norm
        ("all-grads-sync", C.COLLECTIVE),
        ("forward-send", C.P2P),
        ("forward-recv", C.P2P),
        ("backward-send", C.P2P),
        ("backward-recv", C.P2P),
        ("forward-send-backward-recv", C.P2P),
        ("grads-reduce-scatter", C.COLLECTIVE),
        ("params-all-gather", C.COLLECTIVE),
        ("embedding-grads-all-reduce", C.COLLECTIVE),
        ("layernorm-grads-all-reduce", C.COLLECTIVE),
        ("batch-generator", C.DATALOAD),
        ("gc", C.OTHER),
        ("save-checkpoint", C.OTHER),
    ],
)
def test_timer_ops(name: str, expected: Category) -> None:
    assert classify_timer(name) == expected
    assert classify(Kind.TIMER, name) == expected


def test_device_copy_and_memset_kinds() -> None:
    assert classify(Kind.MEMCPY, "Memcpy HtoD (Pageable -> Device)") == C.COPY
    assert classify(Kind.MEMSET, "Memset (Device)") == C.MEMSET
    assert classify(Kind.GPU_ANNOTATION, "ProfilerStep#3") == C.STEP


@pytest.mark.parametrize(
    ("name", "kind", "pageable"),
    [
        ("Memcpy HtoD (Pageable -> Device)", CopyKind.HTOD, True),
        ("Memcpy HtoD (Pinned -> Device)", CopyKind.HTOD, False),
        ("Memcpy DtoH (Device -> Pinned)", CopyKind.DTOH, False),
        ("Memcpy DtoH (Device -> Pageable)", CopyKind.DTOH, True),
        ("Memcpy DtoD (Device -> Device)", CopyKind.DTOD, False),
        ("Memcpy PtoP (Device -> Device)", CopyKind.PTOP, False),
        ("Memcpy PtoP", CopyKind.PTOP, False),
        ("Memcpy HtoH (Pageable -> Pinned)", CopyKind.HTOH, True),
        ("Memcpy HtoD (Host -> Device)", CopyKind.HTOD, False),  # ROCm: pinning unknown
        ("Memcpy DtoA", CopyKind.UNKNOWN, False),
        ("something else", CopyKind.UNKNOWN, False),
    ],
)
def test_parse_copy(name: str, kind: CopyKind, pageable: bool) -> None:
    assert parse_copy(name) == (kind, pageable)


def test_collective_names_from_profiler_args() -> None:
    assert collective_category("allreduce") == C.COLLECTIVE
    assert collective_category("_allgather_base") == C.COLLECTIVE
    assert collective_category("all_to_all") == C.COLLECTIVE
    assert collective_category("reduce_scatter_tensor_coalesced") == C.COLLECTIVE
    assert collective_category("broadcast") == C.COLLECTIVE
    assert collective_category("send") == C.P2P
    assert collective_category("recv") == C.P2P
    assert collective_category("") is None


def test_categories_for_names_matches_per_name_rules() -> None:
    names = ["cudaLaunchKernel", "cudaStreamSynchronize", "aten::add"]
    assert categories_for_names(Kind.RUNTIME, names) == [int(C.LAUNCH), int(C.SYNC), int(C.OTHER)]
