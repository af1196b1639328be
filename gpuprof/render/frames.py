"""A report as pandas DataFrames, one per question (:meth:`gpuprof.Report.to_dataframe`).

Each table has one row per thing asked about and its numbers as columns, with the unit in
the column's name (``_us``, ``_pct``, ``_bytes``, ``_gbps``); unknown values are NaN (or
``None`` in text columns), never 0. The tables read the report only (the JSON document's
keys, see docs/report.md), so a report loaded with :func:`gpuprof.load_report` gives the
same tables as the analysis that made it.

========================  ==========================================================
kind                      one row per
========================  ==========================================================
``ranks``                 rank: window, compute, lost time per cause, mean step
``steps``                 profiled step of each rank: its number, duration, compute
                          and lost time per cause
``kernels``               device kernel (or timer op) of each rank with the most time:
                          calls, total time, share of the rank's window
``collectives``           collective of each rank: message size and time, and the
                          rank's calls, bytes, bus bandwidth, exposed time and wait
``whatifs``               what-if replayed on the job: step before and after, saving,
                          and the recommendation that carries it
``recommendations``       recommendation, ranked: its numbers (saving, per-step saving,
                          range, bound, what-if) beside its title
========================  ==========================================================
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpuprof.errors import GpuprofError
from gpuprof.model.report import CAUSES, Report

if TYPE_CHECKING:
    import pandas as pd

KINDS = ("ranks", "steps", "kernels", "collectives", "whatifs", "recommendations")


def _num(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return math.nan
    f = float(v)
    return f if math.isfinite(f) else math.nan


def _frame(rows: list[dict[str, Any]], columns: list[str], index: str | list[str] | None = None) -> pd.DataFrame:
    import pandas as pd

    df = pd.DataFrame(rows, columns=columns)
    return df.set_index(index) if index is not None else df


def ranks_frame(report: Report) -> pd.DataFrame:
    rows = []
    for r in report.ranks:
        row: dict[str, Any] = {
            "rank": r.rank,
            "device": r.device,
            "steps": r.steps,
            "window_us": r.window_us,
            "compute_us": r.compute_us,
            "compute_pct": 100.0 * r.compute_us / r.window_us if r.window_us > 0 else math.nan,
            "lost_us": r.lost_total_us,
        }
        for c in CAUSES:
            row[f"lost_{c.value}_us"] = float(r.lost_us.get(c, 0.0))
        row["step_mean_us"] = r.window_us / r.steps if r.steps > 0 and r.window_us > 0 else math.nan
        row["step_median_us"] = _median(r.step_times_us)
        row["source"] = r.source
        rows.append(row)
    columns = ["rank", "device", "steps", "window_us", "compute_us", "compute_pct", "lost_us"]
    columns += [f"lost_{c.value}_us" for c in CAUSES] + ["step_mean_us", "step_median_us", "source"]
    return _frame(rows, columns, "rank")


def _median(values: tuple[float, ...]) -> float:
    if not values:
        return math.nan
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def _per_step(values: Any, n: int) -> list[Any] | None:
    """A rank's per-step list when it has one entry per step, else ``None`` (older reports)."""
    return values if isinstance(values, list) and len(values) == n else None


def steps_frame(report: Report) -> pd.DataFrame:
    rows = []
    causes = [c.value for c in CAUSES]
    for r in report.ranks:
        n = len(r.step_times_us)
        nums = _per_step(r.extra.get("step_numbers"), n)
        compute = _per_step(r.extra.get("step_compute_us"), n)
        by_cause = r.extra.get("step_lost_us")
        lost = {c: _per_step(by_cause.get(c), n) for c in causes} if isinstance(by_cause, Mapping) else {}
        for i, us in enumerate(r.step_times_us):
            row = {"rank": r.rank, "step": nums[i] if nums else i + 1, "duration_us": float(us)}
            row["compute_us"] = _num(compute[i]) if compute else math.nan
            for c in causes:
                values = lost.get(c)
                row[f"lost_{c}_us"] = _num(values[i]) if values else math.nan
            rows.append(row)
    columns = ["rank", "step", "duration_us", "compute_us", *(f"lost_{c}_us" for c in causes)]
    return _frame(rows, columns, ["rank", "step"])


def kernels_frame(report: Report) -> pd.DataFrame:
    rows = []
    for r in report.ranks:
        for k in r.extra.get("kernels") or []:
            if not isinstance(k, Mapping):
                continue
            total = _num(k.get("total_us"))
            rows.append(
                {
                    "rank": r.rank,
                    "kernel": k.get("name"),
                    "calls": k.get("calls"),
                    "total_us": total,
                    "share_pct": 100.0 * total / r.window_us if r.window_us > 0 else math.nan,
                }
            )
    return _frame(rows, ["rank", "kernel", "calls", "total_us", "share_pct"])


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def collectives_frame(report: Report) -> pd.DataFrame:
    job = report.extra.get("job")
    bandwidth = job.get("collective_bandwidth") if isinstance(job, Mapping) else None
    waits = {r.rank: _num(r.extra.get("straggler_wait_us_per_step")) for r in report.ranks}
    rows = []
    for key, row in (bandwidth or {}).items() if isinstance(bandwidth, Mapping) else ():
        if not isinstance(row, Mapping) or not str(key).lstrip("-").isdigit():
            continue
        rank = int(key)
        names, sizes, times = (_list(row.get(k)) for k in ("names", "sizes_bytes", "duration_us"))
        shared = {
            "rank_calls": row.get("calls"),
            "rank_bytes_per_step": _num(row.get("bytes_per_step")),
            "busbw_gbps": _num(row.get("busbw_gbps")),
            "algbw_gbps": _num(row.get("algbw_gbps")),
            "peak_gbps": _num(row.get("peak_gbps")),
            "exposed_us_per_step": _num(row.get("exposed_us_per_step")),
            "wait_us_per_step": waits.get(rank, math.nan),
        }
        for i, name in enumerate(names or [None]):
            rows.append(
                {
                    "rank": rank,
                    "collective": name,
                    "size_bytes": _num(sizes[i]) if i < len(sizes) else math.nan,
                    "duration_us": _num(times[i]) if i < len(times) else math.nan,
                    **shared,
                }
            )
    columns = ["rank", "collective", "size_bytes", "duration_us", "rank_calls", "rank_bytes_per_step", "busbw_gbps",
               "algbw_gbps", "peak_gbps", "exposed_us_per_step", "wait_us_per_step"]  # fmt: skip
    return _frame(rows, columns)


def whatifs_frame(report: Report) -> pd.DataFrame:
    job = report.extra.get("job")
    w = job.get("whatif") if isinstance(job, Mapping) else None
    rows = []
    if isinstance(w, Mapping):
        before = _num(w.get("measured_step_us"))
        got_savings, got_steps = w.get("savings_pct"), w.get("step_us")
        savings: Mapping[str, Any] = got_savings if isinstance(got_savings, Mapping) else {}
        steps: Mapping[str, Any] = got_steps if isinstance(got_steps, Mapping) else {}
        carried = {r.whatif: i for i, r in enumerate(report.recommendations, 1) if r.whatif}
        for name in sorted(savings, key=lambda k: -_num(savings.get(k)) if math.isfinite(_num(savings.get(k))) else 0.0):
            pct = _num(savings.get(name))
            after = _num(steps.get(name))
            if math.isnan(after) and math.isfinite(before) and math.isfinite(pct):
                after = before * (1.0 - pct / 100.0)
            rows.append(
                {
                    "whatif": name,
                    "step_before_us": before,
                    "step_after_us": after,
                    "savings_pct": pct,
                    "recommendation": carried.get(name),
                }
            )
    df = _frame(rows, ["whatif", "step_before_us", "step_after_us", "savings_pct", "recommendation"], "whatif")
    df["recommendation"] = df["recommendation"].astype("Int64")  # its place in the ranking; <NA>: none carries it
    return df


def recommendations_frame(report: Report) -> pd.DataFrame:
    rows = []
    for i, r in enumerate(report.recommendations, 1):
        rows.append(
            {
                "rank_order": i,
                "id": r.id,
                "category": r.category.value,
                "title": r.title,
                "estimated_savings_pct": r.estimated_savings_pct,
                "saved_us_per_step": math.nan if r.saved_us_per_step is None else r.saved_us_per_step,
                "savings_low_pct": math.nan if r.savings_low_pct is None else r.savings_low_pct,
                "savings_high_pct": math.nan if r.savings_high_pct is None else r.savings_high_pct,
                "savings_bound": r.savings_bound,
                "whatif": r.whatif,
                "ranks": list(r.ranks),
                "caveats": list(r.caveats),
                "facts": dict(r.facts),
            }
        )
    columns = ["rank_order", "id", "category", "title", "estimated_savings_pct", "saved_us_per_step", "savings_low_pct",
               "savings_high_pct", "savings_bound", "whatif", "ranks", "caveats", "facts"]  # fmt: skip
    return _frame(rows, columns, "rank_order")


_BUILDERS = {
    "ranks": ranks_frame,
    "steps": steps_frame,
    "kernels": kernels_frame,
    "collectives": collectives_frame,
    "whatifs": whatifs_frame,
    "recommendations": recommendations_frame,
}


def frame(report: Report, kind: str) -> pd.DataFrame:
    """The DataFrame ``kind`` (one of :data:`KINDS`) of ``report``."""
    from gpuprof.util.suggest import did_you_mean, match_name

    found = match_name(kind, _BUILDERS) if isinstance(kind, str) else None
    if found is None:
        raise GpuprofError(f"unknown table {kind!r}{did_you_mean(str(kind), _BUILDERS)}; choose one of: {', '.join(KINDS)}")
    return _BUILDERS[found](report)
