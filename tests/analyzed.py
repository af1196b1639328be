"""One analysis per input folder for the whole test session.

The real traces (``SHARED_TRACES``) and the samples are analyzed by many test files, each
asking its own question of the same report: invariants, schema, replay, attribution, advice.
The big Megatron timelines take seconds each; analyzed once per file they cost the suite a
minute. These functions analyze each folder once per pytest process, on first use, so a file
run alone still computes what it reads (nothing here depends on another file having run).

The results are shared between tests: treat them as read-only. :class:`Report` and
:class:`Analysis` are frozen dataclasses, but hold lists and dicts; a test that wants to change
one works on a copy (``report_to_dict``, ``json.loads(report.to_json())``, ``dataclasses.replace``).
Each report's JSON is fingerprinted when it is made, and ``conftest.py`` fails the session if
one changed by its end (:func:`changed`): a test that altered a shared report would otherwise
make the tests after it read a report no analysis gave.

Only the default analysis is cached (no steps, no force, no scheduler): a test of an option
calls the pipeline itself.
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

from gpuprof.model.report import Report
from gpuprof.pipeline import Analysis, run_analysis

_MADE: list[tuple[str, Report, str]] = []  # (what, the shared report, its JSON's digest when made)


def _digest(report: Report) -> str:
    return hashlib.sha256(report.to_json().encode()).hexdigest()


def _kept(what: str, report: Report) -> Report:
    _MADE.append((what, report, _digest(report)))
    return report


@cache
def _analysis(folder: Path) -> Analysis:
    a = run_analysis([folder])
    _kept(f"run_analysis([{folder}])", a.report)
    return a


@cache
def _routed(folder: Path) -> Report:
    from gpuprof.api import analyze

    return _kept(f"analyze({folder})", analyze(folder))


def analysis_of(folder: Path | str) -> Analysis:
    """``run_analysis([folder])``, computed once per session for each folder (as given:
    the report names its sources by the path it was given)."""
    return _analysis(Path(folder))


def report_of(folder: Path | str) -> Report:
    """``gpuprof.analyze(folder)`` (what ``gpuprof analyze FOLDER`` reports), computed once per
    session: a folder of traces is :func:`analysis_of`'s report (the API routes it to the
    same ``run_analysis``); a session folder or a saved report goes through the API."""
    from gpuprof.pipeline.inputs import route

    path = Path(folder)
    inp = route([path])
    if inp.saved is None and inp.session is None:
        return analysis_of(path).report
    return _routed(path)


def changed() -> list[str]:
    """The shared reports whose JSON is no longer what the analysis gave (a test changed one)."""
    return [what for what, report, digest in _MADE if _digest(report) != digest]


__all__ = ["analysis_of", "changed", "report_of"]
