"""How a simulated job looks on each platform: CUDA (H100) or ROCm (MI300X).

The engine speaks in CUDA terms (``cudaLaunchKernel``, the cuBLAS and flash-attention
kernels of :mod:`gpuprof.simulate.workload`); a :class:`Platform` turns them into what the
profiler writes on that platform. The ROCm names follow real ``torch.profiler`` traces of
PyTorch 2.x on MI300X (roctracer): ``hip*`` runtime calls with a ``cid`` instead of a
``cbid``; ``hipLaunchKernel`` carrying the kernel name, grid and block; kernels with only
``device``, ``stream``, ``correlation`` and ``kind`` in their args; hipBLASLt/Tensile
``Cijk_*`` GEMMs and AOTriton attention kernels; every RCCL kernel named
``ncclDevKernel_Generic`` and launched by ``hipExtLaunchKernel``; ``.item()`` as one blocking
``hipMemcpyWithStream``; memcpy names without pinned/pageable; small stream numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from gpuprof.simulate import kernels as wl

H100: dict[str, Any] = {
    "name": "NVIDIA H100 80GB HBM3",
    "totalGlobalMem": 85045346304,
    "computeMajor": 9,
    "computeMinor": 0,
    "maxThreadsPerBlock": 1024,
    "maxThreadsPerMultiprocessor": 2048,
    "regsPerBlock": 65536,
    "warpSize": 32,
    "sharedMemPerBlock": 49152,
    "numSms": 132,
    "regsPerMultiprocessor": 65536,
    "sharedMemPerBlockOptin": 232448,
    "sharedMemPerMultiprocessor": 233472,
}

MI300X: dict[str, Any] = {
    "name": "AMD Instinct MI300X",
    "totalGlobalMem": 206141652992,
    "computeMajor": 9,
    "computeMinor": 4,
    "maxThreadsPerBlock": 1024,
    "maxThreadsPerMultiprocessor": 2048,
    "regsPerBlock": 65536,
    "warpSize": 64,
    "sharedMemPerBlock": 65536,
    "numSms": 304,
    "maxSharedMemoryPerMultiProcessor": 65536,
}

_HIP_RUNTIME: dict[str, tuple[str, int]] = {
    "cudaLaunchKernel": ("hipLaunchKernel", 107),
    "cudaLaunchKernelExC": ("hipExtLaunchKernel", 352),
    "cudaMemcpyAsync": ("hipMemcpyAsync", 134),
    "cudaMemcpyWithStream": ("hipMemcpyWithStream", 148),
    "cudaMemsetAsync": ("hipMemsetAsync", 146),
    "cudaStreamSynchronize": ("hipStreamSynchronize", 208),
    "cudaDeviceSynchronize": ("hipDeviceSynchronize", 43),
    "cudaEventRecord": ("hipEventRecord", 58),
    "cudaStreamWaitEvent": ("hipStreamWaitEvent", 200),
    "cudaMalloc": ("hipMalloc", 100),
    "cudaFree": ("hipFree", 63),
}

_TENSILE_GEMM = (
    "Cijk_Alik_Bljk_BBS_BH_MT256x256x64_MI16x16x16x1_SN_1LDSB1_APM1_ABV0_ACED0_AF0EM1_AF1EM1_AMAS3_ASE_ASGT_"
    "ASLT_ASM_ASAE01_ASCE01_ASEM1_AAC0_BL1_BS1_DTLA0_DTLB0_DTVA0_DTVB0_DVO0_ETSP_EPS1_FSSC10_FL0_GRPM1_GRVWn1_"
    "GSU1_GSUASB_GLS0_ISA942_IU1_K1_KLA_LBSPPA512_LBSPPB512_LPA16_LPB16_LDL1_LRVW16_LWPMn1_LDW0_FMA_MIAV1_MDA2_"
    "MO40_MMFSC_NTA0_NTB0_NTC0_NTD0_NEPBS16_NLCA1_NLCB1_ONLL1_OPLV0_PK0_PAP0_PGR2_PLR1_PKA1_SIA3_SS1_SU32_SUM0_"
    "SUS256_SCIUI1_SPO1_SRVW0_SSO0_SVW8_SNLL0_TSGRA0_TSGRB0_TT4_64_TLDS1_UMLDSA1_UMLDSB1_U64SL1_USFGROn1_VAW2_"
    "VSn1_VW4_VWB4_VFLRP0_WSGRA1_WSGRB1_WS64_WG64_4_1_WGM8"
)
_TENSILE_GEMM_NT = _TENSILE_GEMM.replace("Cijk_Alik_Bljk", "Cijk_Ailk_Bjlk", 1)


def _rocm_elementwise(name: str) -> str:
    """PyTorch's ROCm build prints ``std::array<char*, Nul>`` where CUDA prints ``at::detail::Array``."""
    for n in (1, 2, 3):
        name = name.replace(f"at::detail::Array<char*, {n}>", f"std::array<char*, {n}ul>")
    return name


@cache
def _hip_kernels() -> dict[str, str]:
    """ROCm names of the workload's CUDA kernels."""
    return {
        wl.GEMM: _TENSILE_GEMM,
        wl.GEMM_NT: _TENSILE_GEMM_NT,
        wl.FLASH_FWD: "attn_fwd",
        wl.FLASH_BWD: "bwd_kernel_dk_dv",
        wl.GELU: _rocm_elementwise(wl.GELU),
        wl.ADD: _rocm_elementwise(wl.ADD),
        wl.TINY: _rocm_elementwise(wl.TINY),
    }


RCCL_KERNEL = "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)"


@dataclass(frozen=True)
class Platform:
    """Naming and trace layout of one GPU platform."""

    name: str  # "cuda" or "rocm"
    device_properties: Mapping[str, Any]
    header: Mapping[str, Any] = field(default_factory=dict)  # extra top-level trace keys
    streams: Mapping[int, int] = field(default_factory=dict)  # logical -> written stream id
    runtime_names: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    # every NCCL/RCCL kernel under one name, with no collective args on the kernel event
    generic_nccl_kernel: str | None = None

    @property
    def rocm(self) -> bool:
        return self.name == "rocm"

    def runtime(self, cuda_name: str, cbid: int) -> tuple[str, str, int]:
        """``(name, id key, id)`` of a runtime call given by its CUDA name and cbid."""
        if cuda_name in self.runtime_names:
            name, cid = self.runtime_names[cuda_name]
            return name, "cid", cid
        return cuda_name, "cbid", cbid

    def kernel(self, cuda_name: str) -> str:
        if self.generic_nccl_kernel and cuda_name.startswith("ncclDevKernel_"):
            return self.generic_nccl_kernel
        return _hip_kernels().get(cuda_name, cuda_name) if self.rocm else cuda_name

    def stream(self, logical: int) -> int:
        return self.streams.get(logical, logical)

    def memcpy_name(self, kind: str, pinned: bool) -> str:
        if self.rocm:
            return {
                "HtoD": "Memcpy HtoD (Host -> Device)",
                "DtoH": "Memcpy DtoH (Device -> Host)",
                "DtoD": "Memcpy DtoD (Device -> Device)",
            }[kind]
        host = "Pinned" if pinned else "Pageable"
        return {
            "HtoD": f"Memcpy HtoD ({host} -> Device)",
            "DtoH": f"Memcpy DtoH (Device -> {host})",
            "DtoD": "Memcpy DtoD (Device -> Device)",
        }[kind]


CUDA = Platform(name="cuda", device_properties=H100)
ROCM = Platform(
    name="rocm",
    device_properties=MI300X,
    header={"roctracer_version": "4.1", "hip_runtime_version": 60443483, "hip_driver_version": 60443483},
    streams={7: 0, 13: 1, 20: 4, 24: 5},  # the engine's compute, copy, NCCL and p2p streams
    runtime_names=_HIP_RUNTIME,
    generic_nccl_kernel=RCCL_KERNEL,
)

PLATFORMS: dict[str, Platform] = {"cuda": CUDA, "rocm": ROCM}
