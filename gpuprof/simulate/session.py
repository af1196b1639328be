"""Writing a simulated job as a ``gpuprof run`` session folder, with NVML-like samples.

The samples are what a GPU monitor polling every :data:`POLL_S` seconds would report for
each rank's GPU: ``util_gpu_pct`` is the share of the poll period in which some kernel was
running -- NCCL kernels included, since NVML counts a kernel spinning while it waits for a
peer as busy -- and the memory in use. Metrics a simulator cannot know are ``null``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from gpuprof.model import intervals as iv
from gpuprof.model.report import Cause
from gpuprof.session.layout import SESSION_SCHEMA, TRACES_DIR
from gpuprof.session.writer import SessionWriter
from gpuprof.simulate.kineto import BASE_TIME_NS, CLOCK_ORIGIN_US
from gpuprof.simulate.rank import RankSim

POLL_S = 0.02  # a fast monitor; NVML's own utilization counters average over ~1/6 s
MEM_TOTAL_BYTES = 85045346304


def _unix_s(t_us: float) -> float:
    """Wall-clock time of simulated time ``t_us``: Kineto's ``ts`` plus ``baseTimeNanoseconds``."""
    return BASE_TIME_NS / 1e9 + (CLOCK_ORIGIN_US + t_us) / 1e6


def write_session(root: Path, sims: Sequence[RankSim], scenario: str) -> None:
    """Write ``gpuprof-session.json`` and ``samples.jsonl`` (traces are already in ``traces/``)."""
    w = SessionWriter(root, flush_interval_s=0.0, clock=lambda: 0.0)
    try:
        lo = min(s.window[0] for s in sims if s.window) - 2 * POLL_S * 1e6
        hi = max(s.window[1] for s in sims if s.window) + 2 * POLL_S * 1e6
        polls = np.arange(lo + POLL_S * 1e6, hi, POLL_S * 1e6)
        for sim in sims:
            busy = iv.union(
                np.concatenate(
                    [
                        np.frombuffer(sim.compute_s),
                        np.frombuffer(sim.claims[Cause.STRAGGLER][0]),
                        np.frombuffer(sim.claims[Cause.COMMUNICATION][0]),
                    ]
                ),
                np.concatenate(
                    [
                        np.frombuffer(sim.compute_e),
                        np.frombuffer(sim.claims[Cause.STRAGGLER][1]),
                        np.frombuffer(sim.claims[Cause.COMMUNICATION][1]),
                    ]
                ),
            )
            for t in polls:
                share = iv.total(iv.clip(busy, t - POLL_S * 1e6, t)) / (POLL_S * 1e6)
                w.samples.append(
                    {
                        "time_unix_s": round(_unix_s(t), 6),
                        "gpu": sim.rank,
                        "uuid": f"GPU-sim-{sim.rank:04d}",
                        "util_gpu_pct": round(100.0 * share),
                        "util_mem_pct": round(60.0 * share),
                        "mem_used_bytes": 61 << 30,
                        "mem_total_bytes": MEM_TOTAL_BYTES,
                        "power_w": round(120.0 + 560.0 * share, 1),
                        "energy_mj": None,
                        "clock_sm_mhz": 1980,
                        "clock_mem_mhz": 2619,
                        "clock_event_reasons": 0,
                        "temperature_c": 55,
                        "pcie_tx_bytes_per_s": None,
                        "pcie_rx_bytes_per_s": None,
                        "nvlink_tx_kib": None,
                        "nvlink_rx_kib": None,
                        "gpm_sm_active_pct": None,
                        "gpm_sm_occupancy_pct": None,
                        "gpm_tensor_active_pct": None,
                        "gpm_dram_bw_pct": None,
                    }
                )
        w.write_meta(
            {
                "schema": SESSION_SCHEMA,
                "status": "finished",
                "command": ["python", f"{scenario}.py"],
                "cwd": None,
                "host": "simulated",
                "start_time_unix_s": _unix_s(lo),
                "end_time_unix_s": _unix_s(hi),
                "exit_code": 0,
                "signal": None,
                "sample_interval_ms": int(POLL_S * 1000),
                "hooks_enabled": False,
                "profile_schedule": None,
                "gpus": [
                    {
                        "index": s.rank,
                        "uuid": f"GPU-sim-{s.rank:04d}",
                        "name": "NVIDIA H100 80GB HBM3",
                        "mem_total_bytes": MEM_TOTAL_BYTES,
                        "mig": False,
                    }
                    for s in sims
                ],
                "versions": {
                    "gpuprof": "simulated",
                    "python": sys.version.split()[0],
                    "driver": None,
                    "nvml": None,
                },
                "warnings": [],
                "simulated": True,
                "traces_dir": TRACES_DIR,
            }
        )
    finally:
        w.close()
