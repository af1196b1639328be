"""The whole run of a ``gpuprof run`` session: what the report adds to the first window's
analysis for a job that ran long.

* ``step_clock``: every optimizer step's time (:mod:`gpuprof.accounting.stepclock`), as a
  series for the plot, and the consistently slowest rank;
* ``phases``: training, eval, checkpoints, idle; rollout and update in RL post-training
  (:mod:`gpuprof.accounting.runphases`);
* ``windows``: every profiling window -- the first (``traces/``) and the later ones
  (``windows/``) --, why it was taken, which steps it recorded, whether its traces are
  kept, and its diagnosis (:mod:`gpuprof.pipeline.windowdiag`; made here for a window the
  run could not diagnose);
* ``changes``: each shift of the step time over the run, its step, and what changed between
  the window before it and the window after it, in microseconds per step
  ("from step 12,000 the step rose 31 %: dataloader +38 ms/step").

Reads the session (untrusted), calls the analysis; returns plain JSON-ready data.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuprof.accounting import stepclock as sc
from gpuprof.accounting.runphases import detect_phases
from gpuprof.model.report import Report
from gpuprof.pipeline.windowdiag import diagnose, diagnose_window
from gpuprof.record.changepoint import Change
from gpuprof.session.windows import WindowFiles, diagnosis_from_dict, read_window_files
from gpuprof.util import phrases

MAX_CAUSES = 3
CAUSE_SHARE_OF_CHANGE = 0.10  # a cause that moved at least this share of the step's change is named


def _int(v: Any) -> int | None:
    try:
        if v is None or (isinstance(v, float) and math.isnan(v)):  # NaN from a DataFrame column
            return None
        return int(v)
    except (TypeError, ValueError, OverflowError):
        return None


def _hook_rows(session: Any, kind: str) -> list[Mapping[str, Any]]:
    h = session.hook_events
    if h is None or "kind" not in h:
        return []
    return [dict(r) for r in h[h["kind"] == kind].to_dict("records")]


def _window_of(rec: Mapping[str, Any]) -> int:
    return _int(rec.get("window")) or 0


def _steps_of(rec: Mapping[str, Any]) -> tuple[int, int] | None:
    s = rec.get("window_steps")
    if isinstance(s, (list, tuple)) and len(s) == 2 and all(isinstance(x, int) for x in s):
        return int(s[0]), int(s[1])
    return None


def _first_window(session: Any, report: Report | None) -> dict[str, Any] | None:
    starts = [r for r in _hook_rows(session, "profiler_start") if _window_of(r) == 0]
    traces = [r for r in _hook_rows(session, "trace") if _window_of(r) == 0]
    if not starts and not session.trace_paths:
        return None
    steps = next((s for r in traces + starts if (s := _steps_of(r)) is not None), None)
    if steps is None:  # a session of an older gpuprof: the schedule says which steps
        sched = session.meta.get("profile_schedule") or {}
        s0 = _int(starts[0].get("step")) if starts else 1
        if s0 is not None and isinstance(sched, Mapping):
            first = s0 + int(sched.get("wait", 0) or 0) + int(sched.get("warmup", 0) or 0) + 1
            steps = (first, first + max(1, int(sched.get("active", 1) or 1)) - 1)
    root = Path(session.path)
    rel = []
    for p in session.trace_paths:
        try:
            rel.append(str(Path(p).relative_to(root)))
        except ValueError:
            rel.append(str(p))  # the job's own profiler wrote it elsewhere
    diag = _small(diagnose(report, 0)) if report is not None and report.ranks else None
    return {"window": 0, "reason": "first", "detail": "the first window", "start_step": steps[0] if steps else None,
            "last_step": steps[1] if steps else None, "requested_at_step": None, "traces": rel,
            "traces_kept": bool(rel), "status": "recorded" if rel else "unfinished", "diagnosis": diag}


def _later_window(root: Path, w: WindowFiles, started: set[int], missed: set[int], last_step: int | None,
                  diagnose_missing: bool) -> dict[str, Any]:
    req = w.request
    diag = dict(w.diagnosis) if w.diagnosis is not None else None
    if diag is None and w.traces and diagnose_missing:
        diag, _ = diagnose_window(root, w.window)
    if w.traces or (diag is not None and diag.get("ok")):
        status = "recorded"
    elif w.unfinished or w.window in started:
        status = "unfinished"  # a process opened it and never wrote its trace (the run was killed)
    elif w.window in missed:
        status = "missed"
    elif req is not None and (last_step is None or last_step < req.start_step):
        status = "not reached"
    else:
        status = "unfinished"
    if diag is not None and not diag.get("ok", False):
        status = "failed" if status == "recorded" else status
    return {"window": w.window, "reason": req.reason if req else None, "detail": req.detail if req else None,
            "start_step": req.start_step if req else None, "last_step": req.last_step if req else None,
            "requested_at_step": req.requested_at_step if req else None, "traces": list(w.traces),
            "traces_kept": bool(w.traces), "status": status, "diagnosis": _small(diag),
            "problems": list(w.problems)}


def _small(diag: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The diagnosis as the report keeps it: checked key by key (it was read from the
    session), its per-rank rows left in the window's folder."""
    return diagnosis_from_dict(dict(diag)) if diag is not None else None


def _skip_ranges(windows: Sequence[Mapping[str, Any]], warmup: int) -> list[tuple[int, int]]:
    """Steps each window's profiler slowed: its warm-up, its steps and the export after them."""
    out = []
    for w in windows:
        a, b = w.get("start_step"), w.get("last_step")
        if isinstance(a, int) and isinstance(b, int):
            lo = 1 if w["window"] == 0 else a - warmup - 1
            out.append((lo, b + 2))
    return out


def _parts(w: Mapping[str, Any] | None) -> Mapping[str, float] | None:
    diag = w.get("diagnosis") if w is not None else None
    parts = diag.get("breakdown_us_per_step") if isinstance(diag, Mapping) and diag.get("ok") else None
    return parts if isinstance(parts, Mapping) and parts else None


def _change_entry(c: Change, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> dict[str, Any]:
    entry: dict[str, Any] = {**c.to_dict(), "window_before": before["window"] if before else None,
                             "window_after": after["window"] if after else None, "causes": []}
    pa, pb = _parts(after), _parts(before)
    step_change_us = (c.after_s - c.before_s) * 1e6
    head = (f"from step {c.step:,} the step {c.direction} {abs(c.change_pct):.0f} % "
            f"({phrases.duration(c.before_s * 1e6)} to {phrases.duration(c.after_s * 1e6)})")
    if pa is None or pb is None:
        missing = "after" if pa is None else "before"
        entry["text"] = f"{head}; no diagnosed window {missing} it to say why"
        return entry
    sign = 1.0 if step_change_us >= 0 else -1.0
    deltas = sorted(((sign * (float(pa.get(k, 0.0)) - float(pb.get(k, 0.0))), k) for k in set(pa) | set(pb)),
                    reverse=True)
    floor = CAUSE_SHARE_OF_CHANGE * abs(step_change_us)
    diag_after = after.get("diagnosis") if after else None
    crit = diag_after.get("critical_rank") if isinstance(diag_after, Mapping) else None
    for d, k in deltas[:MAX_CAUSES]:
        if d < floor or d <= 0:
            break
        entry["causes"].append({"cause": k, "delta_us_per_step": round(sign * d, 3), "rank": crit})
    if not entry["causes"]:
        entry["text"] = f"{head}; windows {entry['window_before']} and {entry['window_after']} show no cause that moved with it"
        return entry
    words = ", ".join(f"{x['cause']} {'+' if x['delta_us_per_step'] >= 0 else '-'}"
                      f"{phrases.duration(abs(x['delta_us_per_step']))}/step" for x in entry["causes"])
    waiting = diag_after.get("waiting_ranks") if isinstance(diag_after, Mapping) else None
    if isinstance(crit, int) and isinstance(waiting, list) and waiting:
        words += f" on rank {crit}, which {phrases.ranks(waiting)} wait{'s' if len(waiting) == 1 else ''} for (straggler)"
    entry["text"] = f"{head}: {words}"
    return entry


def _around(change: Change, next_step: int | None, windows: Sequence[Mapping[str, Any]]) -> tuple[Any, Any]:
    """The last diagnosed window before the change and the first after it (before the next change)."""
    done = [w for w in windows if _parts(w) is not None and isinstance(w.get("start_step"), int)]
    before = [w for w in done if w["last_step"] < change.step]
    after = [w for w in done if w["start_step"] >= change.step and (next_step is None or w["start_step"] < next_step)]
    return (max(before, key=lambda w: w["last_step"]) if before else None,
            min(after, key=lambda w: w["start_step"]) if after else None)


def run_section(session: Any, report: Report | None, diagnose_missing: bool = True) -> dict[str, Any]:
    """The report keys of the whole run (``step_clock``, ``phases``, ``windows``, ``changes``);
    empty when the session holds nothing of them. ``report``: the first window's analysis."""
    root = Path(session.path)
    clock = sc.step_clock(session.hook_events)
    missed_by = {_window_of(r) for r in _hook_rows(session, "window_missed")}
    started = {_window_of(r) for r in _hook_rows(session, "profiler_start")}
    missed = missed_by - started  # every process that saw it was past its start
    last_step = int(clock.steps[-1]) if clock is not None and len(clock.steps) else None
    windows: list[dict[str, Any]] = []
    first = _first_window(session, report)
    if first is not None:
        windows.append(first)
    for w in read_window_files(root):
        windows.append(_later_window(root, w, started, missed, last_step, diagnose_missing))
    out: dict[str, Any] = {}
    if windows and (len(windows) > 1 or clock is not None):
        out["windows"] = windows
    sched = session.meta.get("profile_schedule") or {}
    warmup = int(sched.get("warmup", 0) or 0) if isinstance(sched, Mapping) else 0
    if clock is not None:
        found = sc.changes(clock, _skip_ranges(windows, warmup))
        entries = []
        for i, c in enumerate(found):
            nxt = found[i + 1].step if i + 1 < len(found) else None
            before, after = _around(c, nxt, windows)
            entries.append(_change_entry(c, before, after))
        # The slowest rank of the run as it is now: since the last change of the step time.
        slow = sc.slowest(clock, first_step=found[-1].step if found else None)
        out["step_clock"] = {"steps": len(clock.steps), "processes": len(clock.ranks),
                             "median_us": None if clock.median_us is None else round(clock.median_us, 3),
                             "series": sc.series(clock), "slowest_rank": slow.to_dict() if slow else None}
        out["changes"] = entries
    lead = max(clock.ranks, key=lambda r: len(r.steps)) if clock is not None else None
    phases = detect_phases(session.samples, lead.end_unix_s if lead is not None else (),
                           lead.steps if lead is not None else (), _num(session.meta.get("start_time_unix_s")),
                           _num(session.meta.get("end_time_unix_s")))
    if phases is not None and phases.phases:
        out["phases"] = phases.to_dict()
    return out


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


__all__ = ["run_section"]
