"""NVML samples in, findings out: utilization over time, idle phases, memory, throttling.

Pure: takes the samples table of :func:`gpuprof.session.read_session` (one row per GPU
per poll, see :data:`gpuprof.session.layout.SAMPLE_COLUMNS`) and returns a frozen
:class:`SampleFindings`. Never prints, never mutates its input. Unknown stays ``None``.

Definitions (all documented here because the advice quotes them):

* A poll is *idle* for the job when every GPU with a utilization value reads below
  :data:`IDLE_UTIL_PCT`; a poll with no utilization value at all is unknown (neither).
  Each poll stands for the interval that follows it.
* An *idle phase* is a run of idle polls lasting at least :data:`MIN_IDLE_PHASE_S`.
  The one touching the first poll is *startup*, the one touching the last is *shutdown*.
* Idle phases are *periodic* when at least :data:`MIN_PERIODIC_PHASES` interior phases
  start at near-regular intervals (coefficient of variation of the start-to-start gaps
  below :data:`MAX_PERIOD_CV`): the signature of RL post-training alternating rollout
  and training, or of periodic evaluation / checkpointing.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pandas is imported by the functions that use it
    import pandas as pd

IDLE_UTIL_PCT = 5.0
MIN_IDLE_PHASE_S = 2.0
MIN_PERIODIC_PHASES = 3
MAX_PERIOD_CV = 0.25
NEAR_CAPACITY_PCT = 95.0
MAX_TIMELINE_BINS = 40

# NVML clock-event reason bits that mean lost speed (GpuIdle, application clocks and sync
# boost are not slowdowns and are left out).
THROTTLE_REASONS: dict[int, str] = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x200: "board_limit",
}


@dataclass(frozen=True)
class GpuUtilization:
    """One GPU over the whole run. Percentages 0-100; ``None`` = never measured."""

    gpu: int
    uuid: str | None
    samples: int
    mean_util_pct: float | None
    p50_util_pct: float | None
    p90_util_pct: float | None
    idle_samples_pct: float | None
    mem_peak_bytes: int | None
    mem_total_bytes: int | None
    mem_peak_pct: float | None
    energy_j: float | None
    lost_at_s: float | None  # seconds after the first poll; None when never lost
    min_util_pct: float | None = None  # over the same polls as the mean and p90
    max_util_pct: float | None = None


@dataclass(frozen=True)
class UtilBin:
    """Mean GPU utilization of one GPU over ``[start_s, end_s)`` (seconds from the first poll)."""

    gpu: int
    start_s: float
    end_s: float
    util_gpu_pct: float | None


@dataclass(frozen=True)
class IdlePhase:
    start_s: float
    end_s: float
    kind: str  # "startup", "interior" or "shutdown"

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True)
class PeriodicIdle:
    period_s: float  # median start-to-start gap of the periodic phases
    mean_idle_s: float  # mean length of one idle phase
    duty_cycle_pct: float  # idle share of one period
    phases: int
    idle_pct_of_run: float  # the periodic phases' share of the whole run
    includes_startup: bool = False  # the startup idle phase is one of the periods


@dataclass(frozen=True)
class MemoryPressure:
    gpu: int
    peak_pct: float
    time_near_capacity_pct: float  # share of polls at or above NEAR_CAPACITY_PCT


@dataclass(frozen=True)
class ThrottleSeen:
    reason: str
    gpus: tuple[int, ...]
    busy_samples_pct: float  # share of busy polls (all GPUs) with this reason set
    clock_loss_pct: float | None  # SM clock lost while throttled vs unthrottled busy polls


@dataclass(frozen=True)
class SampleFindings:
    start_unix_s: float
    duration_s: float
    interval_s: float
    gpus: tuple[GpuUtilization, ...]
    timeline: tuple[UtilBin, ...]
    idle_phases: tuple[IdlePhase, ...]
    idle_pct: float | None  # share of the run in idle phases (all kinds)
    periodic_idle: PeriodicIdle | None
    memory_pressure: tuple[MemoryPressure, ...]
    throttling: tuple[ThrottleSeen, ...]
    energy_j: float | None
    lost_gpus: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form for the report's ``samples`` key (``timeline`` rows: t_s, gpu, gpu_util_pct)."""
        d: dict[str, Any] = {
            "start_unix_s": self.start_unix_s,
            "duration_s": round(self.duration_s, 3),
            "interval_s": round(self.interval_s, 3),
            "gpus": [asdict(g) for g in self.gpus],
            "timeline": [
                {"t_s": round(b.start_s, 3), "end_s": round(b.end_s, 3), "gpu": b.gpu, "gpu_util_pct": b.util_gpu_pct}
                for b in self.timeline
            ],
            "idle_phases": [
                {"start_s": round(p.start_s, 3), "end_s": round(p.end_s, 3), "kind": p.kind} for p in self.idle_phases
            ],
            "idle_pct": self.idle_pct,
            "periodic_idle": None if self.periodic_idle is None else asdict(self.periodic_idle),
            "memory_pressure": [asdict(m) for m in self.memory_pressure],
            "throttling": [asdict(t) for t in self.throttling],
            "energy_j": self.energy_j,
            "lost_gpus": list(self.lost_gpus),
        }
        return d


def _f(x: Any) -> float | None:
    """A finite float, or None (NaN and missing are unknown)."""
    if x is None:
        return None
    v = float(x)
    return v if math.isfinite(v) else None


def _energy_j(g: pd.DataFrame) -> float | None:
    """From the energy counter (positive deltas, so a counter reset costs one interval);
    else by integrating power over time; else None."""
    e = g["energy_mj"].dropna()
    if len(e) >= 2:
        d = np.diff(e.to_numpy())
        return float(d[d > 0].sum()) / 1000.0
    p = g[["time_unix_s", "power_w"]].dropna()
    if len(p) >= 2:
        t = p["time_unix_s"].to_numpy()
        w = p["power_w"].to_numpy()
        return float(np.sum((w[1:] + w[:-1]) / 2.0 * np.diff(t)))
    return None


def _nice_bin(duration_s: float, interval_s: float) -> float:
    raw = max(duration_s / MAX_TIMELINE_BINS, interval_s)
    # Sub-second bins too, so a short run still draws a line rather than one point.
    for nice in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600):
        if nice >= raw:
            return float(nice)
    return float(math.ceil(raw / 3600.0) * 3600.0)


def _per_gpu(live: pd.DataFrame, samples: pd.DataFrame, t0: float) -> tuple[GpuUtilization, ...]:
    out = []
    for gpu, g in samples.groupby("gpu", sort=True):
        ok = live[live["gpu"] == gpu]
        util = ok["util_gpu_pct"].dropna()
        mem_used = ok["mem_used_bytes"].dropna()
        mem_total = ok["mem_total_bytes"].dropna()
        peak = int(mem_used.max()) if len(mem_used) else None
        total = int(mem_total.max()) if len(mem_total) else None
        lost = g[g["lost"]]
        out.append(
            GpuUtilization(
                gpu=int(str(gpu)),
                uuid=str(g["uuid"].iloc[0]) if g["uuid"].notna().any() else None,
                samples=len(ok),
                mean_util_pct=_f(util.mean()) if len(util) else None,
                p50_util_pct=_f(util.quantile(0.5)) if len(util) else None,
                p90_util_pct=_f(util.quantile(0.9)) if len(util) else None,
                idle_samples_pct=_f((util < IDLE_UTIL_PCT).mean() * 100.0) if len(util) else None,
                mem_peak_bytes=peak,
                mem_total_bytes=total,
                mem_peak_pct=100.0 * peak / total if peak is not None and total else None,
                energy_j=_energy_j(ok),
                lost_at_s=float(lost["time_unix_s"].iloc[0] - t0) if len(lost) else None,
                min_util_pct=_f(util.min()) if len(util) else None,
                max_util_pct=_f(util.max()) if len(util) else None,
            )
        )
    return tuple(out)


def _timeline(live: pd.DataFrame, t0: float, bin_s: float) -> tuple[UtilBin, ...]:
    df = live[["gpu", "time_unix_s", "util_gpu_pct"]].copy()
    df["bin"] = ((df["time_unix_s"] - t0) // bin_s).astype("int64")
    means = df.groupby(["gpu", "bin"], sort=True)["util_gpu_pct"].mean()
    return tuple(
        UtilBin(gpu=int(gpu), start_s=b * bin_s, end_s=(b + 1) * bin_s, util_gpu_pct=_f(v))
        for (gpu, b), v in means.items()
    )


def _idle_phases(live: pd.DataFrame, t0: float, t_end: float, interval_s: float) -> tuple[IdlePhase, ...]:
    # Polls of different GPUs may carry slightly different times (another writer, a slow
    # GPU): put them on the poll grid so that one row holds one poll of every GPU.
    df = live[["time_unix_s", "gpu", "util_gpu_pct"]].copy()
    step = interval_s if interval_s > 0 else 1.0
    df["poll"] = ((df["time_unix_s"] - t0) / step).round().astype("int64")
    util = df.pivot_table(index="poll", columns="gpu", values="util_gpu_pct", aggfunc="mean", dropna=False)
    known = util.notna().any(axis=1)
    idle = (util.fillna(-1.0) < IDLE_UTIL_PCT).where(util.notna(), True).all(axis=1) & known
    times = t0 + util.index.to_numpy(dtype=float) * step
    flags = idle.to_numpy()
    phases: list[tuple[float, float]] = []
    start: float | None = None
    for t, is_idle in zip(times, flags):
        if is_idle and start is None:
            start = t
        if not is_idle and start is not None:
            phases.append((start, t))
            start = None
    if start is not None:
        phases.append((start, t_end))
    out = []
    first, last = times[0] if len(times) else t0, t_end
    for s, e in phases:
        if e - s < MIN_IDLE_PHASE_S:
            continue
        kind = "startup" if s <= first else ("shutdown" if e >= last else "interior")
        out.append(IdlePhase(start_s=float(s - t0), end_s=float(e - t0), kind=kind))
    return tuple(out)


def _periodic(phases: tuple[IdlePhase, ...], duration_s: float) -> PeriodicIdle | None:
    interior = [p for p in phases if p.kind == "interior"]
    if len(interior) < MIN_PERIODIC_PHASES:
        return None
    starts = np.array([p.start_s for p in interior])
    gaps = np.diff(starts)
    if len(gaps) < MIN_PERIODIC_PHASES - 1 or gaps.mean() <= 0:
        return None
    if gaps.std() / gaps.mean() > MAX_PERIOD_CV:
        return None
    period = float(np.median(gaps))
    mean_idle = float(np.mean([p.duration_s for p in interior]))
    # A startup phase that looks like one more period (RL jobs often begin with a rollout)
    # belongs to the pattern: same length and one period before the first interior phase.
    startup = [p for p in phases if p.kind == "startup"]
    with_startup = False
    if startup:
        s = startup[0]
        same_length = abs(s.duration_s - mean_idle) <= 0.5 * mean_idle
        one_period_before = abs((interior[0].start_s - s.start_s) - period) <= MAX_PERIOD_CV * period
        if same_length and one_period_before:
            interior = [s] + interior
            with_startup = True
    durations = np.array([p.duration_s for p in interior])
    mean_idle = float(durations.mean())
    return PeriodicIdle(
        period_s=period,
        mean_idle_s=mean_idle,
        duty_cycle_pct=100.0 * mean_idle / period,
        phases=len(interior),
        idle_pct_of_run=100.0 * float(durations.sum()) / duration_s if duration_s > 0 else 0.0,
        includes_startup=with_startup,
    )


def _memory(gpus: tuple[GpuUtilization, ...], live: pd.DataFrame) -> tuple[MemoryPressure, ...]:
    out = []
    for g in gpus:
        if g.mem_peak_pct is None or g.mem_peak_pct < NEAR_CAPACITY_PCT:
            continue
        rows = live[(live["gpu"] == g.gpu)][["mem_used_bytes", "mem_total_bytes"]].dropna()
        share = float((rows["mem_used_bytes"] / rows["mem_total_bytes"] * 100.0 >= NEAR_CAPACITY_PCT).mean() * 100.0)
        out.append(MemoryPressure(gpu=g.gpu, peak_pct=g.mem_peak_pct, time_near_capacity_pct=share))
    return tuple(out)


def _throttling(live: pd.DataFrame) -> tuple[ThrottleSeen, ...]:
    busy = live[(live["util_gpu_pct"] >= IDLE_UTIL_PCT) & live["clock_event_reasons"].notna()]
    if busy.empty:
        return ()
    bits = busy["clock_event_reasons"].astype("int64")
    out = []
    for bit, name in THROTTLE_REASONS.items():
        on = (bits & bit) != 0
        if not on.any():
            continue
        clock_loss: float | None = None
        clocks_on = busy.loc[on, "clock_sm_mhz"].dropna()
        clocks_off = busy.loc[(bits & sum(THROTTLE_REASONS)) == 0, "clock_sm_mhz"].dropna()
        if len(clocks_on) and len(clocks_off) and clocks_off.median() > 0:
            clock_loss = max(0.0, float(1.0 - clocks_on.median() / clocks_off.median()) * 100.0)
        out.append(
            ThrottleSeen(
                reason=name,
                gpus=tuple(sorted(int(g) for g in busy.loc[on, "gpu"].unique())),
                busy_samples_pct=float(on.mean() * 100.0),
                clock_loss_pct=clock_loss,
            )
        )
    return tuple(out)


def summarize_samples(samples: pd.DataFrame) -> SampleFindings | None:
    """Findings of a samples table; ``None`` when it holds no poll at all."""
    if samples is None or samples.empty:
        return None
    df = samples.sort_values(["time_unix_s", "gpu"], kind="stable")
    live = df[~df["lost"].astype(bool)]
    times = np.unique(df["time_unix_s"].to_numpy(dtype=float))
    t0 = float(times[0])
    # The poll interval from each GPU's own series: GPUs read a few ms apart must not look
    # like polls a few ms apart.
    per_gpu_gaps = [np.diff(np.unique(g.to_numpy(dtype=float))) for _, g in df.groupby("gpu")["time_unix_s"]]
    gaps = np.concatenate(per_gpu_gaps) if per_gpu_gaps else np.array([])
    interval_s = float(np.median(gaps)) if len(gaps) else 0.0
    t_end = float(times[-1]) + interval_s
    duration_s = t_end - t0
    gpus = _per_gpu(live, df, t0)
    phases = _idle_phases(live, t0, t_end, interval_s) if not live.empty else ()
    idle_total = sum(p.duration_s for p in phases)
    energies = [g.energy_j for g in gpus if g.energy_j is not None]
    return SampleFindings(
        start_unix_s=t0,
        duration_s=duration_s,
        interval_s=interval_s,
        gpus=gpus,
        timeline=_timeline(live, t0, _nice_bin(duration_s, interval_s)) if not live.empty else (),
        idle_phases=phases,
        idle_pct=100.0 * idle_total / duration_s if duration_s > 0 and live["util_gpu_pct"].notna().any() else None,
        periodic_idle=_periodic(phases, duration_s),
        memory_pressure=_memory(gpus, live),
        throttling=_throttling(live),
        energy_j=float(sum(energies)) if energies else None,
        lost_gpus=tuple(g.gpu for g in gpus if g.lost_at_s is not None),
    )
