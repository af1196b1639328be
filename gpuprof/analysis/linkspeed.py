"""Achieved bandwidth of collectives, and what the GPU's interconnect could do.

A collective moves a known number of bytes (``RankSummary.comms["bytes"]``: the larger of
its input and output message, as the profiler's ``In msg nelems`` / ``Out msg nelems``
times the element size). From its device time follow, as ``nccl-tests`` defines them:

* algorithm bandwidth ``algbw = bytes / time``;
* bus bandwidth ``busbw = algbw * factor``, the rate each GPU's links must sustain, with
  ``factor`` = 2(n-1)/n for all-reduce, (n-1)/n for all-gather, reduce-scatter and
  all-to-all, 1 for broadcast and reduce (n: members of the group). Bus bandwidth is
  comparable with the per-GPU link peak whatever the group size.

Link peaks (:data:`LINK_PEAK_GBPS`) are datasheet figures of the per-GPU aggregate
NVLink / xGMI bandwidth, both directions, in GB/s. They are approximate: the path a
collective takes (PCIe, network between nodes, fewer links on some boards) can be far
slower, so a collective below the peak is not by itself a fault. A device the table does
not know gets ``None``.

A collective is *slow* when it takes more than :data:`SLOW_FACTOR` times what its bytes
need at link speed (:func:`expected_us`: a fixed start-up latency plus the bus bytes at
:data:`LINK_EFFICIENCY` of the peak). On a rank whose group members are all in the input,
the cross-rank analysis measures waiting for late ranks directly; where they are not (one
rank of eight profiled), a collective far slower than its bytes justify is mostly the
profiled rank waiting for the absent ones to arrive, or a transport that does not use the
fast links.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from gpuprof.analysis import intervals as iv
from gpuprof.analysis.summary import RankSummary
from gpuprof.model.dtypes import DTYPE_BYTES, message_bytes  # noqa: F401 (re-exported: moved to the model for readers)
from gpuprof.model.timeline import Category

# Per-GPU interconnect peak, GB/s (approximate datasheet figures; first match wins, so more
# specific names come first). PCIe boards are unknown (None): their link depends on the
# bridge and the host.
LINK_PEAK_GBPS: tuple[tuple[str, float | None], ...] = (
    (r"GB200|B200|B100|B300", 1800.0),
    (r"H800", 400.0),
    (r"H100 NVL", 600.0),
    (r"PCIE", None),
    (r"GH200|H200|H100|H20\b", 900.0),
    (r"A800", 400.0),
    (r"A100", 600.0),
    (r"V100", 300.0),
    (r"P100", 160.0),
    (r"MI355|MI350", 1075.0),
    (r"MI325|MI300", 896.0),
    (r"MI250", 400.0),
    (r"MI210", 300.0),
)
# Bus bandwidth counts one direction while the datasheet peaks count both, and a well-tuned
# collective reaches about 80% of the one-way figure: 0.4 of the datasheet peak.
LINK_EFFICIENCY = 0.4
# Fixed cost of any collective (launch and handshake), microseconds.
LATENCY_US = 20.0
# A collective that takes this many times its expected time is "slow".
SLOW_FACTOR = 10.0


def link_peak_gbps(device_name: str | None) -> float | None:
    """Per-GPU NVLink / xGMI peak of ``device_name`` in GB/s (both directions, datasheet),
    ``None`` if unknown."""
    if not device_name:
        return None
    name = device_name.upper()
    for pattern, gbps in LINK_PEAK_GBPS:
        if re.search(pattern, name):
            return gbps
    return None


def bus_factor(coll_name: str, group_size: int | None) -> float | None:
    """``busbw / algbw`` for a collective of ``group_size`` members; ``None`` if unknown."""
    low = coll_name.lower().replace("_", "")
    if "broadcast" in low or low in ("reduce", "ncclreduce"):
        return 1.0
    if not group_size or group_size < 2:
        return None
    n = float(group_size)
    if "allreduce" in low:
        return 2.0 * (n - 1.0) / n
    if "allgather" in low or "reducescatter" in low or "alltoall" in low:
        return (n - 1.0) / n
    return None


def expected_us(bus_bytes: float, peak_gbps: float) -> float:
    """Time (us) to move ``bus_bytes`` per GPU at ``LINK_EFFICIENCY`` of the link peak."""
    return LATENCY_US + bus_bytes / (LINK_EFFICIENCY * peak_gbps * 1e3)


def _group_size(s: RankSummary, pg: str) -> int | None:
    members = (s.process_groups or {}).get(pg)
    if members:
        return len(members)
    return s.world_size if pg in ("", "0") and s.world_size else None


def rank_bandwidth(s: RankSummary, waits: Mapping[float, float] | None = None) -> dict[str, Any] | None:
    """Bandwidth findings of one rank's sized collectives; ``None`` when none has a size.

    ``waits`` maps a call's ``start_us`` to the time it waited for a later member (measured
    by the cross-rank analysis where the group is in the input): that part is not
    transfer, so it is left out of the call's time and of its exposed time.

    Keys: ``calls`` (collectives with a size), ``bytes_per_step``, ``busbw_gbps`` (median
    over calls, ``None`` where the group size or collective is unknown), ``algbw_gbps``
    (median), ``peak_gbps`` (``None`` unknown), ``sizes_bytes`` (min, max), ``duration_us``
    (min, max; transfer time, waits left out), ``exposed_us_per_step`` (their transfer
    time with no compute beside it),
    ``at_link_us_per_step`` (what that exposed time would be at link speed, each call
    capped by its exposed part), ``slow_calls``, ``excess_us_per_step`` (exposed time of
    slow calls beyond their time at link speed), ``names`` (collective names), and when
    some call is slow, ``slow``: ``names``, ``sizes_bytes``, ``duration_us`` and
    ``busbw_gbps`` (min, max; algorithm bandwidth where the bus factor is unknown) of
    the slow calls. The last four keys are ``None`` / absent when the link peak is unknown.
    """
    c = s.comms
    if c is None or len(c) == 0:
        return None
    rows = c.loc[(c["category"].to_numpy() == int(Category.COLLECTIVE)) & (c["bytes"].to_numpy() > 0)]
    if len(rows) == 0:
        return None
    steps = max(len(s.steps), 1)
    start = rows["start_us"].to_numpy(dtype=np.float64)
    end = rows["end_us"].to_numpy(dtype=np.float64)
    waited = np.array([float((waits or {}).get(float(t), 0.0)) for t in start])
    # The transfer begins when the last member arrives.
    xfer_start = np.minimum(start + waited, end)
    dur = np.maximum(end - xfer_start, 1e-3)
    nbytes = rows["bytes"].to_numpy(dtype=np.float64)
    factors = np.array(
        [
            bus_factor(str(n), _group_size(s, str(g))) or np.nan
            for n, g in zip(rows["coll_name"].to_numpy(), rows["pg"].to_numpy())
        ]
    )
    algbw = nbytes / dur / 1e3  # bytes/us = MB/s -> GB/s
    busbw = algbw * factors
    exposed = iv.overlap_with_each((xfer_start, end), s.lost)
    peak = link_peak_gbps(s.device_name)
    out: dict[str, Any] = {
        "calls": len(rows),
        "bytes_per_step": round(float(nbytes.sum()) / steps, 1),
        "algbw_gbps": round(float(np.median(algbw)), 3),
        "busbw_gbps": None if np.isnan(busbw).all() else round(float(np.nanmedian(busbw)), 3),
        "peak_gbps": peak,
        "sizes_bytes": [int(nbytes.min()), int(nbytes.max())],
        "duration_us": [round(float(dur.min()), 3), round(float(dur.max()), 3)],
        "exposed_us_per_step": round(float(exposed.sum()) / steps, 3),
        "names": sorted({str(n) for n in rows["coll_name"].to_numpy() if str(n)}),
        "at_link_us_per_step": None,
        "slow_calls": None,
        "excess_us_per_step": None,
    }
    if peak is not None:
        bus_bytes = nbytes * np.nan_to_num(factors, nan=1.0)
        expect = LATENCY_US + bus_bytes / (LINK_EFFICIENCY * peak * 1e3)
        slow = dur > SLOW_FACTOR * expect
        out["at_link_us_per_step"] = round(float(np.minimum(exposed, expect).sum()) / steps, 3)
        out["slow_calls"] = int(slow.sum())
        out["excess_us_per_step"] = round(float(np.maximum(exposed - expect, 0.0)[slow].sum()) / steps, 3)
        out["busbw_share_of_peak"] = (
            None if out["busbw_gbps"] is None else round(float(out["busbw_gbps"]) / peak, 5)
        )
        if slow.any():
            bw = np.where(np.isnan(busbw), algbw, busbw)[slow]
            out["slow"] = {
                "names": sorted({str(n) for n in rows["coll_name"].to_numpy()[slow] if str(n)}),
                "sizes_bytes": [int(nbytes[slow].min()), int(nbytes[slow].max())],
                "duration_us": [round(float(dur[slow].min()), 3), round(float(dur[slow].max()), 3)],
                "busbw_gbps": [round(float(bw.min()), 3), round(float(bw.max()), 3)],
            }
    return out


def job_bandwidth(
    summaries: Sequence[RankSummary], waits: Mapping[int, Mapping[float, float]] | None = None
) -> Mapping[str, dict[str, Any]]:
    """:func:`rank_bandwidth` of every rank that has sized collectives, keyed by rank (str);
    ``waits[rank]`` as for :func:`rank_bandwidth`."""
    out: dict[str, dict[str, Any]] = {}
    for s in summaries:
        b = rank_bandwidth(s, (waits or {}).get(s.rank))
        if b is not None:
            out[str(s.rank)] = b
    return out
