"""Wires the layers together: readers -> per-rank summaries -> job analysis -> advice -> Report.

Memory stays bounded per rank: a trace is read, summarized and dropped before the next one
on the same worker; only the compact :class:`RankSummary` objects are kept for the job-level
steps. With ``jobs > 1`` ranks are summarized in parallel processes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from gpuprof.accounting.attribution import Attribution, attribute, merge_claims
from gpuprof.accounting.names import top_names
from gpuprof.accounting.summary import RankSummary
from gpuprof.accounting.window import StepSelection
from gpuprof.advice import AdviceContext, advise_all, rank_spans
from gpuprof.errors import GpuprofError
from gpuprof.job.critical import critical_path
from gpuprof.job.cross_rank import CrossRankResult, analyze_job
from gpuprof.job.onejob import differences, forced_warning, refusal
from gpuprof.job.stepview import step_timeline
from gpuprof.model import intervals as iv
from gpuprof.model import notice
from gpuprof.model.notice import Notice, said, said_all
from gpuprof.model.report import CAUSES, RankReport, Recommendation, Report
from gpuprof.pipeline.executors import Executor, LocalExecutor, Progress, summarize_source
from gpuprof.readers.ranks import check_ranks


@dataclass(frozen=True)
class AnalyzeOptions:
    steps: StepSelection = field(default_factory=StepSelection)
    jobs: int = 1
    scheduler: str | None = None  # address of a Dask scheduler; None = run locally
    # Refuse a trace file whose decompressed JSON passes this many GB (None: the default of
    # gpuprof.readers.limits, sized for real traces).
    max_input_gb: float | None = None
    # A file found in a folder that cannot be read fails the run (--strict), instead of
    # being left out with a warning while the other ranks are analyzed.
    strict: bool = False
    # Analyze the inputs as one job even when they disagree on what job they came from
    # (gpuprof.job.onejob: world size, GPU model, ...); the report then says so.
    force: bool = False


@dataclass(frozen=True)
class Analysis:
    """A report plus what produced it (for ``annotate`` and other views of the details)."""

    report: Report
    summaries: tuple[RankSummary, ...]
    attributions: Mapping[int, Attribution]
    cross: CrossRankResult
    # The report's warnings as records (gpuprof.model.notice), in order:
    # ``report.warnings == notice.words(notices)``. Decide by their codes, not their words.
    notices: tuple[Notice, ...] = ()

    @property
    def skipped(self) -> tuple[Notice, ...]:
        """The files found in folders that could not be read and were left out (``path``)."""
        return notice.of_code(self.notices, notice.SKIPPED_UNREADABLE)


SKIPPED_UNREADABLE = "which cannot be read"


def unreadable_line(path: Any, exc: GpuprofError) -> str:
    """The report's warning for a file of a folder that was left out."""
    return f"skipped {path}, {SKIPPED_UNREADABLE}: {exc.message}; the other traces are analyzed (--strict makes this an error)"


def unreadable_notice(path: Any, exc: GpuprofError) -> Notice:
    """:func:`unreadable_line` as a record (code ``SKIPPED_UNREADABLE``, ``path`` the file)."""
    return Notice(notice.SKIPPED_UNREADABLE, unreadable_line(path, exc), path=str(path))


def _summaries(
    sources: Sequence[Any], options: AnalyzeOptions, progress: Progress | None, skipped: list[Notice] | None = None
) -> list[RankSummary]:
    """Every source's summaries; a source found in a folder that cannot be read is left out
    (a notice in ``skipped``) unless ``options.strict``, as long as another one can be."""
    first_error: GpuprofError | None = None

    def unreadable(src: Any, exc: GpuprofError) -> None:
        nonlocal first_error
        if options.strict or not getattr(src, "in_folder", False) or skipped is None:
            raise exc
        first_error = first_error or exc
        skipped.append(unreadable_notice(src.path, exc))

    if options.scheduler is not None:  # "" is an address too: a wrong one (an unset variable)
        from gpuprof.pipeline.dask import DaskExecutor

        executor: Executor = DaskExecutor(options.scheduler)
    else:
        executor = LocalExecutor(options.jobs)
    out = executor.summaries(sources, options.steps, progress, unreadable)
    if not out and first_error is not None:
        raise first_error  # nothing could be read: say why, as for one file
    return out


def _rank_report(s: RankSummary, att: Attribution, cross: CrossRankResult) -> RankReport:
    step_times = tuple(st.duration_us for st in s.steps)
    extra: dict[str, Any] = {}
    if s.empty_reason:
        extra["note"] = s.empty_reason
        if s.host_steps is not None:
            extra["host_steps"] = s.host_steps.to_dict()  # what a CPU-only rank still measured
    if s.parallel:
        extra["parallel"] = dict(s.parallel)
    if s.steps:
        extra["step_numbers"] = [int(st.number) for st in s.steps]  # as the trace numbers them
        extra.update(_step_partition(s, att))
    if s.names is not None and s.window_us > 0:
        extra["kernels"] = [t.to_dict() for t in top_names(s.names, s.window[0], s.window[1])]  # the device work with the most time
    if s.facts is not None and s.facts.step_marker:
        extra["step_marker"] = s.facts.step_marker  # which marker the steps come from
    per_rank = cross.findings.per_rank.get(s.rank)
    if per_rank is not None:
        extra.update(per_rank.to_dict())
    return RankReport(
        rank=s.rank,
        device=s.device_name,
        steps=len(s.steps),
        window_us=s.window_us,
        compute_us=float(sum(s.compute[1] - s.compute[0])) if s.compute[0].size else 0.0,
        lost_us=dict(att.lost_us),
        source=s.source,
        step_times_us=step_times,
        extra=extra,
    )


def _step_partition(s: RankSummary, att: Attribution) -> dict[str, Any]:
    """Each step's compute and lost time per cause, in microseconds (``step_compute_us``,
    ``step_lost_us``): the rank's partition cut at the step bounds, so that ``gpuprof
    check`` can compare causes step by step, with intervals, not only as totals."""
    steps = (np.array([st.start_us for st in s.steps]), np.array([st.end_us for st in s.steps]))  # one per step
    r3 = lambda values: [round(float(v), 3) for v in values]  # as the report rounds
    return {
        "step_compute_us": r3(iv.overlap_with_each(steps, s.compute)),
        "step_lost_us": {c.value: r3(iv.overlap_with_each(steps, att.intervals[c])) for c in CAUSES},
    }


def _load_samples(paths: Sequence[str | Path], known: Any = None) -> Any:
    """NVML sample findings when an input is a ``gpuprof run`` session, else ``None``.
    ``known``: the session already read (of the one path), not read again."""
    try:
        from gpuprof.session import is_session, read_session
    except ModuleNotFoundError:
        return None
    for p in paths:
        if is_session(Path(p)):
            session = known if known is not None and Path(known.path) == Path(p) else read_session(Path(p))
            if session.samples is not None and len(session.samples):
                # Imported here: only sessions with NVML samples need it (its import costs
                # ~10 ms, most of a small trace's analysis).
                from gpuprof.accounting.samples import summarize_samples

                return summarize_samples(session.samples)
    return None


def run_analysis(
    paths: Sequence[str | Path],
    options: AnalyzeOptions = AnalyzeOptions(),
    progress: Progress | None = None,
    session: Any = None,
) -> Analysis:
    """The analysis of trace files, folders of per-rank traces and session folders.
    ``session``: the session folder among ``paths`` as already read
    (:class:`gpuprof.session.reader.Session`), so that it is not read again."""
    from gpuprof.readers import ReadLimits, discover

    strays: list[str] = []  # files found in folders that are not traces
    sources = discover(paths, strays, ReadLimits.from_gb(options.max_input_gb))
    skipped = list(said_all(strays))  # and those that are but cannot be read
    summaries = sorted(_summaries(sources, options, progress, skipped), key=lambda s: s.rank)
    mixed = differences(summaries)
    if mixed and not options.force:
        raise GpuprofError(refusal(mixed))
    check_ranks(summaries)
    if progress:
        progress(f"analyzing {len(summaries)} rank(s)")
    cross = analyze_job(summaries)
    attributions: dict[int, Attribution] = {}
    reports: list[RankReport] = []
    for s in summaries:
        att = attribute(s.lost, merge_claims(s.claims, cross.claims.get(s.rank, {})))
        attributions[s.rank] = att
        reports.append(_rank_report(s, att, cross))
    samples = _load_samples(paths, session)
    advice = advise_all(
        AdviceContext(
            summaries=summaries, reports=reports, cross=cross.findings, samples=samples, whatifs=cross.whatifs
        )
    )
    # One line per distinct warning text, naming its ranks.
    warnings = skipped + ([said(forced_warning(mixed))] if mixed else []) + rank_notices(
        [(s.rank, w) for s in summaries for w in s.warnings + ((said(s.empty_reason),) if s.empty_reason else ())]
    )
    world_note = cross.findings.straggler_analysis.world_size_note
    if world_note:
        warnings.append(said(str(world_note)))
    # What the trace cannot support (see gpuprof.advice): one line each, first (a renderer
    # may show only the first few warnings), and in the JSON.
    warnings[:0] = [said(h.line) for h in advice.held_back]
    job: dict[str, Any] = {k: v for k, v in cross.findings.to_dict().items() if k != "per_rank"}
    w = cross.whatifs
    job["model_error_pct"] = None if w is None else round(w.model_error_pct, 3)
    job["combined_savings_pct"] = None if advice.combined_savings_pct is None else round(advice.combined_savings_pct, 2)

    if w is None:
        if any(s.empty_reason is None and s.window_us > 0 for s in summaries):
            warnings.append(said(
                "no job-level replay could be built (no device work with a known order): savings are closed-form estimates"
            ))
    elif abs(w.model_error_pct) > 5.0:
        warnings.append(said(
            f"the job's replay misses the measured step time by {w.model_error_pct:+.1f}%: the estimates are rough"
        ))
    extra: dict[str, Any] = {"job": job}
    if advice.absorbed_warnings:
        # Warnings a recommendation now states beside its saving (the renderers show them there).
        extra["warnings_on_savings"] = list(advice.absorbed_warnings)
    if advice.held_back:
        extra["held_back"] = [h.to_dict() for h in advice.held_back]
    if samples is not None and hasattr(samples, "to_dict"):
        extra["samples"] = samples.to_dict()
    path_of = None
    if cross.whatifs is not None:
        model = cross.whatifs.model
        path_of = lambda t0_us, t1_us: critical_path(model, t0_us, t1_us)
    timeline = step_timeline(summaries, attributions, cross.findings, path_of=path_of)  # drawn by the HTML report
    if timeline is not None:
        extra["timeline"] = timeline
    step_us = w.model.measured_step_us if w is not None else _job_step_us(reports)
    report = Report(
        inputs=tuple(str(p) for p in paths),
        ranks=tuple(reports),
        recommendations=tuple(_with_step_saving(r, step_us) for r in advice.recommendations),
        warnings=notice.words(warnings),  # worded here, once: the report's warnings are strings
        extra=extra,
    )
    return Analysis(
        report=report, summaries=tuple(summaries), attributions=attributions, cross=cross, notices=tuple(warnings)
    )


def _job_step_us(reports: Sequence[RankReport]) -> float | None:
    """The job's step without a replay: the slowest rank's mean step (window / steps)."""
    steps = [r.window_us / r.steps for r in reports if r.steps > 0 and r.window_us > 0]
    return max(steps) if steps else None


def _with_step_saving(rec: Recommendation, step_us: float | None) -> Recommendation:
    """``rec`` with its saving in microseconds per step of the job, beside the percentage,
    and its percentages held to the precision the saved report keeps (two decimals), so a
    report reads the same before and after a round trip through JSON (32.449 would say
    32.4 here and 32.45 -> 32.5 there)."""

    def kept(x: float | None) -> float | None:
        return None if x is None else round(x, 2)

    rec = replace(
        rec,
        estimated_savings_pct=round(rec.estimated_savings_pct, 2),
        savings_low_pct=kept(rec.savings_low_pct),
        savings_high_pct=kept(rec.savings_high_pct),
    )
    if step_us is None or step_us <= 0 or rec.saved_us_per_step is not None:
        return rec
    return replace(rec, saved_us_per_step=step_us * rec.estimated_savings_pct / 100.0)


def rank_warnings(pairs: Sequence[tuple[int, str]]) -> list[str]:
    """``(rank, warning)`` pairs as report lines: :func:`rank_notices`' texts."""
    return list(notice.words(rank_notices([(rank, said(text)) for rank, text in pairs])))


def rank_notices(pairs: Sequence[tuple[int, Notice]]) -> list[Notice]:
    """``(rank, notice)`` pairs as the report's notices, one per distinct text naming its
    ranks (``rank 3: ...``, ``ranks 0-7: ...``), in order of first appearance; each keeps
    the code (and path) of the first with its text, and its rank when it is one rank's.

    A file-level warning (a timeline file with 8 workers) reaches every rank read from the
    file; listed once per rank it would drown the warnings that differ.
    """
    by_text: dict[str, tuple[Notice, list[int]]] = {}
    for rank, n in pairs:
        _, ranks = by_text.setdefault(n.text, (n, []))
        if rank not in ranks:
            ranks.append(rank)
    return [
        replace(first, text=f"{_ranks_label(ranks)}: {text}", rank=ranks[0] if len(ranks) == 1 else None)
        for text, (first, ranks) in by_text.items()
    ]


def _ranks_label(ranks: Sequence[int]) -> str:
    """``rank 3`` or ``ranks 0-3, 6, 9-10``."""
    nums = sorted(set(ranks))
    return f"rank {nums[0]}" if len(nums) == 1 else f"ranks {rank_spans(nums)}"


def analyze_paths(
    paths: Sequence[str | Path],
    options: AnalyzeOptions = AnalyzeOptions(),
    progress: Progress | None = None,
    session: Any = None,
) -> Report:
    """Analyze trace files, folders of per-rank traces, or session folders into a Report
    (``session``: as for :func:`run_analysis`)."""
    return run_analysis(paths, options, progress, session).report


def default_jobs() -> int:
    return max(1, (os.cpu_count() or 1))


__all__ = [
    "CAUSES",
    "Analysis",
    "AnalyzeOptions",
    "Executor",
    "LocalExecutor",
    "Progress",
    "analyze_paths",
    "default_jobs",
    "rank_notices",
    "rank_warnings",
    "run_analysis",
    "summarize_source",
    "unreadable_line",
    "unreadable_notice",
]
