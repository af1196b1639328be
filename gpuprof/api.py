"""gpuprof's Python API: what ``gpuprof analyze`` and ``gpuprof check`` do, as functions.

Use it through the package (``import gpuprof``), whose ``__all__`` lists what is public::

    import gpuprof

    report = gpuprof.analyze("traces/", steps="10:12", jobs=4)
    print(report)                             # the text report
    report.recommendations[0].title           # what to change first
    df = report.to_dataframe()                # one row per rank (pandas)
    report.to_json()                          # the gpuprof.report/1 document

    checks = gpuprof.check(report, baseline="ci/baseline.json", max_lost_pct={"dataloader": 10})
    assert checks.passed, [c.message for c in checks.failed]
    checks.verdict.kind, checks.verdict.low_pct    # the step's verdict and its interval

    d = gpuprof.diff("base.json", report)     # what moved; d.verdict is the same verdict

Problems with the inputs (a missing file, a damaged trace, a malformed saved report) raise
:class:`gpuprof.GpuprofError` naming the file, as the command line's exit-2 errors do; bad
arguments raise ``ValueError`` / ``TypeError``. Nothing is printed unless ``progress`` is
given.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Union

from gpuprof.errors import GpuprofError
from gpuprof.model.report import CAUSES, Cause, Report

if TYPE_CHECKING:
    from gpuprof.accounting.window import StepSelection
    from gpuprof.ci.diff import ReportDiff
    from gpuprof.ci.gate import CheckResults
    from gpuprof.ci.verdict import GateSettings

PathLike = Union[str, "os.PathLike[str]"]
Steps = Union[str, int, "tuple[int | None, int | None]", None]

__all__ = ["analyze", "check", "diff", "load_report"]


def _as_paths(paths: PathLike | Sequence[PathLike]) -> list[Path]:
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if not isinstance(paths, Sequence) or isinstance(paths, bytes):
        raise TypeError(f"paths: expected a path or a list of paths, got {type(paths).__name__}")
    if any(isinstance(p, str) and not p.strip() for p in paths):
        # Path("") is the current folder: an unset variable would analyze whatever is there.
        raise ValueError("paths: an empty path was given; name a trace file or folder")
    out = [Path(p) for p in paths]
    if not out:
        raise ValueError("paths: give at least one trace, folder, session folder or saved report")
    return out


def _steps(steps: Steps) -> StepSelection:
    from gpuprof.accounting.window import StepSelection

    if steps is None:
        return StepSelection()
    if isinstance(steps, bool):
        raise TypeError("steps: expected 'N', 'N:M', 'N:', ':M', an int or a (first, last) tuple")
    if isinstance(steps, int):
        return StepSelection(steps, steps)
    if isinstance(steps, str):
        try:
            return StepSelection.parse(steps)
        except GpuprofError as exc:
            raise ValueError(exc.message.replace("--steps", "steps")) from None
    if isinstance(steps, tuple) and len(steps) == 2 and all(s is None or (isinstance(s, int) and not isinstance(s, bool)) for s in steps):
        first, last = steps
        if first is not None and last is not None and last < first:
            raise ValueError(f"steps: last step {last} is before first step {first}")
        return StepSelection(first, last)
    raise TypeError(f"steps: expected 'N', 'N:M', 'N:', ':M', an int or a (first, last) tuple, got {steps!r}")


def analyze(
    paths: PathLike | Sequence[PathLike],
    *,
    steps: Steps = None,
    jobs: int = 1,
    scheduler: str | None = None,
    max_input_gb: float | None = None,
    progress: Callable[[str], None] | None = None,
    force: bool = False,
) -> Report:
    """Analyze saved traces into a :class:`~gpuprof.Report`, as ``gpuprof analyze`` does.

    ``paths``: a Kineto trace (``.json``/``.json.gz``), a folder of per-rank traces, a
    ``gpuprof run`` session folder, an op-level Chrome timeline, or a list of these; a
    report saved with ``--format json`` (given alone) is read back instead (validated).
    ``steps``: which steps to analyze, by step number: ``"10:12"``, ``"10:"``, ``":12"``,
    ``10`` or ``(10, 12)`` (inclusive); default all complete steps. ``jobs``: ranks read
    in parallel processes. ``scheduler``: a Dask scheduler address (needs the ``dask``
    extra). ``max_input_gb``: refuse a trace whose decompressed JSON is larger (default:
    the command line's, sized for real traces). ``progress``: called with one line per
    step of the work (e.g. ``print``). ``force``: analyze the inputs as one job even when
    they look like traces of different jobs (world size, GPU model, trace format or
    communication disagree), which otherwise raises :class:`gpuprof.GpuprofError`; the
    report then carries a warning saying what differs.
    """
    from gpuprof.pipeline import AnalyzeOptions
    from gpuprof.pipeline.inputs import report_of, route

    path_list = _as_paths(paths)
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs: expected a whole number of processes >= 1, got {jobs!r}")
    selection = _steps(steps)
    if max_input_gb is not None:
        from gpuprof.readers.limits import MAX_INPUT_GB

        if _pct_arg("max_input_gb", max_input_gb, upper=MAX_INPUT_GB) == 0:
            raise ValueError("max_input_gb: 0 would refuse every trace")
    inp = route(path_list)
    if inp.saved is not None:
        if steps is not None or jobs != 1 or scheduler or force:
            raise ValueError("steps, jobs, scheduler and force apply to traces, not to a saved report")
        return report_of(inp, AnalyzeOptions(max_input_gb=max_input_gb))  # bounded as the command line's

    if not isinstance(force, bool):
        raise TypeError(f"force: expected True or False, got {force!r}")
    options = AnalyzeOptions(steps=selection, jobs=jobs, scheduler=scheduler, max_input_gb=max_input_gb, force=force)

    def told(message: str, done: int | None = None, total: int | None = None, ranks: int | None = None) -> None:
        if progress is not None:
            progress(message)  # the pipeline's counts are for progress bars; a user gets the line

    # The same report as `gpuprof analyze PATH...` (a session's: samples alone when no trace
    # was written).
    return report_of(inp, options, progress=told)


def load_report(path: PathLike) -> Report:
    """Read a report saved with ``gpuprof analyze --format json`` (``.json`` or ``.json.gz``).

    The document is checked against the report's JSON Schema: a malformed one raises
    :class:`~gpuprof.GpuprofError` naming the file and the first problem's JSON path.
    """
    from gpuprof.readers.saved import read_report

    return read_report(Path(path))


def _pct_arg(name: str, value: object, upper: float | None = 100.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a number, got {type(value).__name__}")
    try:
        v = float(value)
    except OverflowError:  # an integer beyond any float (10**400)
        v = math.inf
    if not math.isfinite(v) or v < 0 or (upper is not None and v > upper):
        shown = repr(value) if isinstance(value, float) or abs(value) < 10**30 else "a very large integer"
        raise ValueError(f"{name}: {shown} is not between 0 and {'infinity' if upper is None else f'{upper:g}'}")
    return v


def _cause_limits(limits: Mapping[str, float] | Mapping[Cause, float]) -> dict[Cause, float]:
    if not isinstance(limits, Mapping):
        raise TypeError(f"max_lost_pct: expected a mapping of cause to percent, got {type(limits).__name__}")
    from gpuprof.util.suggest import did_you_mean, match_name

    out: dict[Cause, float] = {}
    names = [c.value for c in CAUSES]
    for key, value in limits.items():
        found = key.value if isinstance(key, Cause) else match_name(key, names) if isinstance(key, str) else None
        if found is None:
            raise GpuprofError(
                f"max_lost_pct: unknown cause {key!r}{did_you_mean(str(key), names)}; causes are: {', '.join(names)}"
            )
        cause = Cause(found)
        out[cause] = _pct_arg(f"max_lost_pct[{cause.value!r}]", value)
    return out


def _baselines(baseline: Report | PathLike | Sequence[Report | PathLike] | None) -> list[Report]:
    """Reports from a report, a saved report's path, a folder of saved reports, or a list of
    these (pooled)."""
    if baseline is None:
        return []
    items: Sequence[Report | PathLike] = (
        [baseline] if isinstance(baseline, (Report, str, os.PathLike)) else baseline
    )
    if not isinstance(items, Sequence) or isinstance(items, bytes) or not items:
        raise TypeError("baseline: expected a Report, a path, or a non-empty list of them")
    out: list[Report] = []
    for item in items:
        if isinstance(item, Report):
            out.append(item)
        elif isinstance(item, (str, os.PathLike)) and Path(item).is_dir():
            from gpuprof.readers.saved import report_files

            found = report_files(Path(item))
            if not found:
                raise GpuprofError("holds no saved gpuprof report (*.json)", Path(item))
            out += [load_report(p) for p in found]
        elif isinstance(item, (str, os.PathLike)):
            out.append(load_report(item))
        else:
            raise TypeError(f"baseline: expected a Report or a path, got {type(item).__name__}")
    return out


def _gate_settings(min_effect_pct: float, confidence_pct: float, strict: bool) -> GateSettings:
    from gpuprof.ci.verdict import GateSettings

    floor = _pct_arg("min_effect_pct", min_effect_pct, upper=None)
    level = _pct_arg("confidence_pct", confidence_pct)
    if not 50.0 <= level < 100.0:
        raise ValueError(f"confidence_pct: expected a level from 50 to under 100 (e.g. 99), got {confidence_pct!r}")
    return GateSettings(min_effect_pct=floor, confidence_pct=level, strict=bool(strict))


def check(
    report: Report,
    *,
    baseline: Report | PathLike | Sequence[Report | PathLike] | None = None,
    min_compute_pct: float | None = None,
    max_lost_pct: Mapping[str, float] | Mapping[Cause, float] | None = None,
    max_step_ms: float | None = None,
    min_effect_pct: float = 5.0,
    confidence_pct: float = 99.0,
    strict: bool = False,
    tolerance_pct: float | None = None,
    step_tolerance_pct: float | None = None,
) -> CheckResults:
    """The CI gate of ``gpuprof check`` on a report: one :class:`~gpuprof.CheckResult` per check,
    in a :class:`~gpuprof.CheckResults` list whose ``passed`` says whether the gate passed and
    whose ``verdict`` is the step's :class:`~gpuprof.Verdict` against the baseline.

    Thresholds (each checked only when given): ``min_compute_pct`` (compute share of the
    window, %), ``max_lost_pct`` (cause -> largest share of the window, %), ``max_step_ms``
    (the slowest rank's mean step, as the report states it). A check that cannot be
    measured (no steps) fails.

    ``baseline``: a :class:`~gpuprof.Report`, the path of a saved JSON report, a folder of
    them, or a list of these (pooled). The check ``baseline.step`` gives the verdict from the
    step-time distributions (docs/gate.md): a regression is significant at
    ``confidence_pct`` and could reach the floor ``min_effect_pct``; too few steps is
    inconclusive and passes unless ``strict``; another world size, device, layout or kernel
    mix is not comparable and fails. The fixed rules of earlier versions are opt-ins:
    ``tolerance_pct`` (percentage points each share may worsen) and ``step_tolerance_pct``
    (% the mean step may grow), against the first baseline.

    Values are rounded as the JSON report rounds them. Nothing to check (no threshold, no
    baseline) or an unknown cause name (with "did you mean") raises
    :class:`~gpuprof.GpuprofError`, as the command line exits 2 for them; a value out of
    range raises ``ValueError``.
    """
    from gpuprof.ci import gate
    from gpuprof.ci.samples import run_steps

    if not isinstance(report, Report):
        raise TypeError(f"report: expected a gpuprof.Report (from gpuprof.analyze or gpuprof.load_report), got {type(report).__name__}")
    limits = gate.Thresholds(
        min_compute_pct=None if min_compute_pct is None else _pct_arg("min_compute_pct", min_compute_pct),
        max_lost_pct=_cause_limits(max_lost_pct or {}),
        max_step_ms=None if max_step_ms is None else _pct_arg("max_step_ms", max_step_ms, upper=None),
    )
    tol = None if tolerance_pct is None else _pct_arg("tolerance_pct", tolerance_pct)
    step_tol = None if step_tolerance_pct is None else _pct_arg("step_tolerance_pct", step_tolerance_pct, upper=None)
    settings = _gate_settings(min_effect_pct, confidence_pct, strict)
    if limits.empty and baseline is None:
        raise GpuprofError("nothing to check: give min_compute_pct, max_lost_pct, max_step_ms or a baseline")
    bases = _baselines(baseline)
    results = gate.CheckResults(gate.check_thresholds(report, limits))
    if bases:
        results.append(gate.check_steps(run_steps(report), [run_steps(b) for b in bases], settings))
        if tol is not None:
            results += gate.check_baseline_shares(report, bases[0], tol)
        if step_tol is not None:
            results += gate.check_baseline_step(report, bases[0], step_tol)
    return results


def diff(
    base: Report | PathLike,
    current: Report | PathLike,
    *,
    min_effect_pct: float = 5.0,
    confidence_pct: float = 99.0,
) -> ReportDiff:
    """What ``gpuprof diff BASE CURRENT`` shows, as a :class:`~gpuprof.ReportDiff`: ``overall``
    (better, worse, same), each share's change, per rank, and ``verdict``, the step's
    :class:`~gpuprof.Verdict` as :func:`check` gives it. Each side is a report or the path of
    a saved one (``gpuprof.analyze`` makes a report of traces first)."""
    from gpuprof.ci.diff import diff_reports

    sides = []
    for name, side in (("base", base), ("current", current)):
        if isinstance(side, Report):
            sides.append(side)
        elif isinstance(side, (str, os.PathLike)):
            sides.append(load_report(side))
        else:
            raise TypeError(f"{name}: expected a gpuprof.Report or the path of a saved one, got {type(side).__name__}")
    return diff_reports(sides[0], sides[1], settings=_gate_settings(min_effect_pct, confidence_pct, False))
