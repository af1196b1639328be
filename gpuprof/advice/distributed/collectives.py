"""Collectives far slower than their bytes need (``communication-slow-collectives``), and
what every communication finding measures of the collectives: their bandwidth against the
link's, the time beyond the link speed, the share that overlaps compute."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpuprof.advice.context import AdviceContext, advisor
from gpuprof.advice.distributed.slowranks import MIN_SAVINGS_PCT
from gpuprof.advice.finding import Fact, Finding, Said, said
from gpuprof.advice.replayed import replayed
from gpuprof.advice.savings import savings_pct
from gpuprof.job.findings import RankBandwidth, SlowCalls
from gpuprof.model import intervals as iv
from gpuprof.model.report import Cause, RankReport
from gpuprof.model.timeline import Category


def overlap_share(ctx: AdviceContext) -> float | None:
    """Share of collective device time that runs beside compute, over all ranks."""
    total = 0.0
    hidden = 0.0
    for s in ctx.summaries:
        c = s.comms_table
        if len(c) == 0:
            continue
        coll = np.asarray(c["category"]) == int(Category.COLLECTIVE)
        if not coll.any():
            continue
        ivs = iv.clip(iv.union(np.asarray(c["start_us"])[coll], np.asarray(c["end_us"])[coll]), s.window[0], s.window[1])
        if s.window_iv is not None:  # time left out between steps is not in the window
            ivs = iv.intersect(ivs, s.window_iv)
        total += iv.total(ivs)
        hidden += iv.total(iv.intersect(ivs, s.compute))
    return hidden / total if total > 0 else None


def slow_excess_us(ctx: AdviceContext, reports: Sequence[RankReport]) -> dict[int, float]:
    """Per rank, exposed collective time beyond what the bytes need at link speed (slow
    collectives only), capped by the rank's lost ``communication`` time (waits measured
    against ranks present are ``straggler`` already)."""
    bw = ctx.cross.collective_bandwidth
    out: dict[int, float] = {}
    for r in reports:
        b = bw.get(r.rank)
        if b is None or not b.excess_us_per_step:
            continue
        excess = float(b.excess_us_per_step) * max(r.steps, 1)
        out[r.rank] = min(excess, float(r.lost_us.get(Cause.COMMUNICATION, 0.0)))
    return out


def _slow_calls(b: RankBandwidth, d: SlowCalls, rank: int, device: str | None) -> Said:
    """A rank's slow collectives ``d``: sizes, durations, the bus bandwidth they reach (when
    the transfer part could be timed) and how far below the link's peak that is."""
    peak = float(b.peak_gbps or 0.0)  # slow calls are told against a known peak
    s_lo, s_hi = (float(x) for x in d.sizes_bytes)
    d_lo, d_hi = (float(x) for x in d.duration_us)
    bus = tuple(float(x) for x in d.busbw_gbps) if d.busbw_gbps else None
    return said(
        "collectives.slow_calls", rank=rank, calls=b.slow_calls, names=d.names, sizes_bytes=(s_lo, s_hi),
        duration_us=(d_lo, d_hi), busbw_gbps=bus, peak_gbps=peak, device=device,
        below=None if bus is None else (peak / max(bus[1], 1e-9), peak / max(bus[0], 1e-9)),
        note=b.bandwidth_note,
    )


def bandwidth(b: RankBandwidth, rank: int, device: str | None) -> Said:
    """A rank's collectives: sizes, durations and the median bandwidth they reach (bus
    bandwidth where known, else algorithm bandwidth) against the link's peak."""
    bw = b.busbw_gbps
    kind = "bus" if bw is not None else "algorithm"
    bw = bw if bw is not None else b.algbw_gbps
    peak = b.peak_gbps
    return said(
        "collectives.bandwidth", rank=rank, calls=b.calls, names=b.names or ("collective",),
        sizes_bytes=b.sizes_bytes, duration_us=b.duration_us, kind=kind,
        gbps=None if bw is None else float(bw), peak_gbps=float(peak) if peak else None, device=device,
        of_peak_pct=100.0 * float(bw) / float(peak) if bw is not None and peak else None, note=b.bandwidth_note,
    )


def bandwidth_facts(b: RankBandwidth) -> dict[str, Fact]:
    """The bandwidth a rank's collectives reach, and the link's peak."""
    return {
        "busbw_gbps": b.busbw_gbps,
        "algbw_gbps": b.algbw_gbps,
        "peak_gbps": b.peak_gbps,
    }


@advisor
def slow_collectives_advice(ctx: AdviceContext) -> list[Finding]:
    """Collectives far slower than their bytes need: a late (maybe absent) rank, or a
    transport that does not use the fast links. Estimate: the exposed time beyond the
    time at link speed (see :mod:`gpuprof.job.linkspeed`) vanishes."""
    reports = list(ctx.reports)
    excess = slow_excess_us(ctx, reports)
    if not excess:
        return []
    upper = savings_pct(reports, excess)
    bw = ctx.cross.collective_bandwidth
    absent = bool(ctx.cross.straggler_analysis.note)
    # With every member present, a faster transport is the fix: its what-if is transfers
    # at twice the bandwidth, replayed; the excess vanishing altogether (link speed) is
    # the upper end. With ranks missing the time may be waiting: the closed form stays.
    got = None if absent else replayed(ctx, "double_bandwidth")
    pct = got.pct if got is not None else upper
    if pct < MIN_SAVINGS_PCT:
        return []
    devices = {s.rank: s.device_name for s in ctx.summaries}
    evidence: list[Said] = []
    per_step: dict[int, float] = {}
    for rank in sorted(excess):
        b = bw[rank]
        evidence.append(_slow_calls(b, b.slow, rank, devices.get(rank)) if b.slow else bandwidth(b, rank, devices.get(rank)))
        per_step[rank] = excess[rank] / max(next((r.steps for r in reports if r.rank == rank), 1), 1)
        evidence.append(said("collectives.beyond_link", rank=rank, at_link_us_per_step=float(b.at_link_us_per_step or 0.0),
                             excess_us_per_step=per_step[rank], calls=b.slow_calls))
    share = overlap_share(ctx)
    if share is not None:
        evidence.append(said("collectives.overlap_already", share_pct=100 * share))
    if absent:
        evidence.append(said("collectives.partial_groups"))
    if got is not None:
        evidence.append(got.said)
        evidence.append(said("collectives.at_link_speed", upper_pct=upper))
    else:
        evidence.append(said("collectives.estimate_upper"))
    worst = max(per_step, key=lambda r: per_step[r])
    b = bw[worst]
    facts: dict[str, Fact] = {
        "rank": worst,
        "slow_calls": b.slow_calls,
        "at_link_us_per_step": float(b.at_link_us_per_step or 0.0),
        "excess_us_per_step": per_step[worst],
        **bandwidth_facts(b),
        "overlap_pct": None if share is None else 100.0 * share,
        "at_link_speed_pct": upper,
        **(got.facts if got is not None else {}),
    }
    return [
        Finding("communication-slow-collectives", Cause.COMMUNICATION, pct,
                said("title.communication-slow-collectives.absent" if absent else "title.communication-slow-collectives"),
                tuple(evidence), (said("collectives.actions_absent" if absent else "collectives.actions"),),
                ranks=tuple(sorted(excess)) if not absent else (), whatif=got.name if got is not None else None,
                facts=facts)
    ]
