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
* with ``batched_p2p`` the steady-state 1F1B exchanges are single batched calls
  (``send_forward_recv_backward`` on one stage, the matching ``send_backward_recv_forward``
  on the next) that both stages wait for: the two ops of such a call have the same span on
  both ranks, the transfer;
* times are microseconds from the start of the job; the metadata events come last;
  ``meta-<trial>.yaml`` beside the timeline gives the parallel sizes.

The times come from the simulation (:meth:`RankSim.timer`, recorded by the pipeline
scenario as Megatron's timers would be) and are written as exporters of such timelines
write them: compute ops span their kernels on the device; communication spans only its
transfer (the exporter moves an op's start to its end minus the transfer time), so that a
receive's wait for its sender and a collective's wait for its late members are untimed
gaps before the op.
"""

from __future__ import annotations

import gzip
import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from gpuprof.simulate.rank import RankSim

LANES = ("compute", "pp-comm", "tp-comm", "dp-comm", "misc")
TRIAL = "sim"
_ENC = msgspec.json.Encoder()


def timeline_name(compress: bool) -> str:
    return f"timeline-{TRIAL}.json" + (".gz" if compress else "")


def _tid(pp: int, dp: int, tp_rank: int, dp_size: int, tp_size: int, lane: str) -> int:
    return ((pp * dp_size + dp) * tp_size + tp_rank) * len(LANES) + LANES.index(lane)


Op = tuple[str, str, float, float, dict[str, Any]]  # lane, name, start, end, args


def _sorted_ops(sim: RankSim) -> list[Op]:
    return sorted(sim.timers or [], key=lambda o: (o[2], o[3]))


def _written_ops(ops: list[Op]) -> list[Op]:
    """The rank's ops as written, with Megatron's args (``seq_id`` counted per name)."""
    placed = ops
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
    The simulated ranks are TP rank 0 of each (pipeline, data-parallel) position (simulated
    rank ``stage * dp_size + replica``): with ``tp_size > 1`` the timeline holds those
    workers only, as exports that keep one TP rank per position do, and ``meta`` gives the
    job's whole world size. Written under a temporary name and renamed, like the Kineto
    traces.
    """
    dp_size, tp_size = int(parallel["dp_size"]), int(parallel.get("tp_size", 1))
    pp_size = int(parallel["pp_size"])
    rows: list[tuple[int, int, int, int, str, float, bytes]] = []
    ops_by_rank = {sim.rank: _sorted_ops(sim) for sim in sims}
    for sim in sims:
        pp, dp = divmod(sim.rank, dp_size)
        tp = 0
        for lane, name, s, e, args in _written_ops(ops_by_rank[sim.rank]):
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
            for tp in range(1):  # TP rank 0 of each position
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
        f"tp_size: {tp_size}\nvpp_size: {int(parallel.get('vpp_size', 1))}\nworld_size: {len(sims) * tp_size}\n"
    )
    (out_dir / f"meta-{TRIAL}.yaml").write_text(yaml)
    return path
