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

Bandwidth is measured only where it can be: a collective's kernel runs from the moment
its rank arrives, so its duration holds the wait for the members that arrive later. The
transfer is the part after the last member arrived, which is known only when every
member of the call's group is in the input (the cross-rank analysis matches the call
and measures the wait). A call is *measurable* when, in addition, that transfer part
lasts at least :data:`MIN_TRANSFER_US` (shorter parts are the collective's fixed start-up
cost and the clock alignment error between ranks, not bytes moving) and its bus
bandwidth is not above the link peak (:data:`MAX_LINK_PEAK_GBPS` where the device is not
known): a faster figure means the split between waiting and transfer is off, not a fast
link. Bandwidth figures are medians over measurable calls; with none, they are ``None``
and ``bandwidth_note`` says why ("not measurable: ...").

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
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from gpuprof.accounting.summary import RankSummary
from gpuprof.job.findings import RankBandwidth, SlowCalls
from gpuprof.model import intervals as iv
from gpuprof.model.dtypes import DTYPE_BYTES, message_bytes  # noqa: F401 (re-exported: moved to the model for readers)
from gpuprof.model.table import Table
from gpuprof.model.timeline import Category

if TYPE_CHECKING:  # pandas is imported by the functions that use it
    import pandas as pd

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
# The transfer part of a call (after its last member arrived) must last this long for its
# bandwidth to be measured: below it, the collective's fixed start-up cost (LATENCY_US)
# and the error of aligning the ranks' clocks (microseconds) dominate.
MIN_TRANSFER_US = 20.0
# No bandwidth above the fastest link known (NVLink 5, B200 / GB200) is ever shown, even
# where the device is not known.
MAX_LINK_PEAK_GBPS = max(g for _, g in LINK_PEAK_GBPS if g is not None)


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


def rank_bandwidth(s: RankSummary, arrivals: Table | pd.DataFrame | None = None) -> RankBandwidth | None:
    """Bandwidth findings of one rank's sized collectives; ``None`` when none has a size.

    ``arrivals`` holds the rank's calls as matched by the cross-rank analysis
    (:attr:`gpuprof.job.collectives.MatchedCollectives.calls` rows of this rank:
    ``start_us``, ``wait_us``, ``complete``, ``n_expected``). The wait for later members is not transfer:
    it is left out of the call's time and of its exposed time; only calls whose group is
    complete have a known transfer part and can be measured (see the module docstring).

    Keys: ``calls`` (collectives with a size), ``bytes_per_step``, ``busbw_gbps`` (median
    over measurable calls, ``None`` where none is measurable or the group size or
    collective is unknown), ``algbw_gbps`` (median over measurable calls, ``None`` where
    none is), ``measurable_calls``, ``bandwidth_note`` (``None``, or why no bandwidth is
    given: "not measurable: ..."), ``peak_gbps`` (``None`` unknown), ``sizes_bytes``
    (min, max), ``duration_us`` (min, max; waits left out where measured),
    ``exposed_us_per_step`` (their time with no compute beside it),
    ``at_link_us_per_step`` (what that exposed time would be at link speed, each call
    capped by its exposed part), ``slow_calls``, ``excess_us_per_step`` (exposed time of
    slow calls beyond their time at link speed), ``names`` (collective names), and when
    some call is slow, ``slow``: ``names``, ``sizes_bytes``, ``duration_us`` and
    ``busbw_gbps`` (min, max over the slow calls that are measurable, algorithm bandwidth
    where the bus factor is unknown; ``None`` when none is). The last four keys are
    ``None`` / absent when the link peak is unknown.
    """
    c = s.comms_table
    if len(c) == 0:
        return None
    rows = c.take((c["category"] == int(Category.COLLECTIVE)) & (c["bytes"] > 0))
    if len(rows) == 0:
        return None
    steps = max(len(s.steps), 1)
    start = np.asarray(rows["start_us"], dtype=np.float64)
    end = np.asarray(rows["end_us"], dtype=np.float64)
    waited, known, members = _transfer_known(start, arrivals)
    # The transfer begins when the last member arrives.
    xfer_start = np.minimum(start + waited, end)
    dur = end - xfer_start
    nbytes = np.asarray(rows["bytes"], dtype=np.float64)
    factors = np.array(
        [
            bus_factor(str(n), _group_size(s, str(g)) or (m if m > 0 else None)) or np.nan
            for n, g, m in zip(rows["coll_name"], rows["pg"], members.tolist())
        ]
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        algbw = np.where(dur > 0, nbytes / np.maximum(dur, 1e-9) / 1e3, np.inf)  # bytes/us = MB/s -> GB/s
    busbw = algbw * factors
    peak = link_peak_gbps(s.device_name)
    ceiling = peak if peak is not None else MAX_LINK_PEAK_GBPS
    timed = known & (dur >= MIN_TRANSFER_US)
    plausible = np.where(np.isnan(busbw), algbw, busbw) <= ceiling
    measurable = timed & plausible
    exposed = iv.overlap_with_each((xfer_start, end), s.lost)
    bus_ok = measurable & ~np.isnan(busbw)
    out = RankBandwidth(
        calls=len(rows),
        bytes_per_step=round(float(nbytes.sum()) / steps, 1),
        algbw_gbps=round(float(np.median(algbw[measurable])), 3) if measurable.any() else None,
        busbw_gbps=round(float(np.median(busbw[bus_ok])), 3) if bus_ok.any() else None,
        measurable_calls=int(measurable.sum()),
        bandwidth_note=None if measurable.any() else _not_measurable(known, timed, ceiling, peak),
        peak_gbps=peak,
        sizes_bytes=(int(nbytes.min()), int(nbytes.max())),
        duration_us=(round(float(dur.min()), 3), round(float(dur.max()), 3)),
        exposed_us_per_step=round(float(exposed.sum()) / steps, 3),
        names=tuple(sorted({str(n) for n in rows["coll_name"] if str(n)})),
    )
    if peak is not None:
        bus_bytes = nbytes * np.nan_to_num(factors, nan=1.0)
        expect = LATENCY_US + bus_bytes / (LINK_EFFICIENCY * peak * 1e3)
        slow = dur > SLOW_FACTOR * expect
        slow_calls = None
        if slow.any():
            bw = np.where(np.isnan(busbw), algbw, busbw)[slow & measurable]
            slow_calls = SlowCalls(
                names=tuple(sorted({str(n) for n in rows["coll_name"][slow] if str(n)})),
                sizes_bytes=(int(nbytes[slow].min()), int(nbytes[slow].max())),
                duration_us=(round(float(dur[slow].min()), 3), round(float(dur[slow].max()), 3)),
                busbw_gbps=(round(float(bw.min()), 3), round(float(bw.max()), 3)) if bw.size else None,
            )
        out = replace(
            out,
            at_link_us_per_step=round(float(np.minimum(exposed, expect).sum()) / steps, 3),
            slow_calls=int(slow.sum()),
            excess_us_per_step=round(float(np.maximum(exposed - expect, 0.0)[slow].sum()) / steps, 3),
            busbw_share_of_peak=None if out.busbw_gbps is None else round(float(out.busbw_gbps) / peak, 5),
            slow=slow_calls,
        )
    return out


def _transfer_known(
    start: np.ndarray, arrivals: Table | pd.DataFrame | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per call (by its start): the wait for later members, whether the transfer part is
    known (the call's group is complete in the input), and the group's size as the
    matching found it (-1 unknown; e.g. a world size inferred from the collectives)."""
    waited = np.zeros(start.size)
    known = np.zeros(start.size, bool)
    members = np.full(start.size, -1, np.int64)
    if arrivals is None or len(arrivals) == 0:
        return waited, known, members
    by_start = {
        float(t): (float(w), bool(c), int(n))
        for t, w, c, n in zip(
            arrivals["start_us"], arrivals["wait_us"], arrivals["complete"], arrivals["n_expected"]
        )
    }
    for i, t in enumerate(start.tolist()):
        hit = by_start.get(float(t))
        if hit is not None:
            waited[i], known[i], members[i] = hit
    return waited, known, members


def _not_measurable(known: np.ndarray, timed: np.ndarray, ceiling: float, peak: float | None) -> str:
    """Why no call's bandwidth can be measured."""
    if not known.any():
        return (
            "not measurable: the other members of these collectives are not all in the input, so the "
            "transfer cannot be told from the wait for them"
        )
    if not timed.any():
        return (
            f"not measurable: the transfer after the last member arrived lasts under {MIN_TRANSFER_US:.0f} µs "
            "in every call, too short to time"
        )
    what = "the link peak" if peak is not None else "the fastest link known"
    return f"not measurable: the transfer times give more than {what} ({ceiling:.0f} GB/s)"


def job_bandwidth(
    summaries: Sequence[RankSummary], calls: Table | pd.DataFrame | None = None
) -> Mapping[int, RankBandwidth]:
    """:func:`rank_bandwidth` of every rank that has sized collectives, keyed by rank;
    ``calls`` are the matched calls of all ranks (``rank``, ``start_us``, ``wait_us``,
    ``complete``, ``n_expected``)."""
    by_rank: dict[int, Table] = {}
    if calls is not None and len(calls):
        table = calls if isinstance(calls, Table) else Table.from_pandas(calls)
        ranks = np.asarray(table["rank"])
        by_rank = {int(r): table.take(ranks == r) for r in np.unique(ranks)}
    out: dict[int, RankBandwidth] = {}
    for s in summaries:
        b = rank_bandwidth(s, by_rank.get(s.rank))
        if b is not None:
            out[s.rank] = b
    return out
