"""One representative step per rank on the common clock: the data behind the report's timeline.

Pure: per-rank summaries, their attributions and the cross-rank findings in, a small
JSON-ready mapping out (the report's top-level ``timeline`` key), so that a saved JSON
report draws the same timeline as the run that made it.

- The step shown is the one whose job step time (the slowest rank's duration of that
  step) is the median over the steps every rank profiled; without step markers, each
  rank's whole window is shown.
- Each rank's times are moved to the common clock by subtracting its clock offset (the
  cross-rank findings' ``per_rank[rank].clock_offset_us``) and made relative to the
  earliest start, so ``0`` is when the first rank began the step.
- Bounded size: the shown span is cut into :data:`BINS` equal bins; each bin goes to the
  kind (``compute`` or a cause) with the most time in it, or to nothing when less than half
  of it is inside the window (time the analysis left out). Runs of equal bins become one
  segment, and a rank with more than :data:`MAX_SEGMENTS` segments is drawn at half the
  resolution until it fits. At most :data:`MAX_LANES` ranks are kept (the slowest, the
  critical one and, for pipelines, one per stage first; then evenly spread).
- The slowest rank is the one whose own work in the shown step (the step less its waits
  for other ranks) takes longest: in a synchronous job every rank's step lasts as long.
- The critical path: the chain of work across ranks that set the step's length, walked
  on the job model (:mod:`gpuprof.job.critical`, ``critical_path_source``
  ``"replay"``) when the caller passes ``path_of``; without a job model the critical rank
  of the step (``critical_rank_per_step``: the rank that waited least) stands in for it,
  as one segment over its whole step (``"critical_rank_per_step"``). Ranks on the path
  are kept among the lanes first. Renderers draw any list of ``{rank, start_us, end_us}``
  segments.

All times are microseconds, rounded to 0.1 µs.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from gpuprof.accounting.attribution import Attribution
from gpuprof.accounting.names import NameTrack
from gpuprof.accounting.summary import RankSummary
from gpuprof.job.findings import JobFindings
from gpuprof.model import causes
from gpuprof.model import intervals as iv
from gpuprof.model.intervals import Intervals
from gpuprof.model.report import CAUSES
from gpuprof.util.jsontypes import JsonMapping, JsonObject

KINDS: tuple[str, ...] = ("compute",) + tuple(c.value for c in CAUSES)
BINS = 1000  # horizontal resolution: about one bin per pixel of a wide chart
MAX_SEGMENTS = 250  # per rank, after merging
MAX_LANES = 32  # ranks drawn; the rest are summarized in the tables

Span = tuple[float, float]


def _offsets(findings: JobFindings) -> dict[int, float]:
    return {int(rank): float(row.clock_offset_us) for rank, row in findings.per_rank.items()}


def _stages(findings: JobFindings) -> dict[int, int]:
    return {int(rank): int(row.stage) for rank, row in findings.per_rank.items() if isinstance(row.stage, int)}


def _representative_step(summaries: Sequence[RankSummary], offsets: Mapping[int, float]) -> int | None:
    """The step number, common to every rank, whose job step time is the median; ``None``
    when the ranks share no step."""
    by_rank = [{st.number: st for st in s.steps} for s in summaries]
    common = set(by_rank[0]).intersection(*by_rank[1:]) if by_rank else set()
    if not common:
        return None
    job: dict[int, float] = {}
    for n in common:
        starts = [steps[n].start_us - offsets.get(s.rank, 0.0) for s, steps in zip(summaries, by_rank)]
        ends = [steps[n].end_us - offsets.get(s.rank, 0.0) for s, steps in zip(summaries, by_rank)]
        job[n] = max(ends) - min(starts)
    median = statistics.median_low(sorted(job.values()))
    return min(n for n, d in job.items() if d == median)


def _coverage(ivs: Intervals, edges: np.ndarray) -> np.ndarray:
    """Time of a normalized interval set inside each bin ``[edges[i], edges[i+1])``."""
    s, e = ivs
    if s.size == 0:
        return np.zeros(edges.size - 1)
    x = np.empty(2 * s.size)
    x[0::2], x[1::2] = s, e
    lengths = e - s
    cum = np.concatenate(([0.0], np.cumsum(lengths)))
    y = np.empty(2 * s.size)
    y[0::2], y[1::2] = cum[:-1], cum[1:]
    c = np.interp(edges, x, y, left=0.0, right=float(cum[-1]))
    return np.diff(c)


def _segments(kinds: Mapping[str, Intervals], lo: float, hi: float, bin_us: float) -> list[list[Any]]:
    """``[kind, start_us, end_us]`` runs of the majority kind per bin over ``[lo, hi]``."""
    n = max(1, int(np.ceil((hi - lo) / bin_us - 1e-9)))
    edges = lo + bin_us * np.arange(n + 1)
    edges[-1] = hi
    amounts = np.vstack([_coverage(kinds[k], edges) for k in KINDS])
    widths = np.diff(edges)
    best = np.argmax(amounts, axis=0)
    drawn = amounts.sum(axis=0) >= 0.5 * widths
    label = np.where(drawn, best, -1)
    change = np.flatnonzero(np.diff(label)) + 1
    starts = np.concatenate(([0], change))
    ends = np.concatenate((change, [n]))
    out: list[list[Any]] = []
    for a, b in zip(starts, ends):
        k = int(label[a])
        if k >= 0:
            out.append([KINDS[k], round(float(edges[a]), 1), round(float(edges[b]), 1)])
    return out


# Where a segment's name comes from first: the device work it is, or (for time the device
# lost to the host) what the host was doing meanwhile.
# (the causes of time lost between ranks: the device is in, or waiting for, communication).
_DEVICE_FIRST = {"compute"} | {c.value for c in causes.where(between_ranks=True)}


def _segment_name(names: NameTrack, kind: str, lo_us: float, hi_us: float) -> str | None:
    """The name that covers most of a segment (on the rank's own clock), or ``None``."""
    order = ("device", "host") if kind in _DEVICE_FIRST else ("host", "device")
    for track in order:
        got = names.name_over(track, lo_us, hi_us)
        if got:
            return got
    return None


def _pick_lanes(ranks: Sequence[int], first: Sequence[int | None], limit: int) -> list[int]:
    """At most ``limit`` ranks: the ones in ``first``, then evenly spread over the rest."""
    chosen: list[int] = []
    for r in first:
        if r is not None and r in ranks and r not in chosen:
            chosen.append(r)
    rest = [r for r in ranks if r not in chosen]
    room = max(0, limit - len(chosen))
    if room and rest:
        idx = np.unique(np.linspace(0, len(rest) - 1, num=min(room, len(rest))).round().astype(int))
        chosen += [rest[i] for i in idx]
    return sorted(chosen[:limit])


def _own_us(s: RankSummary, att: Attribution, span: Span, offset: float) -> float:
    """A rank's own time in the shown span: the span less the time it waited for other ranks
    (straggler and pipeline-bubble waits). In a synchronous job every rank's step lasts as
    long; the slowest rank is the one whose own work takes longest."""
    lo, hi = span[0] + offset, span[1] + offset  # back on the rank's own clock
    waited = sum(
        iv.total(iv.clip(iv.normalize(att.intervals.get(c, iv.empty())), lo, hi))
        for c in causes.where(waits_for_ranks=True)
    )
    inside = iv.total(iv.clip(s.window_intervals, lo, hi))
    return inside - waited


def step_timeline(
    summaries: Sequence[RankSummary],
    attributions: Mapping[int, Attribution],
    findings: JobFindings,
    max_lanes: int = MAX_LANES,
    path_of: Callable[[float, float], Sequence[JsonMapping]] | None = None,
) -> JsonObject | None:
    """The report's ``timeline``: one representative step per rank; ``None`` when no rank
    has a window (CPU-only traces). ``path_of(t0_us, t1_us)`` gives the critical path's
    segments ``{rank, start_us, end_us}`` through that span of the common clock."""
    active = [s for s in summaries if s.empty_reason is None and s.window_us > 0 and s.rank in attributions]
    if not active:
        return None
    offsets = _offsets(findings)
    stages = _stages(findings)
    step = _representative_step(active, offsets)

    spans: dict[int, Span] = {}
    for s in active:
        off = offsets.get(s.rank, 0.0)
        if step is not None:
            st = next(x for x in s.steps if x.number == step)
            spans[s.rank] = (st.start_us - off, st.end_us - off)
        else:
            spans[s.rank] = (s.window[0] - off, s.window[1] - off)

    own = {s.rank: _own_us(s, attributions[s.rank], spans[s.rank], offsets.get(s.rank, 0.0)) for s in active}
    slowest = max(own, key=lambda r: (own[r], -r))
    critical = None
    for row in findings.critical_rank_per_step:
        if step is None or row.step == step:
            critical = int(row.rank)
            break
    stage_heads: list[int | None] = []
    for stage in sorted(set(stages.values())):
        stage_heads.append(min(r for r, st in stages.items() if st == stage and r in spans))
    replayed: list[tuple[int, float, float]] = []
    if path_of is not None:
        a0 = min(sp[0] for sp in spans.values())
        a1 = max(sp[1] for sp in spans.values())
        for seg in path_of(a0, a1):
            replayed.append((int(seg["rank"]), float(seg["start_us"]), float(seg["end_us"])))
    on_path = sorted({r for r, _, _ in replayed if r in spans}, key=lambda r: -sum(b - a for q, a, b in replayed if q == r))
    lanes_ranks = _pick_lanes(sorted(spans), [slowest, critical, *on_path[:3], *stage_heads], max_lanes)

    t0 = min(spans[r][0] for r in lanes_ranks)
    t1 = max(spans[r][1] for r in lanes_ranks)
    span_us = max(t1 - t0, 1e-3)
    by_rank = {s.rank: s for s in active}
    lanes = []
    for r in lanes_ranks:
        s = by_rank[r]
        off = offsets.get(r, 0.0)
        lo, hi = spans[r][0] - t0, spans[r][1] - t0
        shift = off + t0  # own clock -> relative common clock: subtract this

        def moved(x: Intervals, shift: float = shift, lo: float = lo, hi: float = hi) -> Intervals:
            return iv.clip((x[0] - shift, x[1] - shift), lo, hi)

        att = attributions[r]
        kinds: dict[str, Intervals] = {"compute": moved(iv.normalize(s.compute))}
        for c in CAUSES:
            kinds[c.value] = moved(iv.normalize(att.intervals.get(c, iv.empty())))
        bin_us = span_us / BINS
        segs = _segments(kinds, lo, hi, bin_us)
        while len(segs) > MAX_SEGMENTS:
            bin_us *= 2.0
            segs = _segments(kinds, lo, hi, bin_us)
        lane: dict[str, Any] = {
            "rank": r,
            "stage": stages.get(r),
            "start_us": round(lo, 1),
            "end_us": round(hi, 1),
            "segments": segs,
        }
        if s.names is not None:
            lane["segment_names"] = [_segment_name(s.names, k, a + shift, b + shift) for k, a, b in segs]
        lanes.append(lane)
    critical_path: list[dict[str, Any]] = []
    source: str | None = None
    if path_of is not None:
        drawn = set(lanes_ranks)
        for r, a, b in replayed:
            lo, hi = max(a - t0, 0.0), min(b - t0, span_us)
            if r in drawn and hi > lo:
                critical_path.append({"rank": r, "start_us": round(lo, 1), "end_us": round(hi, 1)})
        source = "replay" if critical_path else None
    elif critical is not None and critical in lanes_ranks:
        lane = next(x for x in lanes if x["rank"] == critical)
        critical_path.append({"rank": critical, "start_us": lane["start_us"], "end_us": lane["end_us"]})
        source = "critical_rank_per_step"
    return {
        "step": step,
        "span_us": round(span_us, 1),
        "bin_us": round(span_us / BINS, 3),
        "clock_offsets_applied": bool(any(abs(v) > 0 for v in offsets.values())),
        "slowest_rank": slowest,
        "critical_rank": critical,
        "critical_path": critical_path,
        "critical_path_source": source,
        "ranks_total": len(active),
        "lanes": lanes,
    }
