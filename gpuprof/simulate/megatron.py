"""Writing a simulated pipeline job as a Megatron-style op-level timer timeline.

Megatron-LM's timers, dumped as one Chrome trace-event JSON for the whole job (as in the
real ``megatron-pp4-timeline`` trace), look like this:

* ``pid`` is the data-parallel rank (process named ``DP rank [d]``); each worker, one
  (pid, PP rank, TP rank), has five threads named ``PP rank k, TP rank t, <kind>`` with
  kind ``compute``, ``pp-comm``, ``tp-comm``, ``dp-comm`` and ``misc``, numbered in
  Megatron's rank order (``tid = ((k * dp + d) * tp + t) * 5 + kind``);
* ops are complete (``X``) events, ``cat`` = ``name``: ``forward-compute`` and
  ``backward-compute`` per microbatch and model chunk on the compute thread (with the
  ``optimizer``), ``forward-send`` / ``forward-recv`` / ``backward-send`` /
  ``backward-recv`` on the pp-comm thread, ``grads-reduce-scatter``,
  ``params-all-gather`` (distributed optimizer; ``all-grads-sync`` for a plain
  data-parallel all-reduce) and ``optimizer-clip-main-grad`` on the dp-comm thread;
* ``args`` = ``{"step", "model_chunk", "mb_id", "seq_id"}``: ``mb_id`` and
  ``model_chunk`` are -1 on communication ops, ``seq_id`` counts a worker's ops of one
  name within the step;
* the steady-state 1F1B exchanges are single batched calls
  (``send_forward_recv_backward`` on one stage, the matching ``send_backward_recv_forward``
  on the next) that both timers cover: the two ops of such a call are written with the
  same span on both ranks, from the first of its two transfers to start to the last to end;
* times are microseconds from the start of the job; the metadata events come last;
  ``meta-<trial>.yaml`` beside the timeline gives the parallel sizes.

The times come from the simulation (:meth:`RankSim.timer`, recorded by the pipeline
scenario as Megatron's timers would be): compute ops span their kernels on the device,
a transfer spans the data moving (a receive's wait for its sender is a gap before it), a
collective spans its NCCL kernel, the wait for late ranks included.
"""

from __future__ import annotations

import gzip
import itertools
import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from gpuprof.simulate.engine import RankSim

LANES = ("compute", "pp-comm", "tp-comm", "dp-comm", "misc")
TRIAL = "sim"
_BATCHED = {("forward-send", "backward-recv"), ("backward-send", "forward-recv")}
_ENC = msgspec.json.Encoder()


def timeline_name(compress: bool) -> str:
    return f"timeline-{TRIAL}.json" + (".gz" if compress else "")


def _tid(pp: int, dp: int, tp_rank: int, dp_size: int, tp_size: int, lane: str) -> int:
    return ((pp * dp_size + dp) * tp_size + tp_rank) * len(LANES) + LANES.index(lane)


Op = tuple[str, str, float, float, dict[str, Any]]  # lane, name, start, end, args


def _sorted_ops(sim: RankSim) -> list[Op]:
    return sorted(sim.timers or [], key=lambda o: (o[2], o[3]))


def _batched_spans(ops_by_rank: Mapping[int, list[Op]]) -> dict[tuple[int, int], tuple[float, float]]:
    """The span of every batched exchange, keyed by (rank, op index).

    A send followed on the pp-comm lane by a receive, with no compute between, is one
    ``send_forward_recv_backward`` (or ``send_backward_recv_forward``) call when the peer
    has the matching pair (the same two transfers the other way round). Megatron's two
    timers then cover the same span on both ranks: from the first of the two transfers
    to start to the last to end. A pair without its match keeps its own spans.
    """
    pairs: dict[frozenset[Any], list[tuple[int, int, int, float, float]]] = defaultdict(list)
    for rank, ops in ops_by_rank.items():
        lane = [(i, o) for i, o in enumerate(ops) if o[0] == "pp-comm"]
        for (i, a), (j, b) in itertools.pairwise(lane):
            if (a[1], b[1]) not in _BATCHED or "transfer" not in a[4] or "transfer" not in b[4]:
                continue
            if any(o[0] == "compute" and a[2] <= o[2] < b[2] for o in ops):
                continue
            pairs[frozenset({a[4]["transfer"], b[4]["transfer"]})].append((rank, i, j, b[2], b[3]))
    spans: dict[tuple[int, int], tuple[float, float]] = {}
    for members in pairs.values():
        if len(members) != 2:
            continue
        lo = min(m[3] for m in members)
        hi = max(m[4] for m in members)
        for rank, i, j, _, _ in members:
            spans[(rank, i)] = spans[(rank, j)] = (lo, hi)
    return spans


def _written_ops(rank: int, ops: list[Op], spans: Mapping[tuple[int, int], tuple[float, float]]) -> list[Op]:
    """The rank's ops as written: batched spans applied, Megatron's args with ``seq_id``."""
    placed = [(o[0], o[1], *spans.get((rank, i), (o[2], o[3])), o[4]) for i, o in enumerate(ops)]
    counts: dict[tuple[int, str], int] = defaultdict(int)
    out: list[Op] = []
    for lane, name, start, end, args in sorted(placed, key=lambda o: (o[2], o[3])):
        key = (args.get("step", -1), name)
        written = {
            "step": args.get("step", -1),
            "model_chunk": args.get("model_chunk", -1),
            "mb_id": args.get("mb_id", -1),
            "seq_id": counts[key],
        }
        counts[key] += 1
        out.append((lane, name, start, end, written))
    return out


def write_timeline(
    out_dir: Path, sims: Sequence[RankSim], parallel: Mapping[str, int], *, compress: bool = True
) -> Path:
    """Write the job's timeline and its ``meta-<trial>.yaml``; returns the timeline's path.

    Ranks are laid out as Megatron does (``rank = (pp * dp_size + dp) * tp_size + tp``).
    Written under a temporary name and renamed, like the Kineto traces.
    """
    dp_size, tp_size = int(parallel["dp_size"]), int(parallel.get("tp_size", 1))
    pp_size = int(parallel["pp_size"])
    rows: list[tuple[int, int, int, int, str, float, bytes]] = []
    ops_by_rank = {sim.rank: _sorted_ops(sim) for sim in sims}
    spans = _batched_spans(ops_by_rank)
    for sim in sims:
        pp, rest = divmod(sim.rank, dp_size * tp_size)
        dp, tp = divmod(rest, tp_size)
        for lane, name, s, e, args in _written_ops(sim.rank, ops_by_rank[sim.rank], spans):
            ev = {
                "name": name,
                "cat": name,
                "pid": dp,
                "tid": _tid(pp, dp, tp, dp_size, tp_size, lane),
                "ts": round(s, 3),
                "dur": round(max(e - s, 0.0), 3),
                "ph": "X",
                "args": args,
            }
            rows.append((args["step"], pp, dp, tp, name, s, _ENC.encode(ev)))
    rows.sort(key=lambda r: r[:6])
    meta: list[bytes] = []
    for pp in range(pp_size):
        for dp in range(dp_size):
            for tp in range(tp_size):
                for lane in LANES:
                    tid = _tid(pp, dp, tp, dp_size, tp_size, lane)
                    meta.append(
                        _ENC.encode(
                            {
                                "name": "thread_name",
                                "pid": dp,
                                "tid": tid,
                                "ph": "M",
                                "args": {"name": f"PP rank {pp}, TP rank {tp}, {lane}"},
                            }
                        )
                    )
                    meta.append(
                        _ENC.encode(
                            {
                                "name": "thread_sort_index",
                                "pid": dp,
                                "tid": tid,
                                "ph": "M",
                                "args": {"sort_index": tid},
                            }
                        )
                    )
    for dp in range(dp_size):
        meta.append(
            _ENC.encode({"name": "process_name", "pid": dp, "ph": "M", "args": {"name": f"DP rank [{dp}]"}})
        )
    body = b"[" + b", ".join([r[-1] for r in rows] + meta) + b"]"
    path = out_dir / timeline_name(compress)
    tmp = path.with_name(path.name + ".part")
    tmp.write_bytes(gzip.compress(body, mtime=0) if compress else body)
    os.replace(tmp, path)
    yaml = (
        f"trial_name: {TRIAL}\nrun_id: 0\ndp_size: {dp_size}\ndsp_size: 1\npp_size: {pp_size}\n"
        f"tp_size: {tp_size}\nvpp_size: {int(parallel.get('vpp_size', 1))}\nworld_size: {len(sims)}\n"
    )
    (out_dir / f"meta-{TRIAL}.yaml").write_text(yaml)
    return path
