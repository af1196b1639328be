"""Are these ranks one job? What the traces say about the job they came from, compared.

Ranks of one job agree on what the job is: the world size ``distributedInfo`` (or a
timeline's meta file) gives, the parallel layout of an op-level timeline, the GPU model,
the trace format, and whether they communicate at all (every rank of a distributed job
calls collectives or point-to-point transfers). Traces of two jobs put in one folder
disagree on at least one of these, and analyzed together they would be read as ranks
waiting for each other: "2 of 16 ranks", stragglers, "balance the data". Only what the
traces state is compared: a rank that does not say its world size or GPU model agrees
with any value (sampled ranks of a big job, "2 of 128 ranks", agree on 128).

Two or more traces none of which shows any sign of a distributed job (no world size, no
parallel layout, no collective or point-to-point call) are separate runs too: two
single-GPU runs of the same script are compared with ``gpuprof diff``, not merged.

The pipeline refuses such inputs (exit 2, one line naming the files and what differs)
unless told to analyze them as one job anyway (``--force``, ``force=True``), and then says
so in the report. Pure: summaries in, findings out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpuprof.accounting.summary import RankSummary
from gpuprof.model.timeline import Category

# How many files a group names before "and N more".
_SHOWN_FILES = 2
_LAYOUT_KEYS = ("pp_size", "tp_size", "dp_size")


@dataclass(frozen=True)
class Difference:
    """One thing the ranks disagree on: ``what`` (e.g. "world size") and, per value as
    written, the trace files (sources) that state it, in input order."""

    what: str
    groups: tuple[tuple[str, tuple[str, ...]], ...]


def _comm_calls(s: RankSummary) -> int:
    """Collective and point-to-point calls on the rank's device (0 when none)."""
    cat = s.comms_table["category"]
    return int(((cat == int(Category.COLLECTIVE)) | (cat == int(Category.P2P))).sum())


def _busy(s: RankSummary) -> bool:
    """The rank has device work to analyze (a CPU-only rank says nothing of collectives)."""
    return s.empty_reason is None and s.window_us > 0


def _layout(s: RankSummary) -> str | None:
    if not any(k in s.parallel for k in _LAYOUT_KEYS):
        return None
    return " x ".join(f"{k.split('_')[0].upper()} {s.parallel[k]}" for k in _LAYOUT_KEYS if k in s.parallel)


def _grouped(summaries: Sequence[RankSummary], value: Callable[[RankSummary], str | None]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for s in summaries:
        v = value(s)
        if v is None:
            continue
        files = groups.setdefault(v, [])
        if s.source not in files:
            files.append(s.source)
    return groups


def differences(summaries: Sequence[RankSummary]) -> tuple[Difference, ...]:
    """What the ranks disagree on (empty when they may be one job), most telling first."""
    checks: list[tuple[str, Callable[[RankSummary], str | None]]] = [
        ("trace format", lambda s: s.holds.title or s.fmt),
        ("world size", lambda s: None if s.world_size is None else str(s.world_size)),
        ("parallel layout", _layout),
        ("GPU model", lambda s: s.device_name or None),
    ]
    out: list[Difference] = []
    for what, value in checks:
        groups = _grouped(summaries, value)
        if len(groups) > 1:
            out.append(Difference(what, tuple((v, tuple(f)) for v, f in groups.items())))
    busy = [s for s in summaries if _busy(s)]
    calls = {s.source: 0 for s in busy}
    for s in busy:
        calls[s.source] += _comm_calls(s)
    talking = [f for f, n in calls.items() if n > 0]
    silent = [f for f, n in calls.items() if n == 0]
    if talking and silent:
        out.append(
            Difference(
                "communication",
                (("collective or point-to-point calls", tuple(talking)), ("none", tuple(silent))),
            )
        )
    elif not out and len(calls) > 1 and not talking and not any(s.world_size or _layout(s) for s in summaries):
        out.append(Difference("no sign of one job", (("no world size, no collective or point-to-point call", tuple(calls)),)))
    return tuple(out)


def _files(files: Sequence[str]) -> str:
    shown = ", ".join(files[:_SHOWN_FILES])
    more = len(files) - _SHOWN_FILES
    return f"{shown} and {more} more" if more > 0 else shown


def describe(diffs: Sequence[Difference]) -> str:
    """The differences as one clause each, e.g. ``world size 2 (a.json) vs 128 (b.json)``."""
    parts = []
    for d in diffs:
        if d.what == "no sign of one job":
            ((why, files),) = d.groups
            parts.append(f"these {len(files)} traces show no sign of one job ({why}): {_files(files)}")
        elif d.what == "communication":
            parts.append(" vs ".join(f"{v} in {_files(f)}" for v, f in d.groups))
        else:
            parts.append(f"{d.what} " + " vs ".join(f"{v} ({_files(f)})" for v, f in d.groups))
    return "; ".join(parts)


def refusal(diffs: Sequence[Difference]) -> str:
    """The one-line error when the inputs are not one job."""
    said = describe(diffs)
    head = said if diffs[0].what == "no sign of one job" else f"these traces are not one job: {said}"
    return (
        f"{head}; analyze each job on its own (or compare two runs with gpuprof diff), "
        "or give --force (Python: force=True) to analyze them as one job"
    )


def forced_warning(diffs: Sequence[Difference]) -> str:
    """The report's warning when the inputs were analyzed as one job anyway."""
    return f"analyzed as one job although the traces may come from different jobs (--force): {describe(diffs)}"


__all__ = ["Difference", "describe", "differences", "forced_warning", "refusal"]
