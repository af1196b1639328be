"""How long a rank spends per step in each training phase: forward, backward, optimizer, data.

The job-level analysis compares these numbers across ranks to say *what* makes a slow rank
slow ("rank 5's backward takes 1.6x the median"). :func:`phase_times` returns per-step
means in microseconds under the keys ``forward``, ``backward``, ``optimizer`` and ``data``,
plus, where the trace marks each microbatch's pass separately, ``forward_calls`` and
``backward_calls`` (mean number of forward / backward passes per step; a pipeline stage
runs one per microbatch and model chunk), and where ``torch.distributed.pipelining``
marks its actions (``PP:1F0``), ``pp_stage`` (the lowest pipeline stage index the rank
runs) and ``pp_chunks`` (how many stages it runs). A phase the trace does not show is left
out (unknown, not 0).

Kineto traces
    A phase is the host time spans of its markers: ``## forward ##``, ``*.forward``
    annotations (``DistributedDataParallel.forward``), Megatron-style ``forward_step`` /
    ``backward_step`` ranges (one per microbatch) and ``Forward <i>`` ranges of
    ``torch.distributed.pipelining`` for forward; ``## backward ##``,
    ``autograd::engine::evaluate_function: ...`` and ``Backward <i>`` for backward;
    ``PP:<stage>F<mb>`` / ``PP:<stage>B|I|W<mb>`` actions of its multi-stage schedules,
    ``Optimizer.step#...``, ``Optimizer.zero_grad#...`` and ``## optimizer ##`` for the
    optimizer. The time of forward, backward and optimizer is *device* time: the summed
    duration of the compute kernels launched while the host was inside the phase (what
    the GPU spent on it, which is what makes a rank late), an optimizer span winning over
    a backward span over a forward span where they nest. When the trace marks backward or
    the optimizer but not forward, compute launched outside every marked phase counts as
    forward. ``data`` is host time spent waiting for input batches (DataLoader ops).

Op-level timelines
    Timer ops name the phase: ``forward-compute``, ``backward-compute``, ``optimizer``
    (and ``optimizer-*``), data timers (``batch-generator``). Their time is the union of
    the ops' spans.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from gpuprof.model import intervals as iv
from gpuprof.model.timeline import Category, Columns, Kind, RankTrace

PHASES: tuple[str, ...] = ("forward", "backward", "optimizer", "data")

# ``PP:<stage><action><microbatch>`` are the actions of torch.distributed.pipelining's
# multi-stage schedules: F forward, B full backward, I / W backward for inputs / weights.
_PP_ACTION = re.compile(r"^PP:(\d+)(F|B|I|W)(\d+)$")
_FORWARD = re.compile(
    r"^## forward ##$|\.forward$|(?:^|[\s:_])Forward\s*\d+|^PP:\d+F\d+$|^forward_step$", re.IGNORECASE
)
_BACKWARD = re.compile(
    r"^## backward ##$|^autograd::engine::evaluate_function|(?:^|[\s:_])Backward\s*\d+|^PP:\d+[BIW]\d+$"
    r"|^backward_step$",
    re.IGNORECASE,
)
_OPTIMIZER = re.compile(r"^Optimizer\.(?:step|zero_grad)#|^## optimizer ##$|^## zero_grad ##$", re.IGNORECASE)
# Markers that stand for one pass (one microbatch) each, for the *_calls counts.
_FORWARD_PASS = re.compile(
    r"^## forward ##$|(?:^|[\s:_])Forward\s*\d+|^PP:\d+F\d+$|^forward_step$", re.IGNORECASE
)
_BACKWARD_PASS = re.compile(
    r"^## backward ##$|(?:^|[\s:_])Backward\s*\d+|^PP:\d+[BI]\d+$|^backward_step$", re.IGNORECASE
)


def _bounds(window: Any) -> tuple[float, float, int]:
    """(start_us, end_us, number of steps) of a Window or a ``(start_us, end_us)`` pair."""
    if hasattr(window, "start_us"):
        steps = len(getattr(window, "steps", ()) or ())
        return float(window.start_us), float(window.end_us), max(steps, 1)
    lo, hi = window
    return float(lo), float(hi), 1


def _inside(times: np.ndarray, spans: iv.Intervals) -> np.ndarray:
    """Which of ``times`` fall inside the normalized interval set ``spans``."""
    s, e = spans
    if s.size == 0 or times.size == 0:
        return np.zeros(times.size, dtype=bool)
    idx = np.searchsorted(s, times, side="right") - 1
    ok = idx >= 0
    idx_c = np.clip(idx, 0, s.size - 1)
    return ok & (times < e[idx_c])


def _names_matching(names: Columns, pattern: re.Pattern[str], rows: np.ndarray | None = None) -> np.ndarray:
    """Mask of the table's rows (or of ``rows``, a mask) whose name matches ``pattern``
    (tested once per distinct name; a row without a name reads "nan")."""
    labels = names.labels("name")
    codes = names.codes("name") if rows is None else names.codes("name")[rows]
    flag = np.fromiter((pattern.search(c) is not None for c in labels), dtype=bool, count=labels.size)
    if not flag.any():
        return np.zeros(codes.size, dtype=bool)
    missing = bool(flag[labels == "nan"].any())
    return np.where(codes >= 0, flag[np.maximum(codes, 0)], missing)


def _timeline_phases(trace: RankTrace, lo: float, hi: float, n_steps: int) -> dict[str, float]:
    dev = trace.device_cols
    timer = dev["kind"] == int(Kind.TIMER)
    rows = timer & (dev["end_us"] > lo) & (dev["start_us"] < hi)
    if not rows.any():
        return {}
    lower = [c.lower() for c in dev.labels("name")]
    codes = dev.codes("name")[rows]

    def by_name(flag: list[bool], missing: bool) -> np.ndarray:
        f = np.asarray(flag, dtype=bool)
        return np.where(codes >= 0, f[np.maximum(codes, 0)] if f.size else False, missing)

    cat = dev["category"][rows]
    compute = cat == int(Category.COMPUTE)
    masks = {
        "forward": by_name(["forward" in c for c in lower], False) & compute,
        "backward": by_name(["backward" in c for c in lower], False) & compute,
        "optimizer": by_name([c.startswith("optimizer") for c in lower], False),
        "data": cat == int(Category.DATALOAD),
    }
    out: dict[str, float] = {}
    s_all = dev["start_us"][rows]
    e_all = dev["end_us"][rows]
    for phase, mask in masks.items():
        if mask.any():
            out[phase] = iv.total(iv.clip(iv.union(s_all[mask], e_all[mask]), lo, hi)) / n_steps
    for phase in ("forward", "backward"):
        if masks[phase].any():
            out[f"{phase}_calls"] = float(masks[phase].sum()) / n_steps
    return out


def _pipeline_stages(labels: Any) -> dict[str, float]:
    """``pp_stage`` (lowest stage index this rank runs) and ``pp_chunks`` (how many stages
    it runs: the virtual stages of an interleaved schedule) from ``PP:`` action ranges
    (``labels``: the names the trace holds)."""
    stages = set()
    for c in labels:
        m = _PP_ACTION.match(str(c))
        if m is not None:
            stages.add(int(m.group(1)))
    if not stages:
        return {}
    return {"pp_stage": float(min(stages)), "pp_chunks": float(len(stages))}


def _kineto_phases(trace: RankTrace, lo: float, hi: float, n_steps: int) -> dict[str, float]:
    host = trace.host_cols
    dev = trace.device_cols
    if len(host) == 0:
        return {}
    host_start = host["start_us"]
    host_end = host["end_us"]
    in_window = (host_end > lo) & (host_start < hi)
    hs = host_start[in_window]
    he = host_end[in_window]
    marked = {
        "forward": _names_matching(host, _FORWARD, in_window),
        "backward": _names_matching(host, _BACKWARD, in_window),
        "optimizer": _names_matching(host, _OPTIMIZER, in_window),
    }
    spans = {p: iv.union(hs[m], he[m]) for p, m in marked.items()}
    out: dict[str, float] = {}

    data = host["category"][in_window] == int(Category.DATALOAD)
    if data.any():
        out["data"] = iv.total(iv.clip(iv.union(hs[data], he[data]), lo, hi)) / n_steps

    for phase, pattern in (("forward_calls", _FORWARD_PASS), ("backward_calls", _BACKWARD_PASS)):
        count = int(_names_matching(host, pattern, in_window).sum())
        if count:
            out[phase] = count / n_steps
    out.update(_pipeline_stages(host.labels("name")))

    if not any(m.any() for m in marked.values()) or len(dev) == 0:
        return out
    # Device time of each phase: compute kernels by the host time they were launched.
    compute = (dev["category"] == int(Category.COMPUTE)) & (dev["correlation"] >= 0)
    k = compute & (dev["end_us"] > lo) & (dev["start_us"] < hi)
    kind = host["kind"]
    host_corr = host["correlation"]
    runtime = ((kind == int(Kind.RUNTIME)) | (kind == int(Kind.DRIVER))) & (host_corr >= 0)
    # The first launch call of each correlation id; NaN for a kernel without one.
    ids, first = np.unique(host_corr[runtime], return_index=True)
    kc = dev["correlation"][k]
    launch = np.full(kc.size, np.nan)
    if ids.size:
        pos = np.minimum(np.searchsorted(ids, kc), ids.size - 1)
        hit = ids[pos] == kc
        launch[hit] = host_start[runtime][first][pos[hit]]
    dur = np.clip(np.minimum(dev["end_us"][k], hi) - np.maximum(dev["start_us"][k], lo), 0.0, None)
    known = ~np.isnan(launch)
    launch, dur = launch[known], dur[known]
    unassigned = np.ones(launch.size, dtype=bool)
    # Most specific first: an optimizer step may run inside a marked forward region of a
    # training loop, backward nodes inside a pipelining "Forward i" range never do.
    for phase in ("optimizer", "backward", "forward"):
        if not marked[phase].any():
            continue
        hit = unassigned & _inside(launch, spans[phase])
        out[phase] = float(dur[hit].sum()) / n_steps
        unassigned &= ~hit
    if not marked["forward"].any() and launch.size:
        out["forward"] = float(dur[unassigned].sum()) / n_steps
    return out


def phase_times(trace: RankTrace, window: Any) -> dict[str, float]:
    """Per-step mean time in microseconds of each phase of ``trace`` inside ``window``.

    ``window`` is a :class:`gpuprof.accounting.window.Window` (its step count divides the
    totals) or a ``(start_us, end_us)`` pair (totals over the window, taken as one step).
    Keys are those of :data:`PHASES` that the trace shows, plus ``forward_calls`` /
    ``backward_calls`` where it marks each pass (see the module docstring).
    """
    lo, hi, n_steps = _bounds(window)
    if hi <= lo:
        return {}
    kinds = trace.device_cols["kind"]
    if trace.holds.op_spans or (kinds.size and (kinds == int(Kind.TIMER)).all()):
        return _timeline_phases(trace, lo, hi, n_steps)
    return _kineto_phases(trace, lo, hi, n_steps)


def phase_ratios(phases: Mapping[str, float], reference: Mapping[str, float]) -> dict[str, float]:
    """``phases[p] / reference[p]`` for the phases both know with a positive reference."""
    return {
        p: float(phases[p]) / float(reference[p])
        for p in PHASES
        if p in phases and p in reference and float(reference[p]) > 0
    }
