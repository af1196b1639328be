"""One profiling window's diagnosis: what its steps spent their time on, per rank and for the
job, and the top causes; made while the job runs, in a process of its own::

    python -m gpuprof.pipeline.windowdiag SESSION N

``gpuprof run`` starts it at the lowest CPU priority (``nice`` 19) once window N's traces
are written; it analyzes them like ``gpuprof analyze`` and writes ``diagnosis.json`` (small,
kept for the whole run) and ``report.json`` (the full report, pruned with the traces) into
the window's folder. Window 0 is the first window (``traces/``), diagnosed by the run's
report rather than here.

**The breakdown of a step** (microseconds per profiled step, per rank; :func:`breakdown`).
With GPU activity: ``compute`` and the eight causes of the report (each rank's window split
exactly, divided by its profiled steps). Without (a CPU-only run): the host's step, split
into ``dataloader`` (waiting for the DataLoader's next batch), ``compute`` (inside torch
operators), ``host`` (outside any operator, collective or DataLoader call: Python code,
sleeps) and the time inside collectives, of which what the rank spends beyond the rank that
spends least is ``straggler`` (waiting for a slower rank) and the rest ``communication``.

**The critical rank** is the one the others wait for: the one with the least ``straggler``
and ``pipeline_bubble`` time per step. Its breakdown is the job's (its causes add up to the
job's step); the ranks that wait at least 10 % of a step for it are named beside it.

**The top causes**: with recommendations, the first three (their saving per step and share);
otherwise the critical rank's largest causes.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuprof.errors import GpuprofError
from gpuprof.model import causes
from gpuprof.model.report import CAUSES, Report
from gpuprof.session.layout import TRACES_DIR
from gpuprof.session.windows import DIAGNOSIS_FILE, WINDOW_REPORT_FILE, window_dir

SCHEMA = "gpuprof.window/1"
WAITING_SHARE = 0.10  # a rank that waits this share of a step for the critical rank is named
TOP = 3
_WAIT_CAUSES = tuple(c.value for c in causes.where(waits_for_ranks=True))


def window_traces(session_dir: Path, window: int) -> Path:
    """Where window ``window``'s traces are (window 0, the first: ``traces/``)."""
    return session_dir / TRACES_DIR if window == 0 else window_dir(session_dir, window) / TRACES_DIR


def _f(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _rank_rows(report: Report) -> tuple[list[dict[str, Any]], bool]:
    """Per rank: its mean profiled step and that step split by cause (see the module docstring)."""
    rows: list[dict[str, Any]] = []
    gpu = [r for r in report.ranks if r.window_us > 0]
    if gpu:
        for r in gpu:
            n = max(1, r.steps)
            parts = {"compute": r.compute_us / n} | {c.value: float(r.lost_us.get(c, 0.0)) / n for c in CAUSES}
            rows.append({"rank": r.rank, "step_us": r.window_us / n, "breakdown_us_per_step": parts})
        return rows, False
    for r in report.ranks:
        h = r.extra.get("host_steps")
        if not isinstance(h, Mapping):
            continue
        step = _f(h.get("step_us"))
        if step is None or step <= 0:
            continue
        data, coll, out = (_f(h.get(k)) or 0.0 for k in ("dataloader_us", "collective_us", "outside_us"))
        compute = max(0.0, step - data - coll - out)
        rows.append({"rank": r.rank, "step_us": step, "breakdown_us_per_step": {
            "compute": compute, "dataloader": data, "host": max(0.0, out), "collective": coll}})
    if rows:
        least = min(row["breakdown_us_per_step"]["collective"] for row in rows)
        for row in rows:
            parts = row["breakdown_us_per_step"]
            coll = parts.pop("collective")
            parts["straggler"] = coll - least
            parts["communication"] = least
    return rows, True


def breakdown(report: Report) -> dict[str, Any]:
    """The window's steps per rank and for the job (the critical rank's); pure."""
    rows, cpu_only = _rank_rows(report)
    if not rows:
        return {"cpu_only": cpu_only, "per_rank": [], "critical_rank": None, "waiting_ranks": [], "step_us": None,
                "breakdown_us_per_step": {}}

    def waited(row: Mapping[str, Any]) -> float:
        return float(sum(row["breakdown_us_per_step"].get(c, 0.0) for c in _WAIT_CAUSES))

    critical = min(rows, key=lambda row: (waited(row), -row["step_us"], row["rank"]))
    step = critical["step_us"]
    waiting = sorted(row["rank"] for row in rows if row is not critical and waited(row) >= WAITING_SHARE * step)
    rounded = [{"rank": row["rank"], "step_us": round(row["step_us"], 3),
                "breakdown_us_per_step": {k: round(v, 3) for k, v in row["breakdown_us_per_step"].items()}}
               for row in rows]
    return {"cpu_only": cpu_only, "per_rank": rounded, "critical_rank": critical["rank"], "waiting_ranks": waiting,
            "step_us": round(step, 3),
            "breakdown_us_per_step": {k: round(v, 3) for k, v in critical["breakdown_us_per_step"].items()}}


def top_causes(report: Report, parts: Mapping[str, float], step_us: float | None) -> list[dict[str, Any]]:
    """The window's top causes: its first recommendations, else the critical rank's largest causes."""
    out: list[dict[str, Any]] = []
    for rec in report.recommendations[:TOP]:
        out.append({"cause": rec.category.value, "title": rec.title, "savings_pct": round(rec.estimated_savings_pct, 2),
                    "saved_us_per_step": None if rec.saved_us_per_step is None else round(rec.saved_us_per_step, 3),
                    "ranks": list(rec.ranks), "us_per_step": parts.get(rec.category.value)})
    if out:
        return out
    lost = sorted(((v, k) for k, v in parts.items() if k != "compute" and v > 0), reverse=True)
    for v, k in lost[:TOP]:
        share = 100.0 * v / step_us if step_us else None
        if share is not None and share < 1.0:
            break
        out.append({"cause": k, "us_per_step": round(v, 3), "pct_of_step": None if share is None else round(share, 2)})
    return out


def diagnose(report: Report, window: int) -> dict[str, Any]:
    """The diagnosis written as ``diagnosis.json``: :func:`breakdown` and :func:`top_causes`."""
    b = breakdown(report)
    profiled = max((r.steps for r in report.ranks), default=0)
    if not profiled:
        profiled = max((int(h.get("profiled_steps") or 0) for r in report.ranks
                        if isinstance(h := r.extra.get("host_steps"), Mapping)), default=0)
    return {"schema": SCHEMA, "window": window, "ok": True, "error": None, "ranks": [r.rank for r in report.ranks],
            "profiled_steps": profiled, **b, "top": top_causes(report, b["breakdown_us_per_step"], b["step_us"])}


def failed(window: int, why: str) -> dict[str, Any]:
    return {"schema": SCHEMA, "window": window, "ok": False, "error": why}


def diagnose_window(session_dir: Path, window: int) -> tuple[dict[str, Any], Report | None]:
    """Analyze window ``window`` of a session: its diagnosis, and its report when it could be made."""
    from gpuprof.pipeline import analyze_paths

    folder = window_traces(session_dir, window)
    try:
        report = analyze_paths([folder])
    except GpuprofError as exc:
        return failed(window, exc.message), None
    return diagnose(report, window), report


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m gpuprof.pipeline.windowdiag SESSION N``: diagnose, write, exit 0 (2 on bad usage)."""
    from gpuprof.render import render
    from gpuprof.session.writer import write_json_atomic
    from gpuprof.util.atomic import write_text_atomic

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or not args[1].isdigit() or int(args[1]) < 1:
        sys.stderr.write("usage: python -m gpuprof.pipeline.windowdiag SESSION N (N >= 1)\n")
        return 2
    session, window = Path(args[0]), int(args[1])
    folder = window_dir(session, window)
    t0 = time.perf_counter()
    try:
        diag, report = diagnose_window(session, window)
        if report is not None:
            write_text_atomic(folder / WINDOW_REPORT_FILE, render(report, "json"))
    except Exception as exc:  # noqa: BLE001  (the diagnosis says why; the run goes on either way)
        diag, report = failed(window, f"internal error: {exc!r}"), None
    diag["seconds"] = round(time.perf_counter() - t0, 3)
    try:
        write_json_atomic(folder / DIAGNOSIS_FILE, diag)
    except OSError as exc:
        sys.stderr.write(f"gpuprof: window {window}: diagnosis not written: {exc.strerror or exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
