"""What the gate compares: one run's step distribution, and what makes two runs comparable.

Pure: a :class:`~gpuprof.model.report.Report` (or a history line) in, a :class:`RunSteps`
out.

The sample unit is **the job's step**: the ranks of one job are not independent samples
(they wait for each other in every collective, so their steps move together), so each
profiled step gives one value, the slowest rank's time for that step (the step the job
waited for). Steps are matched across ranks by their number (``step_numbers``), else by
position. Beside it, the time per step of compute and of each cause is the **mean over
ranks** of that step's time (``step_compute_us`` and ``step_lost_us``), the figure the
report's shares are made of; reports saved before those keys existed carry only totals,
and their :attr:`RunSteps.parts_ms` is ``None``.

A :class:`Fingerprint` says what the run ran on: world size, device models, parallel
layout and kernel mix. :func:`incomparable` compares two of them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from gpuprof.model.report import CAUSES, Cause, RankReport, Report
from gpuprof.render import figures as fg

FloatArray = npt.NDArray[np.float64]
PARTS: tuple[str, ...] = ("compute", *(c.value for c in CAUSES))

# Two runs whose kernel mixes overlap less than this (by kernel family, weighted by calls)
# are not the same job: a model or library change, not a regression to measure.
KERNEL_OVERLAP_MIN = 0.5
KERNEL_FAMILIES_KEPT = 40  # the families with the most calls kept in a fingerprint


@dataclass(frozen=True)
class Fingerprint:
    """What a run ran on. ``None`` / empty: the report does not say (never a mismatch)."""

    world_size: int | None = None
    devices: tuple[str, ...] = ()
    parallel: tuple[tuple[str, int], ...] = ()  # parallel sizes, e.g. (("dp_size", 2), ("pp_size", 4))
    kernels: Mapping[str, float] = field(default_factory=dict)  # kernel family -> share of calls

    def to_dict(self) -> dict[str, Any]:
        return {
            "world_size": self.world_size,
            "devices": list(self.devices),
            "parallel": dict(self.parallel),
            "kernels": {k: round(v, 6) for k, v in self.kernels.items()},
        }

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> Fingerprint:
        ws = data.get("world_size")
        par = data.get("parallel") or {}
        kern = data.get("kernels") or {}
        return Fingerprint(
            world_size=ws if isinstance(ws, int) and not isinstance(ws, bool) else None,
            devices=tuple(sorted(str(d) for d in data.get("devices") or () if isinstance(d, str))),
            parallel=tuple(sorted((str(k), int(v)) for k, v in par.items() if isinstance(v, int) and not isinstance(v, bool))),
            kernels={str(k): float(v) for k, v in kern.items() if isinstance(v, (int, float)) and not isinstance(v, bool)},
        )


@dataclass(frozen=True)
class RunSteps:
    """One run's steps. ``step_ms``: the job's time of each step, in ms. ``parts_ms``: the
    mean over ranks of each step's compute and lost time per cause (keys :data:`PARTS`), in
    ms, parallel to ``step_ms``; ``None`` when the report has no per-step causes.
    ``totals_ms``: the same parts per step from the report's totals (mean over ranks of
    the rank's time / its steps), known even for older reports. ``label`` names the run in
    messages (its inputs, or a history line's commit)."""

    label: str
    step_ms: FloatArray
    parts_ms: Mapping[str, FloatArray] | None
    totals_ms: Mapping[str, float] | None
    fingerprint: Fingerprint


_TEMPLATE = re.compile(r"[<(\[].*$")


def kernel_family(name: str) -> str:
    """A kernel's name without its template and parameter lists (``void cudnn::x<float, 3>(...)``
    -> ``cudnn::x``): the autotuner's choice of template arguments is not a different job."""
    n = name.strip().removeprefix("void ")
    return _TEMPLATE.sub("", n).strip() or name.strip()


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def fingerprint(report: Report) -> Fingerprint:
    """The report's world size (``job.straggler_analysis.world_size`` when the traces say
    it, else its ranks with data), device models, parallel sizes and kernel mix."""
    data_ranks = [r for r in report.ranks if fg.has_data(r)]
    job = report.extra.get("job")
    sa = job.get("straggler_analysis") if isinstance(job, Mapping) else None
    ws = sa.get("world_size") if isinstance(sa, Mapping) else None
    world = ws if isinstance(ws, int) and not isinstance(ws, bool) and ws > 0 else (len(data_ranks) or None)
    sizes: dict[str, int] = {}
    for r in data_ranks:
        par = r.extra.get("parallel")
        if isinstance(par, Mapping):
            for k, v in par.items():
                if str(k).endswith("_size") and isinstance(v, int) and not isinstance(v, bool):
                    sizes[str(k)] = max(v, sizes.get(str(k), 0))
    calls: dict[str, float] = {}
    for r in data_ranks:
        for k in r.extra.get("kernels") or ():
            if isinstance(k, Mapping) and isinstance(k.get("name"), str):
                c = _number(k.get("calls"))
                if c is not None and c > 0:
                    fam = kernel_family(k["name"])
                    calls[fam] = calls.get(fam, 0.0) + c
    total = sum(calls.values())
    top = sorted(calls.items(), key=lambda kv: (-kv[1], kv[0]))[:KERNEL_FAMILIES_KEPT]
    return Fingerprint(
        world_size=world,
        devices=tuple(sorted({r.device for r in data_ranks if r.device})),
        parallel=tuple(sorted(sizes.items())),
        kernels={k: v / total for k, v in top} if total > 0 else {},
    )


def kernel_overlap(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    """The share of kernel calls the two mixes have in common: sum over families of the
    smaller share (1: the same mix, 0: nothing in common)."""
    return float(sum(min(v, b.get(k, 0.0)) for k, v in a.items()))


def _sizes(parallel: tuple[tuple[str, int], ...]) -> str:
    return " x ".join(f"{k.removesuffix('_size')} {v}" for k, v in parallel)


def incomparable(current: Fingerprint, base: Fingerprint, base_label: str = "the baseline") -> str | None:
    """Why ``base`` is not a baseline for ``current`` (``None``: comparable). What either
    side does not say is never a mismatch."""
    if current.world_size and base.world_size and current.world_size != base.world_size:
        return f"{base_label} ran on {base.world_size} rank(s), this run on {current.world_size}"
    if current.devices and base.devices and current.devices != base.devices:
        return f"{base_label} ran on {', '.join(base.devices)}, this run on {', '.join(current.devices)}"
    if current.parallel and base.parallel and current.parallel != base.parallel:
        return f"the parallel layout differs: {base_label} {_sizes(base.parallel)}, this run {_sizes(current.parallel)}"
    if current.kernels and base.kernels:
        overlap = kernel_overlap(current.kernels, base.kernels)
        if overlap < KERNEL_OVERLAP_MIN:
            return (
                f"the kernel mix differs from {base_label}: {100 * overlap:.0f} % of kernel calls (by kernel family) "
                f"match, under the {100 * KERNEL_OVERLAP_MIN:.0f} % that makes the same job"
            )
    return None


def _step_index(ranks: Sequence[RankReport]) -> list[list[int]]:
    """For each rank, the positions of the steps all ranks share: by step number when every
    rank numbers its steps, else the first steps by position."""
    numbers: list[list[int]] = []
    for r in ranks:
        nums = r.extra.get("step_numbers")
        if not (isinstance(nums, list) and len(nums) == len(r.step_times_us) and len(set(map(str, nums))) == len(nums)):
            break
        numbers.append([int(n) if isinstance(n, int) else -1 for n in nums])
    if len(numbers) == len(ranks):
        common = set(numbers[0]).intersection(*numbers[1:])
        if common:
            order = sorted(common)
            return [[nums.index(k) for k in order] for nums in numbers]
    n = min(len(r.step_times_us) for r in ranks)
    return [list(range(n)) for _ in ranks]


def _series(values: Any, n: int) -> FloatArray | None:
    if not isinstance(values, list) or len(values) != n:
        return None
    out = [_number(v) for v in values]
    if any(v is None or v < 0 for v in out):
        return None
    return np.array(out, dtype=np.float64)


def _rank_parts(r: RankReport) -> dict[str, FloatArray] | None:
    n = len(r.step_times_us)
    lost = r.extra.get("step_lost_us")
    if not isinstance(lost, Mapping):
        return None
    out: dict[str, FloatArray] = {}
    for name in PARTS:
        s = _series(r.extra.get("step_compute_us") if name == "compute" else lost.get(name), n)
        if s is None:
            return None
        out[name] = s
    return out


def _part_us(r: RankReport, name: str) -> float:
    return float(r.compute_us) if name == "compute" else float(r.lost_us.get(Cause(name), 0.0))


def _totals(ranks: Sequence[RankReport]) -> dict[str, float] | None:
    per_rank = [r for r in ranks if r.steps > 0]
    if not per_rank:
        return None
    return {name: float(np.mean([_part_us(r, name) / r.steps for r in per_rank])) / 1000.0 for name in PARTS}


def run_steps(report: Report, label: str | None = None) -> RunSteps:
    """The job's steps of ``report`` (module docstring); steps of zero length are left out
    (a step time must be positive to compare ratios)."""
    ranks = [r for r in report.ranks if fg.has_data(r) and r.step_times_us]
    fp = fingerprint(report)
    name = label if label is not None else ", ".join(report.inputs)
    if not ranks:
        return RunSteps(name, np.empty(0), None, None, fp)
    index = _step_index(ranks)
    times = np.array([[r.step_times_us[i] for i in idx] for r, idx in zip(ranks, index)], dtype=np.float64)
    step_us = times.max(axis=0) if times.size else np.empty(0)
    parts_by_rank = [_rank_parts(r) for r in ranks]
    parts: dict[str, FloatArray] | None = None
    if all(p is not None for p in parts_by_rank):
        parts = {
            name: np.mean([p[name][idx] for p, idx in zip(parts_by_rank, index) if p is not None], axis=0) / 1000.0
            for name in PARTS
        }
    keep = step_us > 0
    return RunSteps(
        label=name,
        step_ms=step_us[keep] / 1000.0,
        parts_ms=None if parts is None else {k: v[keep] for k, v in parts.items()},
        totals_ms=_totals(ranks),
        fingerprint=fp,
    )
