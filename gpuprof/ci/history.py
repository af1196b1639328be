"""A history of runs for ``gpuprof check --history``: one JSON line per run, and the
baseline it gives (the last stable segment).

Pure apart from :func:`read_history` and :func:`append_run`, which go through
:mod:`gpuprof.util.appendlog` (append-only, safe under concurrent CI jobs).

A line (schema ``gpuprof.history/1``, ``gpuprof schema history``) holds the run's step
distribution and per-cause times per step, not the report: ``time`` (UTC, ISO 8601),
``commit`` (or null), ``inputs``, ``verdict`` (the gate's verdict on that run, or null),
``step_ms`` (the job's step times), ``parts_ms`` (compute and each cause per step, mean
over ranks, or null), ``totals_ms`` and ``fingerprint`` (world size, devices, parallel
layout, kernel mix).

The baseline for a new run (:func:`baseline_runs`): the runs of the history comparable with
it, cut into stable segments by their change points (:mod:`gpuprof.ci.changepoints`), the
last segment's most recent :data:`MAX_BASELINE_RUNS` runs, leaving out those the gate
called a regression when they ran (a one-off slow run does not move the baseline), unless
that leaves none (a change that has lasted :data:`~gpuprof.ci.changepoints.MIN_RUNS` runs
is the new level).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from gpuprof.ci.changepoints import ChangePoint, change_points, segments
from gpuprof.ci.samples import PARTS, Fingerprint, RunSteps, incomparable
from gpuprof.errors import GpuprofError
from gpuprof.util.appendlog import append_line, read_tail

HISTORY_SCHEMA = "gpuprof.history/1"
DEFAULT_NAME = "gpuprof-history.jsonl"
MAX_BASELINE_RUNS = 20
MAX_STEPS_KEPT = 5000  # per line; a run with more keeps evenly spaced ones


def history_file(path: Path) -> Path:
    """The history file ``--history PATH`` means: ``PATH/gpuprof-history.jsonl`` for a
    folder, else ``PATH`` itself."""
    return path / DEFAULT_NAME if path.is_dir() else path


@dataclass(frozen=True)
class HistoryRun:
    """One line of a history: the run (its steps), and when, what and how it was judged."""

    number: int  # 1-based, in the order of the file's lines
    run: RunSteps
    time: str | None
    commit: str | None
    verdict: str | None

    @property
    def name(self) -> str:
        return f"run {self.number}" + (f" (commit {self.commit[:12]})" if self.commit else "")


@dataclass(frozen=True)
class History:
    path: Path
    runs: tuple[HistoryRun, ...]
    skipped: int  # lines that were not history lines (damaged, or another tool's)


def _r3(values: Any) -> list[float]:
    return [round(float(v), 3) for v in values]


def _thin(values: np.ndarray, keep: np.ndarray | None) -> np.ndarray:
    return values if keep is None else values[keep]


def line_for(run: RunSteps, *, commit: str | None, verdict: str | None, inputs: Sequence[str], now: datetime | None = None) -> str:
    """The JSON line of ``run`` (ASCII, no line break)."""
    keep = None
    if run.step_ms.size > MAX_STEPS_KEPT:
        keep = np.linspace(0, run.step_ms.size - 1, MAX_STEPS_KEPT).round().astype(np.int64)
    when = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
    doc = {
        "schema": HISTORY_SCHEMA,
        "time": when.isoformat(timespec="seconds").replace("+00:00", "Z"),
        "commit": commit,
        "inputs": list(inputs),
        "verdict": verdict,
        "step_ms": _r3(_thin(run.step_ms, keep)),
        "parts_ms": None if run.parts_ms is None else {k: _r3(_thin(v, keep)) for k, v in run.parts_ms.items()},
        "totals_ms": None if run.totals_ms is None else {k: round(v, 3) for k, v in run.totals_ms.items()},
        "fingerprint": run.fingerprint.to_dict(),
    }
    return json.dumps(doc, allow_nan=False, separators=(",", ":"))


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _floats(values: Any, positive: bool) -> np.ndarray | None:
    if not isinstance(values, list):
        return None
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or (positive and v <= 0):
            return None
        out.append(float(v))
    return np.array(out, dtype=np.float64)


def run_from_line(doc: Any, label: str) -> tuple[RunSteps, str | None, str | None, str | None] | None:
    """A history line's run, time, commit and verdict; ``None`` when it is not a valid
    history line (untrusted input: every value is checked)."""
    if not isinstance(doc, dict) or doc.get("schema") != HISTORY_SCHEMA:
        return None
    steps = _floats(doc.get("step_ms"), positive=True)
    if steps is None:
        return None
    parts = None
    raw_parts = doc.get("parts_ms")
    if isinstance(raw_parts, Mapping):
        got = {k: _floats(raw_parts.get(k), positive=False) for k in PARTS}
        if all(v is not None and v.size == steps.size for v in got.values()):
            parts = {k: v for k, v in got.items() if v is not None}
    totals = None
    raw_totals = doc.get("totals_ms")
    if isinstance(raw_totals, Mapping):
        vals = {k: raw_totals.get(k) for k in PARTS}
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in vals.values()):
            totals = {k: float(v) for k, v in vals.items()}  # type: ignore[arg-type]
    fp = doc.get("fingerprint")
    fingerprint = Fingerprint.from_dict(fp) if isinstance(fp, Mapping) else Fingerprint()
    text = lambda key: doc[key] if isinstance(doc.get(key), str) else None
    return RunSteps(label, steps, parts, totals, fingerprint), text("time"), text("commit"), text("verdict")


def read_history(path: Path) -> History:
    """Every valid line of the history at ``path`` (none when it does not exist yet).

    A file none of whose lines is a history line is not a history: a
    :class:`GpuprofError` naming it (exit 2), so that ``--history report.json`` never
    appends to the wrong file."""
    runs: list[HistoryRun] = []
    complete, tail = read_tail(path)
    lines = [ln for ln in complete if ln.strip()]
    skipped = 0
    for ln in lines:
        try:
            doc = json.loads(ln, parse_constant=_no_constants)
        except (ValueError, RecursionError):
            skipped += 1
            continue
        number = len(runs) + 1
        got = run_from_line(doc, f"run {number}")
        if got is None:
            skipped += 1
            continue
        run, time, commit, verdict = got
        runs.append(HistoryRun(number, run, time, commit, verdict))
    if (lines or tail.strip()) and not runs:
        raise GpuprofError(f"is not a gpuprof history (no line of schema {HISTORY_SCHEMA})", path)
    return History(path, tuple(runs), skipped)


def append_run(path: Path, line: str) -> None:
    append_line(path, line)


@dataclass(frozen=True)
class HistoryBaseline:
    """What a history gives a new run: the baseline runs (empty: none comparable yet), the
    change points found over the comparable runs, the runs left out as not comparable, and
    the segment the baseline comes from (run numbers, inclusive)."""

    runs: tuple[HistoryRun, ...]
    comparable: tuple[HistoryRun, ...]
    changes: tuple[ChangePoint, ...]
    left_out: int
    segment: tuple[int, int] | None


def baseline_runs(history: History, current: RunSteps, confidence: float, min_effect_pct: float) -> HistoryBaseline:
    """The baseline for ``current`` (module docstring)."""
    comparable = tuple(h for h in history.runs if h.run.step_ms.size and incomparable(current.fingerprint, h.run.fingerprint) is None)
    left_out = len(history.runs) - len(comparable)
    if not comparable:
        return HistoryBaseline((), (), (), left_out, None)
    medians = [float(np.median(h.run.step_ms)) for h in comparable]
    changes = change_points(medians, confidence=confidence, min_effect_pct=min_effect_pct)
    start, end = segments(len(comparable), changes)[-1]
    last = comparable[start:end][-MAX_BASELINE_RUNS:]
    kept = tuple(h for h in last if h.verdict != "regression") or last
    return HistoryBaseline(kept, comparable, tuple(changes), left_out, (last[0].number, last[-1].number))


def change_phrase(change: ChangePoint, comparable: Sequence[HistoryRun]) -> str:
    """``the step rose 7.0% at run 41 (commit abc123), 100.2 -> 107.3 ms``."""
    run = comparable[change.index]
    word = "rose" if change.change_pct > 0 else "fell"
    return f"the step {word} {abs(change.change_pct):.1f}% at {run.name}, {change.before_ms:.1f} -> {change.after_ms:.1f} ms"
