"""The figures of a run's NVML samples (``report.extra["samples"]``), for every renderer.

Per-time GPU utilization points for the chart, per-GPU statistics for the table, and the
run-level findings (idle share, throttling, memory pressure, lost GPUs) as sentences.
The samples' layout is owned by the sample analysis and may grow: everything is read
defensively, and what the samples do not say is ``None`` (shown as N/A), never 0.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuprof.model.report import Report
from gpuprof.render.figures import fmt_pct, number


@dataclass(frozen=True)
class UtilPoint:
    """One NVML sample or bin of samples: start time in seconds since the session start, GPU
    index, utilization %, and where the bin ends (``None``: a sample at one instant)."""

    t_s: float
    gpu: str
    util_pct: float | None
    end_s: float | None = None


def utilization_points(report: Report) -> list[UtilPoint]:
    """Per-time GPU utilization points from ``extra["samples"]``, read defensively.

    The sample findings' layout is owned elsewhere and may grow; any list of mappings with a
    time (``t_s``) and a GPU utilization (``gpu_util_pct`` or ``util_pct``) is used. Rows
    without a time are skipped; a missing utilization stays ``None`` (shown as N/A).
    """
    samples = report.extra.get("samples")
    if not isinstance(samples, Mapping):
        return []
    rows: Sequence[Any] = ()
    for key in ("timeline", "utilization", "points"):
        cand = samples.get(key)
        if isinstance(cand, list):
            rows = cand
            break
    out: list[UtilPoint] = []
    for row in rows:
        if not isinstance(row, Mapping):
            continue
        t = number(row.get("t_s"))
        if t is None:
            continue
        util = number(row.get("gpu_util_pct", row.get("util_pct")))
        gpu = row.get("gpu", row.get("index", 0))
        out.append(UtilPoint(t_s=t, gpu=str(gpu), util_pct=util, end_s=number(row.get("end_s"))))
    return out


@dataclass(frozen=True)
class GpuRow:
    """One GPU's NVML figures; every value ``None`` (N/A) when the samples do not say."""

    gpu: str
    samples: int
    mean_pct: float | None
    p90_pct: float | None
    min_pct: float | None
    max_pct: float | None
    mem_peak_pct: float | None
    energy_j: float | None
    lost_at_s: float | None


def gpu_rows(report: Report) -> list[GpuRow]:
    """Per-GPU utilization, every statistic from the same samples: the sample analysis's own
    per-GPU summary (``samples["gpus"]``: mean, p90, min, max over every poll) where it has
    one; otherwise all of them from the timeline points. Never a mix: the timeline holds bin
    means, whose max can be below the p90 of the polls behind them."""
    by_gpu: dict[str, list[UtilPoint]] = {}
    for p in utilization_points(report):
        by_gpu.setdefault(p.gpu, []).append(p)
    summaries: dict[str, Mapping[str, Any]] = {}
    samples = report.extra.get("samples")
    if isinstance(samples, Mapping) and isinstance(samples.get("gpus"), list):
        for g in samples["gpus"]:
            if isinstance(g, Mapping) and g.get("gpu") is not None:
                summaries[str(g.get("gpu"))] = g
    out = []
    for gpu in sorted(set(by_gpu) | set(summaries), key=lambda g: (len(g), g)):
        g = summaries.get(gpu)
        if g is not None:
            count = g.get("samples")
            mean, p90 = number(g.get("mean_util_pct")), number(g.get("p90_util_pct"))
            lo, hi = number(g.get("min_util_pct")), number(g.get("max_util_pct"))
            n = int(count) if isinstance(count, int) else 0
        else:
            vals = sorted(p.util_pct for p in by_gpu.get(gpu, []) if p.util_pct is not None)
            mean = statistics.fmean(vals) if vals else None
            p90 = _quantile(vals, 0.9)
            lo, hi = (vals[0], vals[-1]) if vals else (None, None)
            n = len(by_gpu.get(gpu, []))
        g = g or {}
        out.append(
            GpuRow(
                gpu=gpu,
                samples=n,
                mean_pct=mean,
                p90_pct=p90,
                min_pct=lo,
                max_pct=hi,
                mem_peak_pct=number(g.get("mem_peak_pct")),
                energy_j=number(g.get("energy_j")),
                lost_at_s=number(g.get("lost_at_s")),
            )
        )
    return out


def _quantile(sorted_vals: Sequence[float], q: float) -> float | None:
    """Linear-interpolated quantile (as pandas' default) of sorted values; ``None`` if empty."""
    if not sorted_vals:
        return None
    pos = q * (len(sorted_vals) - 1)
    i = int(math.floor(pos))
    j = min(i + 1, len(sorted_vals) - 1)
    return sorted_vals[i] + (sorted_vals[j] - sorted_vals[i]) * (pos - i)


def sample_notes(report: Report) -> list[str]:
    """Run-level NVML findings as sentences (idle share, throttling, memory pressure, lost GPUs)."""
    samples = report.extra.get("samples")
    if not isinstance(samples, Mapping):
        return []
    notes: list[str] = []
    duration = number(samples.get("duration_s"))
    idle = number(samples.get("idle_pct"))
    if duration is not None:
        notes.append(f"sampled for {duration:,.1f} s; GPUs idle {fmt_pct(idle)} of the run")
    periodic = samples.get("periodic_idle")
    if isinstance(periodic, Mapping) and number(periodic.get("period_s")) is not None:
        notes.append(
            f"idle every {number(periodic.get('period_s')):.1f} s for {fmt_pct(number(periodic.get('duty_cycle_pct')))} "
            "of each period (checkpointing, evaluation or logging?)"
        )
    for t in samples.get("throttling") or []:
        if isinstance(t, Mapping):
            gpus = ", ".join(str(g) for g in t.get("gpus") or [])
            notes.append(
                f"throttled ({t.get('reason')}) on GPU {gpus} in {fmt_pct(number(t.get('busy_samples_pct')))} of busy samples, "
                f"SM clock {fmt_pct(number(t.get('clock_loss_pct')))} lower"
            )
    for m in samples.get("memory_pressure") or []:
        if isinstance(m, Mapping):
            notes.append(
                f"GPU {m.get('gpu')} memory peaked at {fmt_pct(number(m.get('peak_pct')))}, near capacity "
                f"{fmt_pct(number(m.get('time_near_capacity_pct')))} of the time"
            )
    lost = samples.get("lost_gpus")
    if isinstance(lost, list) and lost:
        notes.append("GPU(s) lost during the run: " + ", ".join(str(g) for g in lost))
    return notes
