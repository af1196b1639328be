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

import numpy as np
import pandas as pd

from gpuprof.analysis.summary import COMMS_COLUMNS
from gpuprof.model.timeline import Category, Kind, RankTrace

_COMM_CATEGORIES = (int(Category.COLLECTIVE), int(Category.P2P))
# Kernel names can be kilobytes of C++ template text; the table keeps a readable prefix.
_NAME_CHARS = 80


_EMPTY: list[pd.DataFrame] = []


def empty_comms() -> pd.DataFrame:
    """An empty table with the :data:`COMMS_COLUMNS` columns and their dtypes: one table,
    made once (most ranks of a job without communication ask for it; building a DataFrame
    costs a millisecond), shared -- never modify it."""
    if not _EMPTY:
        _EMPTY.append(_new_empty())
    return _EMPTY[0]


def _new_empty() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "start_us": pd.Series([], dtype="float64"),
            "end_us": pd.Series([], dtype="float64"),
            "category": pd.Series([], dtype="int8"),
            "name": pd.Series([], dtype="object"),
            "coll_name": pd.Series([], dtype="object"),
            "pg": pd.Series([], dtype="object"),
            "seq": pd.Series([], dtype="int64"),
            "bytes": pd.Series([], dtype="int64"),
            "launch_us": pd.Series([], dtype="float64"),
            "step": pd.Series([], dtype="int64"),
            "mb_id": pd.Series([], dtype="int64"),
            "peer": pd.Series([], dtype="int64"),
        },
        columns=list(COMMS_COLUMNS),
    )


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
        if members is not None and me != trace.rank:
            # Group ranks (ProcessGroupNCCL's own numbering): the title's first number is
            # this rank's place in the group. A title that numbers this rank by its global
            # rank (other tools, older simulators) is taken as global throughout.
            if not (me < len(members) and members[me] == trace.rank and peer < len(members)):
                continue
            peer = int(members[peer])
        elif members is None and me != trace.rank:
            continue  # group ranks of a group the trace does not list: not known
        out[i] = peer
    return out


def build_comms(trace: RankTrace, lo_us: float, hi_us: float) -> pd.DataFrame:
    """Collective and point-to-point calls of ``trace`` that overlap ``[lo_us, hi_us)``.

    Returns a table with the columns of :data:`gpuprof.analysis.summary.COMMS_COLUMNS`
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
    keep = np.isin(cat, _COMM_CATEGORIES) & (end > lo_us) & (start < hi_us)
    if not keep.any():
        return empty_comms()
    rows = trace.device.loc[keep]
    correlation = rows["correlation"].to_numpy()
    launch = _launch_times(trace, correlation)
    names = rows["name"].astype(str).str.slice(0, _NAME_CHARS).to_numpy(dtype=object)
    coll = rows["coll_name"].astype(str).to_numpy(dtype=object)
    pg = rows["pg"].astype(str).to_numpy(dtype=object)
    is_timer = rows["kind"].to_numpy() == int(Kind.TIMER)
    if is_timer.any():
        # Timer ops carry no process group: derive one (see the module docstring).
        for i in np.flatnonzero(is_timer & (pg == "")):
            pg[i] = timeline_group(str(names[i]), trace.parallel) or f"{names[i]}"
    step = rows["step"].to_numpy().astype(np.int64)
    unknown_step = step < 0
    if unknown_step.any():
        when = np.where(np.isnan(launch), start[keep], launch)
        step = step.copy()
        step[unknown_step] = _step_of(when[unknown_step], trace)
    table = pd.DataFrame(
        {
            # The rows' columns read once above (a DataFrame column read costs tens of µs).
            "start_us": start[keep].astype(np.float64, copy=False),
            "end_us": end[keep].astype(np.float64, copy=False),
            "category": cat[keep].astype(np.int8),
            "name": names,
            "coll_name": coll,
            "pg": pg,
            "seq": np.zeros(len(rows), dtype=np.int64),
            "bytes": rows["bytes"].to_numpy().astype(np.int64),
            "launch_us": launch,
            "step": step,
            "mb_id": rows["mb_id"].to_numpy().astype(np.int64),
            "peer": _p2p_peers(trace, cat[keep], launch, pg),
        },
        columns=list(COMMS_COLUMNS),
    )
    # Issue order: the host launch when known (streams may reorder device starts), else
    # the device start. The table's own order stays by device start.
    order_key = np.where(np.isnan(launch), table["start_us"].to_numpy(), launch)
    order = np.lexsort((table["start_us"].to_numpy(), order_key))
    ranked = table.iloc[order]
    seq = ranked.groupby("pg", sort=False, observed=True).cumcount().to_numpy()
    table.loc[ranked.index, "seq"] = seq.astype(np.int64)
    return table.sort_values("start_us", kind="stable", ignore_index=True)
