"""What ``gpuprof check`` compares a run with: baselines read from files and folders, or a
history's last stable segment; and the checks and notes that come out.

Kept beside :mod:`gpuprof.cli.check` so that the command's module stays its options and
its outputs. Reading and appending the history file happen here (the edge); deciding
happens in :mod:`gpuprof.ci`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuprof.ci import gate
from gpuprof.ci.gate import CheckResult
from gpuprof.ci.history import History, baseline_runs, change_phrase, line_for
from gpuprof.ci.samples import RunSteps, run_steps
from gpuprof.ci.verdict import GateSettings, without_baseline
from gpuprof.ci.verdict_text import verdict_line
from gpuprof.cli.check_config import CheckSettings
from gpuprof.model.report import Report
from gpuprof.readers.limits import ReadLimits
from gpuprof.readers.saved import is_report_file, read_report, report_files

# CI systems' variables naming the commit under test, first found wins.
COMMIT_VARIABLES = ("GITHUB_SHA", "CI_COMMIT_SHA", "BUILDKITE_COMMIT", "CIRCLE_SHA1", "GIT_COMMIT", "BUILD_SOURCEVERSION")


def commit_from_env() -> str | None:
    for name in COMMIT_VARIABLES:
        value = os.environ.get(name, "").strip()
        if value:
            return value[:64]
    return None


def load_baselines(
    paths: Sequence[Path], limits: ReadLimits, analyze: Callable[[list[Path]], Report]
) -> list[tuple[str, Report]]:
    """Each baseline as (label, report): a saved report, every saved report of a folder of
    them (pooled), or traces (a trace, a folder of per-rank traces, a session folder)
    analyzed with ``analyze``."""
    out: list[tuple[str, Report]] = []
    for p in paths:
        if is_report_file(p):
            out.append((str(p), read_report(p, limits)))
        elif p.is_dir() and (reports := report_files(p)):
            out += [(str(r), read_report(r, limits)) for r in reports]
        else:
            out.append((str(p), analyze([p])))
    return out


@dataclass
class GateRun:
    """The checks of one ``gpuprof check``, the notes printed above them, the keys the
    JSON output adds, and the history line to append (when there is a history)."""

    results: list[CheckResult]
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    history_line: str | None = None


def _history_baseline(current: RunSteps, history: History, gs: GateSettings, run: GateRun, used: bool) -> list[RunSteps]:
    """The history's baseline for ``current`` and what the history says (its change points);
    ``used``: the baseline is the history's (no ``--baseline``)."""
    hb = baseline_runs(history, current, gs.confidence, gs.min_effect_pct)
    info: dict[str, Any] = {
        "file": str(history.path),
        "runs": len(history.runs),
        "skipped_lines": history.skipped,
        "not_comparable_runs": hb.left_out,
        "baseline_runs": [h.number for h in hb.runs],
        "segment": None if hb.segment is None else list(hb.segment),
        "change_points": [
            {
                "run": hb.comparable[c.index].number,
                "commit": hb.comparable[c.index].commit,
                "change_pct": round(c.change_pct, 3),
                "before_ms": round(c.before_ms, 3),
                "after_ms": round(c.after_ms, 3),
                "p_value": c.p_value,
            }
            for c in hb.changes
        ],
    }
    run.extra["history"] = info
    if history.skipped:
        run.notes.append(f"{history.skipped} line(s) of {history.path} are not history lines and were left out")
    if hb.left_out:
        run.notes.append(f"{hb.left_out} run(s) of the history are not comparable with this run (another world size, "
                         "device, layout or kernel mix) and were left out")  # fmt: skip
    run.notes += [f"history: {change_phrase(c, hb.comparable)}" for c in hb.changes[-3:]]
    if used and hb.segment is not None:
        a, b = hb.segment
        run.notes.append(
            f"baseline: {len(hb.runs)} run(s) of the history's last stable segment (runs {a}-{b})" if a != b
            else f"baseline: run {a} of the history"
        )  # fmt: skip
    return [RunSteps(h.name, h.run.step_ms, h.run.parts_ms, h.run.totals_ms, h.run.fingerprint) for h in hb.runs]


def run_gate(
    report: Report,
    settings: CheckSettings,
    baselines: Sequence[tuple[str, Report]],
    history: History | None,
    *,
    strict: bool,
    commit: str | None,
) -> GateRun:
    """Thresholds, then the step verdict against the baselines (or the history), then the
    fixed-tolerance rules where they were asked for."""
    gs = GateSettings(
        min_effect_pct=gate_default(settings.min_effect_pct, GateSettings.min_effect_pct),
        confidence_pct=gate_default(settings.confidence_pct, GateSettings.confidence_pct),
        strict=strict,
    )
    run = GateRun(gate.check_thresholds(report, settings.thresholds))
    current = run_steps(report)
    run.extra["inputs"] = list(report.inputs)
    base: list[RunSteps] = []
    if history is not None:
        base = _history_baseline(current, history, gs, run, used=not baselines)
    if baselines:
        base = [run_steps(r, label) for label, r in baselines]
        run.extra["baselines"] = [label for label, _ in baselines]
    step_check: CheckResult | None = None
    if base:
        step_check = gate.check_steps(current, base, gs)
    elif history is not None:
        v = without_baseline(current, "the history has no earlier run comparable with this one", gs)
        step_check = CheckResult("baseline.step", None, gs.min_effect_pct, "%", v.passed, verdict_line(v), v)
    if step_check is not None:
        run.results.append(step_check)
    if baselines:
        first = baselines[0][1]
        if settings.tolerance_pct is not None:
            run.results += gate.check_baseline_shares(report, first, settings.tolerance_pct)
        if settings.step_tolerance_pct is not None:
            run.results += gate.check_baseline_step(report, first, settings.step_tolerance_pct)
        if len(baselines) > 1 and (settings.tolerance_pct is not None or settings.step_tolerance_pct is not None):
            run.notes.append(f"the fixed-tolerance checks compare with the first baseline, {baselines[0][0]}")
        if settings.tolerance_pct is not None:
            run.notes += gate.baseline_notes(report, first)
    elif settings.tolerance_pct is not None or settings.step_tolerance_pct is not None:
        run.notes.append("the fixed-tolerance checks (--tolerance-pct, --step-tolerance-pct) need --baseline: a history keeps step times, not shares")
    if history is not None:
        verdict = step_check.verdict.kind.value if step_check is not None and step_check.verdict is not None else None
        run.history_line = line_for(current, commit=commit, verdict=verdict, inputs=report.inputs)
    return run


def gate_default(value: float | None, default: float) -> float:
    return default if value is None else value
