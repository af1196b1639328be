"""The phases of a run -- training, evaluation, checkpoints, idle time; rollout and update in
RL post-training -- from the cheap signals recorded between windows: the step clock and the
NVML samples. Pure: times and tables in, :class:`Phases` out.

Rules, in order (times are seconds from the run's start):

1. **Steps and pauses.** With a step clock, the run is split at every gap between two
   consecutive optimizer steps of the job (its lead process) longer than
   :data:`PAUSE_FACTOR` x the median step time and at least :data:`MIN_PHASE_S`: those gaps
   are *pauses*, the stretches between them *stepping*. Before the first step is
   ``startup``, after the last ``shutdown`` (each when at least :data:`MIN_PHASE_S`).
   Without a step clock (no torch hooks), the NVML samples alone split the run into *busy*
   and *idle* stretches (the job's GPUs at :data:`BUSY_UTIL_PCT` or more, on average), each
   at least :data:`MIN_PHASE_S` (shorter ones join the stretch before).
2. **A pause's kind**, from the samples inside it: GPUs busy on average
   (>= :data:`BUSY_UTIL_PCT`) without an optimizer step -> ``eval`` (forward passes only:
   evaluation, or generation); otherwise a device-to-host PCIe rate of at least
   :data:`CHECKPOINT_TX_BYTES_PER_S` at some poll -> ``checkpoint`` (weights copied out);
   otherwise ``idle``. Without samples a pause is ``idle``. Stepping stretches are ``training``.
3. **RL post-training.** When at least :data:`MIN_CYCLES` pauses (or idle stretches)
   alternate with stepping (busy) stretches, take at least :data:`RL_PAUSE_SHARE_PCT` of the
   run between startup and shutdown, and start at near-regular intervals (coefficient of
   variation of their start-to-start gaps at most :data:`MAX_CYCLE_CV`), the run is RL
   post-training: the pauses are ``rollout`` (generation: on these GPUs when they are busy,
   elsewhere when they idle) and the stepping stretches ``update``. Periodic evaluation is
   told apart by its share: it rarely takes a quarter of a run.

Per phase: its optimizer steps, the GPUs' mean utilization, the **idle share** (the share of
its polls at which every GPU with a value read below
:data:`gpuprof.accounting.samples.IDLE_UTIL_PCT`, i.e. no GPU was working), and memory (the
largest GPU's, mean and peak). Per kind: the same over all its phases, and its share of the
run.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from gpuprof.accounting.samples import IDLE_UTIL_PCT

if TYPE_CHECKING:
    import pandas as pd

MIN_PHASE_S = 2.0
PAUSE_FACTOR = 5.0
BUSY_UTIL_PCT = 30.0
CHECKPOINT_TX_BYTES_PER_S = 500e6
MIN_CYCLES = 3
RL_PAUSE_SHARE_PCT = 25.0
MAX_CYCLE_CV = 0.5
KINDS = ("startup", "training", "eval", "checkpoint", "idle", "rollout", "update", "shutdown")


@dataclass(frozen=True)
class Phase:
    kind: str  # one of KINDS
    start_s: float
    end_s: float
    first_step: int | None = None
    last_step: int | None = None
    steps: int = 0
    util_mean_pct: float | None = None
    idle_pct: float | None = None
    mem_mean_bytes: float | None = None
    mem_peak_bytes: float | None = None

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    def to_dict(self) -> dict[str, Any]:
        def r(v: float | None, d: int = 3) -> float | None:
            return None if v is None else round(v, d)

        return {"kind": self.kind, "start_s": r(self.start_s), "end_s": r(self.end_s), "duration_s": r(self.duration_s),
                "first_step": self.first_step, "last_step": self.last_step, "steps": self.steps,
                "util_mean_pct": r(self.util_mean_pct, 2), "idle_pct": r(self.idle_pct, 2),
                "mem_mean_bytes": None if self.mem_mean_bytes is None else int(self.mem_mean_bytes),
                "mem_peak_bytes": None if self.mem_peak_bytes is None else int(self.mem_peak_bytes)}


@dataclass(frozen=True)
class Phases:
    phases: tuple[Phase, ...]
    rl: bool  # RL post-training: rollout and update
    source: str  # "steps+nvml", "steps" or "nvml"
    run_s: float
    by_kind: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "rl_post_training": self.rl, "run_s": round(self.run_s, 3),
                "segments": [p.to_dict() for p in self.phases], "by_kind": self.by_kind}


@dataclass(frozen=True)
class _Polls:
    """The samples as one row per poll: mean utilization over GPUs, all idle, memory, PCIe tx."""

    t: np.ndarray
    util: np.ndarray  # NaN: no GPU had a value
    idle: np.ndarray  # bool; only meaningful where util is known
    mem: np.ndarray  # the largest GPU's memory used, NaN unknown
    tx: np.ndarray  # the largest device-to-host rate, NaN unknown


def _polls(samples: pd.DataFrame | None, t0: float) -> _Polls | None:
    if samples is None or not len(samples) or "time_unix_s" not in samples:
        return None
    live = samples[~samples["lost"].astype(bool)] if "lost" in samples else samples
    if not len(live):
        return None
    g = live.groupby("time_unix_s", sort=True)
    util = g["util_gpu_pct"].mean() if "util_gpu_pct" in live else None
    if util is None:
        return None
    idle = g["util_gpu_pct"].max() < IDLE_UTIL_PCT
    mem = g["mem_used_bytes"].max() if "mem_used_bytes" in live else util * np.nan
    tx = g["pcie_tx_bytes_per_s"].max() if "pcie_tx_bytes_per_s" in live else util * np.nan
    return _Polls(t=util.index.to_numpy(dtype=np.float64) - t0, util=util.to_numpy(dtype=np.float64),
                  idle=idle.to_numpy(dtype=bool), mem=mem.to_numpy(dtype=np.float64), tx=tx.to_numpy(dtype=np.float64))


def _figures(polls: _Polls | None, a: float, b: float) -> dict[str, float | None]:
    """A stretch's samples: each poll stands for the interval that follows it."""
    out: dict[str, float | None] = {"util": None, "idle": None, "mem": None, "peak": None, "tx": None}
    if polls is None:
        return out
    m = (polls.t >= a) & (polls.t < b)
    known = m & ~np.isnan(polls.util)
    if known.any():
        out["util"] = float(polls.util[known].mean())
        out["idle"] = 100.0 * float(polls.idle[known].mean())
    mem = polls.mem[m & ~np.isnan(polls.mem)]
    if len(mem):
        out["mem"], out["peak"] = float(mem.mean()), float(mem.max())
    tx = polls.tx[m & ~np.isnan(polls.tx)]
    if len(tx):
        out["tx"] = float(tx.max())
    return out


def _stretches_from_steps(ends: np.ndarray, steps: np.ndarray, run_end: float) -> list[tuple[str, float, float, int | None, int | None]]:
    """(kind, start, end, first step, last step): stepping, pause, startup, shutdown."""
    out: list[tuple[str, float, float, int | None, int | None]] = []
    gaps = np.diff(ends)
    median = float(np.median(gaps)) if len(gaps) else 0.0
    limit = max(PAUSE_FACTOR * median, MIN_PHASE_S)
    first_start = max(0.0, float(ends[0]) - median)
    if first_start >= MIN_PHASE_S:
        out.append(("startup", 0.0, first_start, None, None))
    else:
        first_start = 0.0  # too short to be a phase: part of the first stretch
    a, a_step = first_start, int(steps[0])
    for i, g in enumerate(gaps):
        if g < limit:
            continue
        out.append(("stepping", a, float(ends[i]), a_step, int(steps[i])))
        out.append(("pause", float(ends[i]), float(ends[i + 1]) - median, None, None))
        a, a_step = float(ends[i + 1]) - median, int(steps[i + 1])
    if run_end - float(ends[-1]) >= MIN_PHASE_S:
        out.append(("stepping", a, float(ends[-1]), a_step, int(steps[-1])))
        out.append(("shutdown", float(ends[-1]), run_end, None, None))
    else:  # too short to be a phase: part of the last stretch
        out.append(("stepping", a, max(run_end, float(ends[-1])), a_step, int(steps[-1])))
    return out


def _stretches_from_samples(polls: _Polls, run_end: float) -> list[tuple[str, float, float, int | None, int | None]]:
    busy = np.where(np.isnan(polls.util), False, polls.util >= BUSY_UTIL_PCT)
    runs: list[list[Any]] = []
    for i, b in enumerate(busy):
        t = float(polls.t[i])
        if runs and runs[-1][0] == bool(b):
            continue
        if runs:
            runs[-1][2] = t
        runs.append([bool(b), t, t])
    if not runs:
        return []
    runs[-1][2] = run_end
    merged: list[list[Any]] = []
    for r in runs:
        if merged and (r[2] - r[1] < MIN_PHASE_S or merged[-1][0] == r[0]):
            merged[-1][2] = r[2]  # too short to be a phase: part of the stretch before
        else:
            merged.append(r)
    out: list[tuple[str, float, float, int | None, int | None]] = []
    for i, (b, a, e) in enumerate(merged):
        kind = "stepping" if b else ("startup" if i == 0 else "shutdown" if i == len(merged) - 1 else "pause")
        out.append((kind, a, e, None, None))
    return out


def _is_cyclic(pauses: Sequence[tuple[float, float]], span_s: float) -> bool:
    if len(pauses) < MIN_CYCLES or span_s <= 0:
        return False
    share = 100.0 * sum(e - a for a, e in pauses) / span_s
    starts = [a for a, _ in pauses]
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    if share < RL_PAUSE_SHARE_PCT or not gaps:
        return False
    mean = statistics.fmean(gaps)
    cv = statistics.pstdev(gaps) / mean if mean > 0 else math.inf
    return cv <= MAX_CYCLE_CV


def detect_phases(
    samples: pd.DataFrame | None,
    step_ends_unix_s: Sequence[float] | np.ndarray = (),
    steps: Sequence[int] | np.ndarray = (),
    start_unix_s: float | None = None,
    end_unix_s: float | None = None,
) -> Phases | None:
    """The run's phases (see the module docstring). ``step_ends_unix_s`` and ``steps``: the
    job's optimizer steps (the lead process) and when each ended; ``start_unix_s`` /
    ``end_unix_s``: the run's bounds when known (else the first and last signal)."""
    ends = np.asarray(step_ends_unix_s, dtype=np.float64)
    nums = np.asarray(steps, dtype=np.int64)
    times = [float(x) for x in (ends[:1].tolist() + ends[-1:].tolist())]
    if samples is not None and len(samples) and "time_unix_s" in samples:
        times += [float(samples["time_unix_s"].min()), float(samples["time_unix_s"].max())]
    if not times:
        return None
    t0 = start_unix_s if start_unix_s is not None else min(times)
    t_end = (end_unix_s if end_unix_s is not None else max(times)) - t0
    polls = _polls(samples, t0)
    if len(ends) >= 2:
        stretches = _stretches_from_steps(ends - t0, nums, max(t_end, float(ends[-1] - t0)))
        source = "steps+nvml" if polls is not None else "steps"
    elif polls is not None:
        stretches = _stretches_from_samples(polls, t_end)
        source = "nvml"
    else:
        return None
    inner = [(a, e) for k, a, e, _, _ in stretches if k == "pause"]
    body = [s for s in stretches if s[0] not in ("startup", "shutdown")]
    span = (body[-1][2] - body[0][1]) if body else 0.0
    rl = _is_cyclic(inner, span)
    phases: list[Phase] = []
    for kind, a, e, first, last in stretches:
        f = _figures(polls, a, e)
        if kind == "stepping":
            label = "update" if rl else "training"
        elif kind == "pause":
            if rl:
                label = "rollout"
            elif f["util"] is not None and f["util"] >= BUSY_UTIL_PCT:
                label = "eval"
            elif f["tx"] is not None and f["tx"] >= CHECKPOINT_TX_BYTES_PER_S:
                label = "checkpoint"
            else:
                label = "idle"
        else:
            label = kind
        n = (last - first + 1) if first is not None and last is not None else 0
        phases.append(Phase(label, a, e, first, last, n, f["util"], f["idle"], f["mem"], f["peak"]))
    run_s = max(t_end, phases[-1].end_s if phases else 0.0)
    return Phases(tuple(phases), rl, source, run_s, _by_kind(phases, run_s))


def _by_kind(phases: Sequence[Phase], run_s: float) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for kind in KINDS:
        mine = [p for p in phases if p.kind == kind and p.duration_s > 0]
        if not mine:
            continue
        total = sum(p.duration_s for p in mine)
        out[kind] = {"phases": len(mine), "duration_s": round(total, 3),
                     "share_pct": round(100.0 * total / run_s, 2) if run_s > 0 else None,
                     "steps": sum(p.steps for p in mine), "util_mean_pct": _weighted(mine, "util_mean_pct"),
                     "idle_pct": _weighted(mine, "idle_pct")}
    return out


def _weighted(phases: Sequence[Phase], attr: str) -> float | None:
    """A figure of several phases, each weighted by its duration (phases without it left out)."""
    vals = [(getattr(p, attr), p.duration_s) for p in phases if getattr(p, attr) is not None]
    w = sum(d for _, d in vals)
    return round(sum(v * d for v, d in vals) / w, 2) if w > 0 else None


__all__ = ["KINDS", "Phase", "Phases", "detect_phases"]
