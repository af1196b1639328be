"""Op-level Chrome trace-event timelines from framework timers -> one RankTrace per worker.

These files are not Kineto: each ``X`` event is a framework timer op (``forward-compute``,
``backward-send``, ``grads-reduce-scatter``, ...) with ``args.step`` and ``args.mb_id``.

Workers
    Megatron-style timelines name their threads ``PP rank k, TP rank t, <kind>`` and use
    ``pid`` as the data-parallel rank (or name the process ``DP rank [d]``); one worker is
    one (pid, PP rank, TP rank) and its threads are its lanes (compute, pp-comm, ...).
    Without such thread names, each process (``pid``) is one worker.

Global rank of a worker
    Megatron's default rank order (``tp-cp-ep-dp-pp``: TP varies fastest, PP slowest):
    ``rank = (pp_rank * dp_size + dp_rank) * tp_size + tp_rank``. Sizes come from a
    ``meta*.yaml`` beside the file when present (``key: int`` lines), else from the largest
    rank seen plus one. In the generic case the rank is the integer ``pid`` (or the
    worker's position when pids are not integers).

Tables
    The timer ops go to the ``device`` table (kind TIMER, category from the op name,
    ``step`` and ``mb_id`` from ``args``, ``stream`` = the thread id, i.e. the worker's
    lane: compute, pp-comm, ...); the ``host`` table is empty.

Steps
    Step ``s`` of a worker spans from its first op of step ``s`` to its first op of the
    next step in the file; the last step ends at the end of its last op.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpuprof.model import classify as cl
from gpuprof.model.timeline import DEVICE_COLUMNS, Kind, RankTrace, Step, empty_host_table, make_table
from gpuprof.readers.columns import as_int, categorical, int_column
from gpuprof.readers.jsonio import Event, RawTrace

_THREAD_LAYOUT = re.compile(r"PP\s*rank\s*(\d+)\s*,\s*TP\s*rank\s*(\d+)", re.IGNORECASE)
_DP_IN_PROCESS = re.compile(r"DP\s*rank\s*\[?\s*(\d+)", re.IGNORECASE)
_META_LINE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*:\s*(-?\d+)\s*(?:#.*)?$")
_META_MAX_BYTES = 1 << 16


@dataclass(frozen=True)
class _WorkerKey:
    pid: int | str
    pp_rank: int | None
    tp_rank: int | None


def read_meta_sizes(trace_path: Path) -> dict[str, int]:
    """``key: int`` pairs of the ``meta*.yaml`` beside a timeline (no YAML library, no eval).

    ``timeline-ST.json.gz`` pairs with ``meta-ST.yaml``; otherwise a folder's only
    ``meta*.yaml`` is used. Lines that are not ``key: integer`` are ignored.
    """
    folder = trace_path.parent
    stem = trace_path.name.split(".", 1)[0]
    suffix = stem.split("-", 1)[1] if "-" in stem else None
    candidates = []
    if suffix:
        candidates += [folder / f"meta-{suffix}.yaml", folder / f"meta-{suffix}.yml"]
    metas = sorted(p for p in folder.glob("meta*.y*ml") if p.is_file())
    if len(metas) == 1:
        candidates.append(metas[0])
    for path in candidates:
        if path.is_file():
            try:
                text = path.read_bytes()[:_META_MAX_BYTES].decode("utf-8", "replace")
            except OSError:
                continue
            out: dict[str, int] = {}
            for line in text.splitlines():
                m = _META_LINE.match(line)
                if m:
                    out[m.group(1)] = int(m.group(2))
            return out
    return {}


def looks_like_timeline(raw: RawTrace) -> bool:
    """True when the file has complete (``X``) events at all: the fallback format."""
    return any(e.ph == "X" for e in raw.first)


def read_timeline(raw: RawTrace, path: Path) -> list[RankTrace]:
    """One :class:`RankTrace` per worker of an op-level timeline, sorted by rank."""
    thread_names: dict[tuple[Any, Any], str] = {}
    process_names: dict[Any, str] = {}
    ops: list[Event] = []
    for e in (e for piece in raw.pieces() for e in piece):
        if e.ph == "X":
            ops.append(e)
        elif e.ph == "M" and isinstance(e.args.name, str):
            if e.name == "thread_name":
                thread_names[(e.pid, e.tid)] = e.args.name
            elif e.name == "process_name":
                process_names[e.pid] = e.args.name
    layout: dict[tuple[Any, Any], tuple[int, int]] = {}
    for key, tname in thread_names.items():
        m = _THREAD_LAYOUT.search(tname)
        if m:
            layout[key] = (int(m.group(1)), int(m.group(2)))
    groups: dict[_WorkerKey, list[Event]] = {}
    for e in ops:
        pp_tp = layout.get((e.pid, e.tid))
        wk = _WorkerKey(e.pid, pp_tp[0], pp_tp[1]) if pp_tp else _WorkerKey(e.pid, None, None)
        groups.setdefault(wk, []).append(e)
    dp_of = {pid: _dp_rank(pid, process_names.get(pid)) for pid in {k.pid for k in groups}}
    sizes = read_meta_sizes(path)
    warnings = list(raw.warnings)
    structured = bool(layout)
    pp_size = tp_size = dp_size = 1
    if structured:
        pp_size = sizes.get("pp_size") or 1 + max((k.pp_rank or 0) for k in groups)
        tp_size = sizes.get("tp_size") or 1 + max((k.tp_rank or 0) for k in groups)
        dp_size = sizes.get("dp_size") or 1 + max((d or 0) for d in dp_of.values())
        unnamed = sorted({str(k.pid) for k in groups if k.pp_rank is None})
        if unnamed:
            warnings.append(
                f"ops on threads without 'PP rank k, TP rank t' names in process(es) {', '.join(unnamed)}; "
                "ranks are numbered in file order instead of Megatron's order"
            )
    ranks = _assign_ranks(groups, dp_of, structured, pp_size, tp_size, dp_size)
    world = sizes.get("world_size") or (pp_size * tp_size * dp_size if structured else None)
    no_host = empty_host_table()  # shared: tables are never mutated
    out: list[RankTrace] = []
    for wk, evs in groups.items():
        parallel: dict[str, int] = {}
        if structured and wk.pp_rank is not None and wk.tp_rank is not None:
            parallel = {
                "pp_rank": wk.pp_rank,
                "tp_rank": wk.tp_rank,
                "pp_size": pp_size,
                "tp_size": tp_size,
                "dp_size": dp_size,
            }
            dp = dp_of[wk.pid]
            if dp is not None:
                parallel["dp_rank"] = dp
        device, steps = _worker_table(evs)
        out.append(
            RankTrace(
                rank=ranks[wk],
                source=str(path),
                fmt="timeline",
                device=device,
                host=no_host,
                steps=steps,
                world_size=world,
                parallel=parallel,
                warnings=tuple(warnings),
            )
        )
    out.sort(key=lambda t: t.rank)
    return out


def _dp_rank(pid: Any, process_name: str | None) -> int | None:
    if process_name:
        m = _DP_IN_PROCESS.search(process_name)
        if m:
            return int(m.group(1))
    return as_int(pid)


def _assign_ranks(
    groups: dict[_WorkerKey, list[Event]],
    dp_of: dict[Any, int | None],
    structured: bool,
    pp_size: int,
    tp_size: int,
    dp_size: int,
) -> dict[_WorkerKey, int]:
    keys = list(groups)
    ranks: dict[_WorkerKey, int] = {}
    if structured and all(k.pp_rank is not None and dp_of[k.pid] is not None for k in keys):
        for k in keys:
            dp = dp_of[k.pid] or 0
            ranks[k] = ((k.pp_rank or 0) * dp_size + dp) * tp_size + (k.tp_rank or 0)
        if len(set(ranks.values())) == len(keys):
            return ranks
    pids = [as_int(k.pid) for k in keys]
    if not structured and all(p is not None and p >= 0 for p in pids) and len(set(pids)) == len(keys):
        return {k: int(p) for k, p in zip(keys, pids) if p is not None}
    ordered = sorted(keys, key=lambda k: (str(k.pid), k.pp_rank or 0, k.tp_rank or 0))
    return {k: i for i, k in enumerate(ordered)}


def _worker_table(evs: list[Event]) -> tuple[pd.DataFrame, tuple[Step, ...]]:
    n = len(evs)
    start = np.fromiter((e.ts for e in evs), np.float64, n)
    end = start + np.maximum(np.fromiter((e.dur for e in evs), np.float64, n), 0.0)
    names = [e.name for e in evs]
    cat, codes, uniq = categorical(names)
    cats_by_code = np.array([int(cl.classify(Kind.TIMER, s)) for s in uniq] or [0], np.int8)
    step = int_column([e.args.step for e in evs])
    table = make_table(
        {
            "start_us": start,
            "end_us": end,
            "kind": np.full(n, int(Kind.TIMER), np.int8),
            "category": cats_by_code[codes] if n else np.zeros(0, np.int8),
            "stream": int_column([e.tid for e in evs]),
            "name": cat,
            "mb_id": int_column([e.args.mb_id for e in evs]),
            "step": step,
        },
        DEVICE_COLUMNS,
    )
    return table, _timer_steps(start, end, step)


def _timer_steps(start: np.ndarray, end: np.ndarray, step: np.ndarray) -> tuple[Step, ...]:
    known = step >= 0
    if not known.any():
        return ()
    s, e, st = start[known], end[known], step[known]
    # Per step: first op start and last op end, grouped by a sort (no per-step scans).
    by_step = np.argsort(st, kind="stable")
    s, e, st = s[by_step], e[by_step], st[by_step]
    bounds = np.flatnonzero(np.r_[True, st[1:] != st[:-1]])
    numbers = st[bounds]
    firsts = np.minimum.reduceat(s, bounds)
    lasts = np.maximum.reduceat(e, bounds)
    order = np.argsort(firsts, kind="stable")
    numbers, firsts, lasts = numbers[order], firsts[order], lasts[order]
    out: list[Step] = []
    for i, num in enumerate(numbers):
        stop = firsts[i + 1] if i + 1 < len(numbers) else lasts[i]
        out.append(Step(int(num), float(firsts[i]), float(stop)))
    return tuple(out)
