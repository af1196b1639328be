"""Kineto trace files that hold several ranks: split into ranks at read time.

Tools that put a whole job into one file for viewing (Perfetto, chrome://tracing) keep
each rank's events apart in one of a few ways. The forms recognized here, and how each
is detected:

``tracefusion``
    AMD TraceLens's TraceFusion: every event carries ``args.rank`` (or, in variants, only
    the process metadata events ``process_name`` / ``process_labels`` do, and the other
    events of that ``pid`` belong to the same rank); ``pid`` becomes
    ``rank * M + pid`` (``M`` a power of ten above the largest pid) with the original in
    ``args.pid_raw``; correlation ids are offset the same way (so launches still match
    their kernels within a rank); no top-level key but ``traceEvents``. Detected by an
    integer ``args.rank`` on an event.
``rank-labelled pids``
    SGLang's trace merger and similar scripts: ``pid`` becomes a string
    ``"[TP03] 1234"`` (a bracketed label, then the original pid); the top-level keys are
    the first file's. Detected by such pids. The rank is the number in the label when
    every label is one word ending in a number (``TP03`` -> 3, ``rank7`` -> 7) and the
    numbers differ; otherwise labels are numbered in sorted order, with a warning.

Each rank's events then go through the Kineto reader as if they were a file of their own
(``distributedInfo`` from the merged file is kept for its world size and process groups,
never for its rank). HolisticTraceAnalysis writes no merged form: it reads one file per
rank.

A file that mixes several ranks' events in any other way (for example per-rank traces
concatenated, or merged with offset pids and no rank marks) is refused with one line
saying so, rather than read as one rank: see :func:`mixed_ranks`.

A merged file may claim one rank per :data:`EVENTS_PER_RANK` events (and
:data:`MIN_RANKS_ALLOWED` in any case): each rank costs a fixed amount to analyze, so that
rank marks claiming more ranks than the events could fill (damaged, or made up) are refused
rather than let the cost follow the claims.

Splitting needs every event of the file at once (the pieces of a large file are decoded
one after another but kept until all are read): a merged file of N ranks costs about the
memory of N per-rank traces read one at a time.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpuprof.errors import BadTraceError
from gpuprof.model import classify as cl
from gpuprof.model.table import Table
from gpuprof.model.timeline import Category, Kind
from gpuprof.readers.columns import as_int
from gpuprof.readers.events import Event, TopLevel
from gpuprof.readers.jsonio import RawTrace

TRACEFUSION = "tracefusion"
LABELLED_PIDS = "rank-labelled pids"

_LABEL = re.compile(r"^\s*\[([^\]]+)\]\s*(.*)$")
_LABEL_NUMBER = re.compile(r"^[A-Za-z_-]*?(\d+)$")
# Process metadata events whose args.rank gives the rank of their pid.
_PROCESS_META = ("process_name", "process_labels", "process_sort_index")

# Mixing signals (see mixed_ranks): a share of launch calls with a correlation id another
# launch already has, and how many launches at least.
DUPLICATE_LAUNCH_SHARE = 0.1
MIN_LAUNCHES = 20
# A GPU counts when it has at least this share of the busiest GPU's device events.
SUBSTANTIAL_GPU_SHARE = 0.1


# What a rank claimed in a merged file may cost: every rank is read and analyzed as a trace
# of its own, at a fixed cost per rank (tables, summaries, the job model), so that claimed
# ranks without the events of a rank would make the cost follow the claims, not the file
# (60,000 kernels claiming 20,000 ranks ran past 120 s and 3.6 GB). A merged file may claim
# one rank per EVENTS_PER_RANK events, and MIN_RANKS_ALLOWED in any case.
EVENTS_PER_RANK = 100
MIN_RANKS_ALLOWED = 64


def max_ranks(n_events: int) -> int:
    """The most ranks a merged file of ``n_events`` events may claim."""
    return max(MIN_RANKS_ALLOWED, n_events // EVENTS_PER_RANK)


@dataclass(frozen=True)
class RankPart:
    """One rank's events out of a merged file."""

    rank: int
    raw: RawTrace
    warnings: tuple[str, ...] = ()


def merged_form(events: Iterable[Event]) -> str | None:
    """The merged form ``events`` are in (:data:`TRACEFUSION`, :data:`LABELLED_PIDS`), or
    ``None`` when they carry no rank marks."""
    label = _LABEL.match
    for e in events:  # thousands of events per rank: the cheap tests first
        r = e.args.rank
        if r is not None and not isinstance(r, bool) and as_int(r) is not None:
            return TRACEFUSION
        pid = e.pid
        if isinstance(pid, str) and label(pid) is not None:
            return LABELLED_PIDS
    return None


def split_ranks(raw: RawTrace, form: str, path: Path) -> list[RankPart]:
    """Every rank's events of a merged file, each as a one-piece :class:`RawTrace`.

    Consumes ``raw``'s pieces. Events that belong to no rank (the profiler's own "Spans"
    rows, flow events of unmarked pids) are left out.
    """
    events = [e for piece in raw.pieces() for e in piece]
    if form == TRACEFUSION:
        by_rank, notes = _tracefusion(events)
    else:
        by_rank, notes = _labelled(events)
    if not by_rank:
        raise BadTraceError(f"holds no event of any rank in its merged form ({form})", path)
    n_events = sum(len(evs) for evs in by_rank.values())
    if len(by_rank) > max_ranks(n_events):
        raise BadTraceError(
            f"claims {len(by_rank)} ranks for {n_events} events in its merged form ({form}); a merged file "
            f"may claim one rank per {EVENTS_PER_RANK} events (at most {max_ranks(n_events)} here): "
            "a rank's trace holds far more, so these rank marks are damaged",
            path,
        )
    top = raw.top
    info = top.distributed_info if isinstance(top.distributed_info, dict) else None
    # The merged file's distributedInfo is one rank's (SGLang keeps the first file's keys):
    # its world size and groups hold for the job, its rank for nobody.
    shared_info = None if info is None else {k: v for k, v in info.items() if k != "rank"}
    warnings = list(raw.warnings)
    parts = []
    for rank in sorted(by_rank):
        rank_top = TopLevel(top.device_properties, shared_info, top.schema_version, top.with_stack)
        part_raw = RawTrace(by_rank[rank], iter(()), rank_top, raw.is_object, type(raw.warnings)(warnings))
        part_raw.cut_off_at_bytes = raw.cut_off_at_bytes
        part_raw.cut_off_note = raw.cut_off_note
        note = f"read from a merged file of {len(by_rank)} ranks ({form})"
        parts.append(RankPart(rank, part_raw, (note, *notes)))
    return parts


def _tracefusion(events: Sequence[Event]) -> tuple[dict[int, list[Event]], list[str]]:
    """Rank of each event: its ``args.rank``, else the rank its pid's metadata gives."""
    of_pid: dict[Any, int] = {}
    for e in events:
        r = _rank_arg(e)
        if r is not None and e.ph == "M" and e.name in _PROCESS_META:
            of_pid.setdefault(e.pid, r)
    by_rank: dict[int, list[Event]] = {}
    for e in events:
        r = _rank_arg(e)
        if r is None:
            r = of_pid.get(e.pid)
        if r is None:
            continue
        raw_pid = as_int(e.args.pid_raw)
        if raw_pid is not None and isinstance(e.pid, int):
            e.pid = raw_pid  # the GPU index again (device properties and memory samples use it)
        by_rank.setdefault(r, []).append(e)
    return by_rank, []


def _rank_arg(e: Event) -> int | None:
    r = e.args.rank
    if isinstance(r, bool):
        return None
    v = as_int(r)
    return v if v is not None and v >= 0 else None


def _labelled(events: Sequence[Event]) -> tuple[dict[int, list[Event]], list[str]]:
    """Rank of each event from its ``"[label] pid"``; the original pid is restored."""
    by_label: dict[str, list[Event]] = {}
    for e in events:
        m = _LABEL.match(e.pid) if isinstance(e.pid, str) else None
        if m is None:
            continue
        label, rest = m.group(1).strip(), m.group(2).strip()
        pid = as_int(rest)
        e.pid = pid if pid is not None else rest
        by_label.setdefault(label, []).append(e)
    ranks, notes = _label_ranks(list(by_label))
    return {ranks[label]: evs for label, evs in by_label.items()}, notes


def _label_ranks(labels: Sequence[str]) -> tuple[dict[str, int], list[str]]:
    numbers = [_LABEL_NUMBER.match(label) for label in labels]
    if all(numbers):
        values = [int(m.group(1)) for m in numbers if m is not None]
        if len(set(values)) == len(values):
            return dict(zip(labels, values)), []
    order = sorted(labels)
    shown = ", ".join(f"{label!r} -> {i}" for i, label in enumerate(order[:4]))
    more = ", ..." if len(order) > 4 else ""
    note = f"the merged file's pid labels give no rank numbers: ranks numbered by label ({shown}{more})"
    return {label: i for i, label in enumerate(order)}, [note]


# --- several ranks in a form not recognized ------------------------------------------------


def mixed_ranks(host: Table, device_pid_counts: dict[Any, int]) -> str | None:
    """Why a file read as one rank holds several ranks' events, or ``None``.

    Signals (a process's correlation ids and step numbers are its own, so several
    processes show as repeats): launch calls sharing correlation ids (at least
    :data:`DUPLICATE_LAUNCH_SHARE` of at least :data:`MIN_LAUNCHES` launches), or
    ``ProfilerStep#N`` recorded more than once for the same N while events of several GPUs
    are present (each with at least :data:`SUBSTANTIAL_GPU_SHARE` of the busiest one's
    events). One process driving several GPUs shows neither.
    """
    kinds = host["kind"]
    launch = np.isin(kinds, (int(Kind.RUNTIME), int(Kind.DRIVER))) & (host["category"] == int(Category.LAUNCH))
    corr = host["correlation"][launch]
    corr = corr[corr >= 0]
    if corr.size >= MIN_LAUNCHES:
        repeats = corr.size - np.unique(corr).size
        if repeats >= DUPLICATE_LAUNCH_SHARE * corr.size:
            return f"{repeats} of its {corr.size} kernel launches share a correlation id with another launch"
    top = max(device_pid_counts.values(), default=0)
    gpus = [p for p, n in device_pid_counts.items() if n >= SUBSTANTIAL_GPU_SHARE * top and n > 0]
    if len(gpus) >= 2:
        labels = host.labels("name").tolist() + ["nan"]
        codes = host.codes("name")[host["category"] == int(Category.STEP)].astype(np.int64)
        steps = [labels[c] for c in np.where(codes < 0, len(labels) - 1, codes).tolist()]
        numbers = [m.group(1) for m in map(cl.STEP_NUMBER.match, steps) if m is not None]
        if len(numbers) > len(set(numbers)):
            return f"events of {len(gpus)} GPUs, and the same ProfilerStep recorded several times"
    return None


def refuse_mixed(why: str, path: Path) -> BadTraceError:
    """The error for a file that holds several ranks in a form not recognized."""
    return BadTraceError(
        f"holds events of several ranks ({why}) merged in a form gpuprof does not recognize: "
        "analyze the per-rank trace files instead (docs/layouts.md lists the merged forms gpuprof splits)",
        path,
    )


__all__ = [
    "EVENTS_PER_RANK",
    "LABELLED_PIDS",
    "TRACEFUSION",
    "RankPart",
    "max_ranks",
    "merged_form",
    "mixed_ranks",
    "refuse_mixed",
    "split_ranks",
]
