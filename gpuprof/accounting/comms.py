"""The table of collective and point-to-point calls of one rank (``RankSummary.comms``).

:func:`build_comms` keeps, for each communication call the device ran inside the analysis
window, what the job-level analysis needs to match it with the same call on other ranks:
its process group, its position among this rank's calls of that group, the collective's
name and size, when the host issued it, and which step and microbatch it belongs to.

One device row is one call. NCCL runs one kernel per collective (a coalesced group of
collectives is one kernel too, and it is matched as one call on every rank alike); an
op-level timeline records one timer op per call.

Process groups of op-level timelines
    Framework timers do not name process groups, and a name such as
    ``grads-reduce-scatter`` is run by every pipeline stage, each in its *own* data-parallel
    group. Matching all of them by order would pair stage 0's reduce-scatter with stage 1's.
    When the trace says nothing and the rank's parallel layout is known, the group is
    derived from the op name and the layout (Megatron's conventions): data-parallel
    gradient/parameter collectives run among the ranks of one (pipeline, tensor) position,
    embedding-gradient all-reduces among the first and last stage of one data-parallel
    replica, layer-norm gradient all-reduces among one tensor-parallel group. Other
    unnamed collectives keep their op name as the group, so that only ranks that run an op
    of that name are matched with each other.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from gpuprof.accounting.summary import COMMS_COLUMNS
from gpuprof.model.table import Cat, Table, one_of
from gpuprof.model.timeline import Category, Kind, RankTrace

if TYPE_CHECKING:
    import pandas as pd

_COMM_CATEGORIES = (int(Category.COLLECTIVE), int(Category.P2P))
# Kernel names can be kilobytes of C++ template text; the table keeps a readable prefix.
_NAME_CHARS = 80


_EMPTY: list[Table] = []

# The dtype of each column (object: strings).
_COMMS_DTYPES: Mapping[str, str] = {
    "start_us": "float64",
    "end_us": "float64",
    "category": "int8",
    "name": "object",
    "coll_name": "object",
    "pg": "object",
    "seq": "int64",
    "bytes": "int64",
    "launch_us": "float64",
    "step": "int64",
    "mb_id": "int64",
    "peer": "int64",
}


def empty_comms() -> Table:
    """An empty table with the :data:`COMMS_COLUMNS` columns and their dtypes: one table,
    made once (most ranks of a job without communication ask for it), shared -- never
    modify it."""
    if not _EMPTY:
        _EMPTY.append(Table({c: np.empty(0, dtype=_COMMS_DTYPES[c]) for c in COMMS_COLUMNS}, COMMS_COLUMNS))
    return _EMPTY[0]


def timeline_group(name: str, parallel: Mapping[str, int]) -> str:
    """Process-group key of an unnamed timer collective, from its name and the layout.

    Returns ``""`` when the layout is unknown (the caller then keys by name alone).
    """
    if "pp_rank" not in parallel and "dp_rank" not in parallel:
        return ""
    pp = parallel.get("pp_rank", -1)
    tp = parallel.get("tp_rank", -1)
    dp = parallel.get("dp_rank", -1)
    low = name.lower()
    if "embedding" in low:
        return f"{low}[dp={dp},tp={tp}]"
    if "layernorm" in low:
        return f"{low}[pp={pp},dp={dp}]"
    if "grads" in low or "params" in low or "data-parallel" in low:
        return f"{low}[pp={pp},tp={tp}]"
    return ""


def _launch_times(trace: RankTrace, correlation: np.ndarray) -> np.ndarray:
    """Host start time of the runtime call that launched each device row (NaN unknown)."""
    out = np.full(correlation.size, np.nan)
    host = trace.host_cols
    if correlation.size == 0 or len(host) == 0:
        return out
    kind = host["kind"]
    corr = host["correlation"]
    runtime = ((kind == int(Kind.RUNTIME)) | (kind == int(Kind.DRIVER))) & (corr >= 0)
    if not runtime.any():
        return out
    # The first call of each correlation id; NaN for a row without one.
    ids, first = np.unique(corr[runtime], return_index=True)
    pos = np.minimum(np.searchsorted(ids, correlation), ids.size - 1)
    hit = (ids[pos] == correlation) & (correlation >= 0)
    out[hit] = host["start_us"][runtime][first][pos[hit]]
    return out


def _step_of(times: np.ndarray, trace: RankTrace) -> np.ndarray:
    """Number of the step whose span holds each time (-1 outside every step or NaN)."""
    out = np.full(times.size, -1, dtype=np.int64)
    if not trace.steps or times.size == 0:
        return out
    steps = sorted(trace.steps, key=lambda s: s.start_us)
    starts = np.array([s.start_us for s in steps])
    ends = np.array([s.end_us for s in steps])
    numbers = np.array([s.number for s in steps], dtype=np.int64)
    idx = np.searchsorted(starts, np.nan_to_num(times, nan=-np.inf), side="right") - 1
    ok = (idx >= 0) & ~np.isnan(times)
    idx_c = np.clip(idx, 0, len(steps) - 1)
    ok &= times < ends[idx_c]
    out[ok] = numbers[idx_c[ok]]
    return out


# ProcessGroupNCCL names each point-to-point call's record function after the two ranks
# (group ranks): "nccl:send 2->3" on the sender, "nccl:recv 3<-2" on the receiver.
_P2P_TITLE = re.compile(r"nccl:(send|recv) (\d+)(->|<-)(\d+)")


def _p2p_peers(trace: RankTrace, category: np.ndarray, launch: np.ndarray, pg: np.ndarray) -> np.ndarray:
    """Per row, the global rank at the other end of a point-to-point call (-1 unknown or not
    a point-to-point call): from the host's ``nccl:send a->b`` / ``nccl:recv a<-b`` range
    that holds the call's launch, its group rank mapped through the process group's ranks
    where the trace lists them."""
    out = np.full(category.size, -1, dtype=np.int64)
    p2p = (category == int(Category.P2P)) & ~np.isnan(launch)
    host = trace.host_cols
    if not p2p.any() or len(host) == 0:
        return out
    labels = host.labels("name")
    peer_of_code = np.full(len(labels), -1, dtype=np.int64)
    self_of_code = np.full(len(labels), -1, dtype=np.int64)
    for code, label in enumerate(labels):
        m = _P2P_TITLE.match(str(label))
        if m is not None:
            self_of_code[code] = int(m.group(2))
            peer_of_code[code] = int(m.group(4))
    if not (peer_of_code >= 0).any():
        return out
    codes = host.codes("name")
    titled = np.flatnonzero((codes >= 0) & (peer_of_code[np.maximum(codes, 0)] >= 0))
    starts = host["start_us"][titled]
    order = np.argsort(starts, kind="stable")
    titled, starts = titled[order], starts[order]
    ends = host["end_us"][titled]
    ranks_of = {g.name: g.ranks for g in trace.process_groups if g.ranks}
    for i in np.flatnonzero(p2p).tolist():
        # The latest titled range that started by the launch and holds it.
        k = int(np.searchsorted(starts, launch[i], side="right")) - 1
        if k < 0 or ends[k] < launch[i]:
            continue
        code = codes[titled[k]]
        peer, me = int(peer_of_code[code]), int(self_of_code[code])
        members = ranks_of.get(str(pg[i]))
        if members is not None and me < len(members) and members[me] == trace.rank and peer < len(members):
            # Group ranks, ProcessGroupNCCL's own numbering: the title's first number is
            # this rank's place in the group.
            out[i] = int(members[peer])
        elif me == trace.rank:
            # A title that numbers this rank by its global rank (other writers) is global
            # throughout.
            out[i] = peer
        # else: group ranks of a group the trace does not list: not known
    return out


def build_comms(trace: RankTrace, lo_us: float, hi_us: float) -> pd.DataFrame:
    """:func:`comms_table` as a pandas DataFrame."""
    return comms_table(trace, lo_us, hi_us).to_pandas()


def comms_table(trace: RankTrace, lo_us: float, hi_us: float) -> Table:
    """Collective and point-to-point calls of ``trace`` that overlap ``[lo_us, hi_us)``.

    Returns a table with the columns of :data:`gpuprof.accounting.summary.COMMS_COLUMNS`
    (times in microseconds on the rank's own clock, sizes in bytes), sorted by device
    start. Intervals are not clipped to the window: the cross-rank analysis needs a call's
    true start and end to match it with other ranks. ``seq`` counts this rank's calls of
    one process group inside the window, in the order the host issued them.
    """
    cols = trace.device_cols
    if len(cols) == 0:
        return empty_comms()
    cat = cols["category"]
    start = cols["start_us"]
    end = cols["end_us"]
    keep = one_of(cat, _COMM_CATEGORIES) & (end > lo_us) & (start < hi_us)
    if not keep.any():
        return empty_comms()
    rows = np.flatnonzero(keep)
    correlation = cols["correlation"][rows]
    launch = _launch_times(trace, correlation)
    names = _strings(cols.cat("name"), rows, _NAME_CHARS)
    coll = _strings(cols.cat("coll_name"), rows)
    pg = _strings(cols.cat("pg"), rows)
    is_timer = cols["kind"][rows] == int(Kind.TIMER)
    if is_timer.any():
        # Timer ops carry no process group: derive one (see the module docstring).
        for i in np.flatnonzero(is_timer & (pg == "")):
            pg[i] = timeline_group(str(names[i]), trace.parallel) or f"{names[i]}"
    step = cols["step"][rows].astype(np.int64)
    unknown_step = step < 0
    if unknown_step.any():
        when = np.where(np.isnan(launch), start[keep], launch)
        step[unknown_step] = _step_of(when[unknown_step], trace)
    t_start = start[keep].astype(np.float64)
    # Issue order: the host launch when known (streams may reorder device starts), else
    # the device start. The table's own order stays by device start.
    order_key = np.where(np.isnan(launch), t_start, launch)
    order = np.lexsort((t_start, order_key))
    seq = np.zeros(rows.size, dtype=np.int64)
    counts: dict[str, int] = {}
    for i in order.tolist():  # the rank of each call among its group's, in issue order
        g = pg[i]
        seq[i] = counts.get(g, 0)
        counts[g] = seq[i] + 1
    by_start = np.argsort(t_start, kind="stable")
    table = Table(
        {
            "start_us": t_start,
            "end_us": end[keep].astype(np.float64),
            "category": cat[keep].astype(np.int8),
            "name": names,
            "coll_name": coll,
            "pg": pg,
            "seq": seq,
            "bytes": cols["bytes"][rows].astype(np.int64),
            "launch_us": launch,
            "step": step,
            "mb_id": cols["mb_id"][rows].astype(np.int64),
            "peer": _p2p_peers(trace, cat[keep], launch, pg),
        },
        COMMS_COLUMNS,
    )
    return table if bool(np.all(by_start == np.arange(rows.size))) else table.take(by_start)


def _strings(col: Cat, rows: np.ndarray, chars: int | None = None) -> np.ndarray:
    """The rows' values of a categorical column as strings (``"nan"`` where missing, as
    pandas' ``astype(str)`` writes it), cut to ``chars`` characters."""
    labels = [str(c)[:chars] for c in col.categories] + ["nan"[:chars]]
    table = np.empty(len(labels), dtype=object)
    table[:] = labels
    codes = col.codes[rows].astype(np.int64)
    return table[np.where(codes < 0, len(labels) - 1, codes)]  # type: ignore[no-any-return]
