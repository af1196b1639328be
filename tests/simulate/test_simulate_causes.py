"""The jobs of issue 28, one cause each, and the export written as real ones are.

Each scenario's ground truth is checked for consistency (compute plus lost time is the
window; the fix it is built to show saves what the scenario says, on the preset's own
size) and each timeline against what real Megatron exports show: communication spans its
transfer only, the fast replicas' last stage waits untimed before
``layernorm-grads-all-reduce`` for the slow replica's, ops are not packed back to back, and
every worker is named by the global rank ``(stage * dp + replica) * tp``. The timelines
are read with plain JSON, except where the test is that gpuprof's reader names the ranks
as the truth does. Nothing here runs the analyzer.
"""

from __future__ import annotations

import gzip
import itertools
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from gpuprof.errors import GpuprofError
from gpuprof.readers import load_all
from gpuprof.simulate import generate, prepare, read_truth
from gpuprof.simulate.fixes import (
    JOB_FIXES,
    PEER_MEDIAN_COLLECTIVE,
    PEER_MEDIAN_HOST,
    PEER_MEDIAN_LINK,
    WHATIF_HELP,
    WHATIFS,
    others_median,
)
from gpuprof.simulate.job import job_step_us, simulate_job
from gpuprof.simulate.platform import CUDA
from gpuprof.simulate.scenarios_single import loader_contention

_THREAD = re.compile(r"PP rank (\d+), TP rank (\d+), (\S+)")


class Op(NamedTuple):
    replica: int
    stage: int
    lane: str
    name: str
    start_us: float
    end_us: float
    step: int


def _ops(out: Path) -> list[Op]:
    with gzip.open(out / "timeline-sim.json.gz", "rt") as fh:
        events: list[dict[str, Any]] = json.load(fh)
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    ops = []
    for e in events:
        if e["ph"] != "X":
            continue
        m = _THREAD.fullmatch(threads[(e["pid"], e["tid"])])
        assert m is not None
        ops.append(
            Op(e["pid"], int(m.group(1)), m.group(3), e["name"], e["ts"], e["ts"] + e["dur"], e["args"]["step"])
        )
    return sorted(ops, key=lambda o: (o.start_us, o.end_us))


def _worker(ops: list[Op], replica: int, stage: int, step: int) -> list[Op]:
    return [o for o in ops if (o.replica, o.stage, o.step) == (replica, stage, step)]


def _saving_pct(scenario: str, fix: str, **knobs: Any) -> float:
    """The true saving of one fix on a scenario (the baseline and the fixed job simulated,
    as ``whatif_truth`` does, without the other fixes' runs)."""
    _, plan = prepare(scenario, knobs)
    base = job_step_us(simulate_job(plan, 0, platform=CUDA))
    fixed = job_step_us(simulate_job(plan, 0, fixes=frozenset({fix}), platform=CUDA))
    return 100.0 * (1.0 - fixed / base)


# -- the vocabulary ---------------------------------------------------------------------------


def test_the_new_fixes_are_job_level_names_of_the_vocabulary() -> None:
    for fix in (PEER_MEDIAN_LINK, PEER_MEDIAN_COLLECTIVE, PEER_MEDIAN_HOST):
        assert fix in WHATIFS and fix in JOB_FIXES and WHATIF_HELP[fix]
    assert WHATIFS[-1] == "no_variation"  # the bound stays last


def test_peer_medians_never_slow_a_member_down() -> None:
    # the median of the others: a 2-member group gets its faster member's speed
    assert others_median([3.0, 1.0], [[0, 1]]) == [1.0, 1.0]
    assert others_median([1.0, 1.0, 1.0, 10.0], [[0, 1, 2, 3]]) == [1.0, 1.0, 1.0, 1.0]
    assert others_median([2.0, 5.0, 7.0], [[0, 1, 2]]) == [2.0, 4.5, 3.5]
    assert others_median([4.0, 1.0], [[0]]) == [4.0, 1.0]  # alone in its group, or in none


# -- the export, as real ones are written -------------------------------------------------------


@pytest.fixture(scope="module")
def slow_worker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("slow_worker")
    return generate("megatron_slow_worker", out, microbatches=6, steps=2, stage_ms=0.5, whatifs=False)


def test_fast_replicas_last_stage_waits_untimed_before_layernorm_grads_all_reduce(slow_worker: Path) -> None:
    """As in the real AR export: the slow replica's last stage finishes its backward late;
    the others' last stage, done long before, starts layernorm-grads-all-reduce only then
    (the untimed loss all-reduce over the last stage's replicas sits in the gap)."""
    ops, last = _ops(slow_worker), 3
    for step in (1, 2):
        slow = _worker(ops, 0, last, step)
        slow_done = max(o.end_us for o in slow if o.name == "backward-compute")
        for replica in (1, 2, 3):
            mine = _worker(ops, replica, last, step)
            ln = next(o for o in mine if o.name == "layernorm-grads-all-reduce")
            before = max(o.end_us for o in mine if o.end_us <= ln.start_us)
            own_done = max(o.end_us for o in mine if o.name == "backward-compute")
            assert before - own_done < 0.05 * (slow_done - own_done)  # nothing timed in the gap
            assert ln.start_us >= slow_done > own_done
            assert ln.start_us - before > 0.5 * (slow_done - own_done)
        # the earlier stages of the fast replicas do not wait before theirs (a TP collective)
        for stage in (1, 2):
            mine = _worker(ops, 1, stage, step)
            ln = next(o for o in mine if o.name == "layernorm-grads-all-reduce")
            own_done = max(o.end_us for o in mine if o.name == "backward-compute")
            assert ln.start_us - own_done < 0.1 * (slow_done - own_done)


def test_without_loss_dp_sync_the_last_stage_does_not_wait_there(tmp_path: Path) -> None:
    out = generate(
        "megatron_slow_worker", tmp_path, microbatches=6, steps=1, stage_ms=0.5, loss_dp_sync=False, whatifs=False
    )
    ops = _ops(out)
    slow_done = max(o.end_us for o in _worker(ops, 0, 3, 1) if o.name == "backward-compute")
    mine = _worker(ops, 1, 3, 1)
    ln = next(o for o in mine if o.name == "layernorm-grads-all-reduce")
    own_done = max(o.end_us for o in mine if o.name == "backward-compute")
    assert ln.start_us - own_done < 0.1 * (slow_done - own_done)
    # the wait moved to the next collective over the replicas: embedding (first stage) or
    # gradients, untimed before it
    assert next(o for o in mine if o.name == "grads-reduce-scatter").start_us >= slow_done


def test_collectives_start_together_and_ops_are_not_packed(slow_worker: Path) -> None:
    ops = _ops(slow_worker)
    # every member of a data-parallel collective starts it at the same instant (its transfer)
    starts: dict[tuple[str, int, int], set[float]] = defaultdict(set)
    for o in ops:
        if o.name in ("grads-reduce-scatter", "params-all-gather"):
            starts[(o.name, o.stage, o.step)].add(round(o.start_us, 3))
    assert starts and all(len(v) == 1 for v in starts.values())
    # the stage after the slow worker waits for its activations: untimed gaps before its
    # receives, each op the transfer alone
    mine = _worker(ops, 0, 1, 2)
    recvs = [i for i, o in enumerate(mine) if o.name == "forward-recv"]
    waits = [mine[i].start_us - max(o.end_us for o in mine[:i]) for i in recvs if i > 0]
    transfer_us = 4.0 * 1e6 / (200.0 * 1e3)  # act_mb over link_gbs, the preset's
    assert all(mine[i].end_us - mine[i].start_us == pytest.approx(transfer_us, abs=1e-2) for i in recvs)
    assert sum(w > 10 * transfer_us for w in waits) >= len(waits) // 2
    # Python between the timers: a gap before every compute op, small against the op
    gaps = []
    for replica in range(4):
        for stage in range(4):
            comp = [o for o in _worker(ops, replica, stage, 2) if o.lane == "compute"]
            for a, b in itertools.pairwise(comp):
                if not any(a.end_us <= o.start_us < b.start_us for o in _worker(ops, replica, stage, 2)):
                    gaps.append((b.start_us - a.end_us) / (b.end_us - b.start_us))
    assert gaps and min(gaps) > 0 and max(gaps) < 0.15


@pytest.fixture(scope="module")
def slow_link(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("slow_link")
    return generate("megatron_slow_link", out, dp=3, microbatches=4, steps=1)


def test_point_to_point_ops_span_their_transfer_on_the_slow_link_and_elsewhere(slow_link: Path) -> None:
    nominal_us = 24.0 * 1e6 / (50.0 * 1e3)  # the preset's act_mb over link_gbs
    for o in _ops(slow_link):
        if o.lane != "pp-comm":
            continue
        crosses = {o.stage, o.stage + (1 if o.name.startswith("forward-send") or o.name == "backward-recv" else -1)}
        slow = o.replica == 0 and crosses == {1, 2}
        assert o.end_us - o.start_us == pytest.approx(nominal_us * (10.0 if slow else 1.0), abs=1e-2), o


def test_slow_link_truth_names_both_ends_as_the_reader_names_the_workers(slow_link: Path) -> None:
    truth = read_truth(slow_link)
    tp, dp = truth["knobs"]["tp"], truth["knobs"]["dp"]
    traces = load_all([slow_link])
    assert len(traces) == 4 * dp
    by_position = {}
    for t in traces:
        pp, d = t.parallel["pp_rank"], t.parallel["dp_rank"]
        assert t.rank == (pp * dp + d) * tp
        by_position[(pp, d)] = t.rank
    ends = [by_position[(1, 0)], by_position[(2, 0)]]
    assert truth["whatif"]["culprit_ranks"]["peer_median_link"] == ends == [3 * tp, 6 * tp]  # (stage * dp + replica) * tp
    assert truth["expected"]["culprit_ranks"] == ends
    assert truth["whatif"]["intended"] == ["peer_median_link"]
    assert {int(r["rank"]) for r in truth["ranks"]} == set(by_position.values())


# -- each scenario's truth ---------------------------------------------------------------------

SMALL = {
    "megatron_slow_stage": ({"dp": 2, "microbatches": 8, "steps": 1}, "balanced_stages"),
    "megatron_slow_dp_group": ({"dp": 2, "microbatches": 4, "steps": 1}, "peer_median_collective"),
    "slow_host": ({"steps": 2, "layers": 3}, "peer_median_host"),
    "dataloader_contention": ({"steps": 3, "layers": 3}, "no_dataloader"),
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_truth_is_consistent(tmp_path: Path, name: str) -> None:
    knobs, fix = SMALL[name]
    truth = read_truth(generate(name, tmp_path, **knobs))
    for r in truth["ranks"]:
        assert r["compute_us"] + sum(r["lost_us"].values()) == pytest.approx(r["window_us"], rel=1e-6)
    wi = truth["whatif"]
    assert wi["intended"] == [fix] and wi["savings_pct"][fix] > 3.0
    assert wi["savings_pct"]["all"] >= wi["savings_pct"][fix] - 0.5


def test_slow_dp_group_truth_names_the_stage_group(tmp_path: Path) -> None:
    truth = read_truth(generate("megatron_slow_dp_group", tmp_path, **SMALL["megatron_slow_dp_group"][0]))
    tp, dp = truth["knobs"]["tp"], truth["knobs"]["dp"]
    group = [(1 * dp + d) * tp for d in range(dp)]  # stage 1's replicas
    assert truth["whatif"]["culprit_ranks"]["peer_median_collective"] == group
    assert truth["expected"]["culprit_ranks"] == group


# The presets at their own size: the saving the scenario is built to show (issue 28).
PRESET_SAVINGS = [
    ("megatron_slow_stage", "balanced_stages", {}, (15.0, 25.0)),
    ("megatron_slow_link", "peer_median_link", {}, (15.0, 25.0)),
    ("megatron_slow_dp_group", "peer_median_collective", {}, (10.0, 17.0)),
    ("slow_host", "peer_median_host", {}, (15.0, 35.0)),
]


@pytest.mark.parametrize(("name", "fix", "knobs", "band"), PRESET_SAVINGS, ids=[p[0] for p in PRESET_SAVINGS])
def test_each_preset_saves_what_it_is_built_to_show(
    name: str, fix: str, knobs: dict[str, Any], band: tuple[float, float]
) -> None:
    lo, hi = band
    assert lo <= _saving_pct(name, fix, **knobs) <= hi


# -- a slow worker in the last stage of a DP 2 x PP 4 job --------------------------------------


def test_slow_last_stage_worker_of_two_replicas(tmp_path: Path) -> None:
    out = generate("megatron_slow_worker", tmp_path, dp=2, slow_rank=6, microbatches=6, steps=1, stage_ms=0.5)
    truth = read_truth(out)
    assert truth["expected"]["culprit_ranks"] == [24]  # stage 3, replica 0, TP 4
    wi = truth["whatif"]
    assert wi["culprit_ranks"]["peer_median_compute"] == [24]  # its peer (rank 28) keeps its speed
    # At its one peer's speed (the median of the *other* replicas: with two, the other one),
    # not halfway to it: the job loses most of what the slow GPU cost it.
    assert wi["savings_pct"]["peer_median_compute"] > 30.0


# -- a slow host ----------------------------------------------------------------------------------


def _kineto(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") as fh:
        events: list[dict[str, Any]] = json.load(fh)["traceEvents"]
    return events


def _op_us(events: list[dict[str, Any]], name: str) -> float:
    durs = [e["dur"] for e in events if e.get("cat") == "cpu_op" and e["name"] == name]
    return sum(durs) / len(durs)


def test_slow_host_arrives_last_at_every_collective_and_its_fix_runs_its_host_at_peer_speed(
    tmp_path: Path,
) -> None:
    knobs = {"ranks": 3, "steps": 2, "layers": 4, "slow_host_rank": 1}
    base = generate("slow_host", tmp_path / "base", whatifs=False, **knobs)
    fixed = generate("slow_host", tmp_path / "fixed", whatif="peer_median_host", whatifs=False, **knobs)
    ranks = [_kineto(base / f"rank{r}.pt.trace.json.gz") for r in range(3)]
    # the last to arrive waits least: the slow host's NCCL kernels are the shortest
    nccl = [[e["dur"] for e in ev if e.get("cat") == "kernel" and "AllReduce" in e["name"]] for ev in ranks]
    assert len(nccl[0]) == len(nccl[1]) == len(nccl[2]) > 2
    assert all(d[1] < min(d[0], d[2]) for d in zip(*nccl))
    # its operators take twice as long on the host; with the fix as long as its peers'
    slow, peer = _op_us(ranks[1], "aten::linear"), _op_us(ranks[0], "aten::linear")
    assert slow == pytest.approx(2.0 * peer, rel=0.05)
    again = _op_us(_kineto(fixed / "rank1.pt.trace.json.gz"), "aten::linear")
    assert again == pytest.approx(peer, rel=0.05)
    truth = read_truth(base)
    assert truth["expected"]["culprit_ranks"] == [1]
    lost = {r["rank"]: r["lost_us"] for r in truth["ranks"]}
    assert lost[1]["host"] > lost[0]["host"] and lost[0]["straggler"] > lost[1]["straggler"]


# -- DataLoader workers competing for the host's cores ---------------------------------------------


def test_loader_contention_model() -> None:
    # one core, two workers needing half a core together: the main thread gets 1 / 1.5
    assert loader_contention(5_000.0, 10_000.0, 2, 1) == pytest.approx(1.5)
    assert loader_contention(5_000.0, 10_000.0, 2, 2) == 1.0  # they fit beside it
    assert loader_contention(40_000.0, 10_000.0, 2, 2) == pytest.approx(1.5)  # at most 2 cores busy
    assert loader_contention(5_000.0, None, 4, 1) == pytest.approx(2.0)  # first step: one core's worth


def test_no_dataloader_under_contention_is_the_job_with_workers(tmp_path: Path) -> None:
    knobs = {"steps": 3, "layers": 3}
    free = read_truth(generate("dataloader_contention", tmp_path / "free", host_cores=0, **knobs))
    busy = read_truth(generate("dataloader_contention", tmp_path / "busy", **knobs))
    assert busy["whatif"]["baseline_step_us"] == free["whatif"]["baseline_step_us"]  # same job as written
    assert busy["whatif"]["savings_pct"]["no_dataloader"] < 0.7 * free["whatif"]["savings_pct"]["no_dataloader"]
    # the fixed job: no wait for data, and the training process's operators slower
    base = _kineto(tmp_path / "busy" / "rank0.pt.trace.json.gz")
    fixed_dir = generate("dataloader_contention", tmp_path / "fixed", whatif="no_dataloader", whatifs=False, **knobs)
    fixed = _kineto(fixed_dir / "rank0.pt.trace.json.gz")
    waits = [e["dur"] for e in fixed if "DataLoader" in e.get("name", "") and e.get("ph") == "X"]
    assert waits and max(waits) < 10.0
    assert _op_us(fixed, "aten::linear") > 1.2 * _op_us(base, "aten::linear")


# -- bad knobs ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "knobs", "message"),
    [
        ("megatron_slow_link", {"slow_link": 3}, "slow_link must be -1 or in 0..2"),
        ("megatron_slow_link", {"slow_link_replica": 4}, "slow_link_replica must be in 0..3"),
        ("megatron_slow_dp_group", {"slow_dp_group": 4}, "slow_dp_group must be -1 or in 0..3"),
        ("megatron_slow_link", {"link_slowdown": 0}, "link_slowdown and group_slowdown must be > 0"),
        ("pipeline", {"launch_gap_us": -1}, "launch_gap_us must be >= 0"),
        ("slow_host", {"slow_host_rank": 4}, "slow_host_rank must be -1 or in 0..3"),
        ("dataloader_contention", {"loader_workers": 0}, "need host_cores >= 0 and loader_workers >= 1"),
    ],
)
def test_bad_knobs_are_one_line(name: str, knobs: dict[str, Any], message: str) -> None:
    with pytest.raises(GpuprofError, match=re.escape(message)):
        prepare(name, knobs)
