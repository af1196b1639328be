"""RankTrace -> RankSummary: the window, its compute/lost partition and the local claims.

Steps, in order:

1. match every device event to the host call that launched it
   (:mod:`gpuprof.accounting.launches`);
2. choose the window and device-aligned step bounds (:mod:`gpuprof.accounting.window`);
   when time between steps is left out, the window is the union of the steps;
3. partition the window exactly: ``compute`` = union of COMPUTE device intervals clipped
   to it, ``lost`` = the rest (neither reaches into time left out between steps);
4. run the local rules (:mod:`gpuprof.accounting.rules`), which claim lost time per cause;
   attribution (precedence) happens later, together with the cross-rank claims;
5. measure the facts for the advice (a :class:`~gpuprof.accounting.factrecord.RankFacts`,
   fields documented there), among them what the trace lacks (``trace_lacks``,
   :mod:`gpuprof.accounting.evidence`), and build the
   rank's dependency graph for the job's what-if replays (:mod:`gpuprof.accounting.graph`,
   replayed in :mod:`gpuprof.job.whatifs`);
6. warn where the numbers deserve less trust: a profiler that slowed the host, a filtered
   or sampled trace (:func:`gpuprof.accounting.hostfacts.trust_warnings`), a window under
   :data:`MIN_WINDOW_US` or a single step (:func:`data_warnings`);
7. where the cross-rank helpers exist, build the ``comms`` table
   (``gpuprof.accounting.comms.build_comms``) and the phase times
   (``gpuprof.accounting.phases.phase_times``).

Pure: the trace's tables are only read.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, TypedDict

from gpuprof.accounting.comms import comms_table, empty_comms
from gpuprof.accounting.evidence import lacks_warnings
from gpuprof.accounting.facts import rank_facts
from gpuprof.accounting.graph import build_rank_graph
from gpuprof.accounting.host_steps import HostSteps, host_steps
from gpuprof.accounting.hostfacts import trust_warnings
from gpuprof.accounting.launches import activity_mask, match_launches
from gpuprof.accounting.names import name_track
from gpuprof.accounting.rules import build_context, claims_by_cause, claims_by_rule
from gpuprof.accounting.summary import RankSummary
from gpuprof.accounting.warmup import warmup_warning
from gpuprof.accounting.window import StepSelection, Window, select_window
from gpuprof.model import intervals as iv
from gpuprof.model.notice import said_all
from gpuprof.model.table import Table
from gpuprof.model.timeline import Category, RankTrace, TraceHolds
from gpuprof.util.phrases import ONE_PROFILED_STEP

_ALL_STEPS = StepSelection()


def _optional(module: str, name: str) -> Callable[..., Any] | None:
    """A helper of another analysis module, or ``None`` while that module does not exist."""
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        return None
    fn = getattr(mod, name, None)
    return fn if callable(fn) else None


class _TraceFields(TypedDict):
    rank: int
    source: str
    fmt: str
    device_name: str | None
    device_memory_bytes: int | None
    parallel: dict[str, int]
    world_size: int | None
    process_groups: dict[str, tuple[int, ...]]
    holds: TraceHolds


def _from_trace(trace: RankTrace) -> _TraceFields:
    """The fields of a rank's summary that come straight from its trace (who and what it
    is, and its place in the job), with or without a window to analyze."""
    return _TraceFields(
        rank=trace.rank,
        source=trace.source,
        fmt=trace.fmt,
        device_name=trace.device_name,
        device_memory_bytes=trace.device_memory_bytes,
        parallel=dict(trace.parallel),
        world_size=trace.world_size,
        process_groups={pg.name: tuple(pg.ranks) for pg in trace.process_groups},
        holds=trace.holds,
    )


def summarize(trace: RankTrace, selection: StepSelection = _ALL_STEPS) -> RankSummary:
    """Reduce one rank's trace to its :class:`RankSummary` (see the module docstring)."""
    launches = match_launches(trace)
    window = select_window(trace, selection, launches)
    if window is None:
        return RankSummary(
            **_from_trace(trace),
            window=(0.0, 0.0),
            steps=(),
            compute=iv.empty(),
            lost=iv.empty(),
            claims={},
            comms=empty_comms(),
            warnings=said_all(trace.warnings) + trace.notices,
            empty_reason=empty_reason(trace),
            host_steps=_host_steps(trace),
        )
    lo, hi = window.start_us, window.end_us
    dev = trace.device_cols
    is_compute = activity_mask(dev) & (dev["category"] == int(Category.COMPUTE))
    compute = iv.normalize(iv.clip((dev["start_us"][is_compute], dev["end_us"][is_compute]), lo, hi))
    lost = iv.complement(compute, lo, hi)
    if window.spans is not None:
        # Time between steps is left out: it is neither compute nor lost. (Only host-range
        # windows have gaps, so the launch-based what-ifs, which need correlation ids and
        # hence device-aligned steps, never see one.)
        compute = iv.intersect(compute, window.spans)
        lost = iv.intersect(lost, window.spans)
    ctx = build_context(trace, lo, hi, compute, lost, launches, window.spans)
    by_rule = claims_by_rule(ctx)
    claims = claims_by_cause(by_rule)
    facts = rank_facts(
        ctx,
        window.steps,
        by_rule,
        device_aligned_steps=window.device_aligned,
        step_marker=trace.step_marker if window.steps else None,
        window_gaps_us=(hi - lo) - window.duration_us,
    )
    warnings = said_all(trace.warnings) + trace.notices + said_all((window.note,) if window.note else ())
    warnings += said_all(warmup_warning(facts.warmup, window.steps))
    warnings += trust_warnings(facts.trust) + said_all(lacks_warnings(facts.trace_lacks))
    warnings += said_all(data_warnings(window.duration_us, len(window.steps)))
    comms = _comms(trace, lo, hi)
    graph = build_rank_graph(ctx, window.steps, comms, stitched=window.spans is not None)
    return RankSummary(
        **_from_trace(trace),
        window=(lo, hi),
        window_iv=window.spans,
        steps=window.steps,
        compute=compute,
        lost=lost,
        claims=claims,
        comms=comms,
        phases_us=_phases(trace, window),
        facts=facts,
        warnings=warnings,
        graph=graph,
        names=name_track(trace, lo, hi),
    )


def _host_steps(trace: RankTrace) -> HostSteps | None:
    """What a CPU-only run still measured: its steps on the host (``None``: no step marked)."""
    h = host_steps(trace)
    return h if h.steps else None


def empty_reason(trace: RankTrace) -> str:
    """Why a rank without device activity has nothing to analyze. A cut-off file may just
    have lost its GPU events (older Kineto versions write them last), so it is not called
    CPU-only."""
    if trace.truncated:
        return "no GPU events before the trace is cut off (they may be missing; not known to be CPU-only)"
    return "no GPU activity in this trace (CPU-only?)"


# Below this window no savings are estimated (a few kernels say nothing about a job), and
# with fewer steps than this the step's variation is unknown: low confidence.
MIN_WINDOW_US = 1000.0
MIN_STEPS = 2


def data_warnings(window_us: float, steps: int) -> tuple[str, ...]:
    """Low-confidence warnings for a window too short or with too few steps."""
    if window_us < MIN_WINDOW_US:
        return (
            (
                f"the analysed window is only {window_us:.0f} µs (under {MIN_WINDOW_US / 1000:.0f} ms): far "
                "too little to judge a job; no savings are estimated from it"
            ),
        )
    if steps == 1:
        return (ONE_PROFILED_STEP,)
    return ()


def _comms(trace: RankTrace, lo: float, hi: float) -> Table:
    return comms_table(trace, lo, hi)


def _phases(trace: RankTrace, window: Window) -> dict[str, float]:
    fn = _optional("gpuprof.accounting.phases", "phase_times")
    return dict(fn(trace, window)) if fn is not None else {}
