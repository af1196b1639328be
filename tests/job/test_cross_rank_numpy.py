"""The cross-rank steps on numpy columns give what pandas gave (issue 22).

``pandas_reference`` is the pandas code of the matching and of the straggler group-bys as
it was before they moved to numpy; every table and number here must be the same, row for
row and bit for bit (sums of many floats to float rounding: pandas compensates them). The
jobs: the real multi-rank traces, the samples, and generated summaries with uneven ranks,
missing members, several process groups, shared and skewed clocks, ties and op-level
timeline layouts.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pandas_reference as ref
import pytest

from gpuprof.accounting.comms import COMMS_COLUMNS
from gpuprof.accounting.summarize import summarize
from gpuprof.accounting.summary import RankSummary
from gpuprof.job import stragglers
from gpuprof.job.collectives import (
    MatchedCollectives,
    match_collectives,
    per_rank_waits,
    rank_totals,
    wait_claims,
)
from gpuprof.model import grouping
from gpuprof.model import intervals as iv
from gpuprof.model.table import Table
from gpuprof.model.timeline import Category, Step
from gpuprof.readers.kineto import KINETO_HOLDS
from gpuprof.readers.optimeline import TIMELINE_HOLDS

REPO = Path(__file__).resolve().parents[2]


# --- comparing -------------------------------------------------------------------------


def _same_matching(summaries: Sequence[RankSummary], label: str) -> MatchedCollectives:
    mine = match_collectives(summaries)
    theirs = ref.match(summaries)
    got, want = mine.calls_table, theirs["calls"]
    assert mine.n_calls == len(want) > 0, label
    assert list(got.columns) == list(want.columns), label
    for c in want.columns:
        a, b = np.asarray(got[c]), want[c].to_numpy()
        assert a.tolist() == b.tolist(), (label, c)
        assert a.dtype == b.dtype, (label, c, a.dtype, b.dtype)
    # The DataFrame accessor still gives the same frame.
    frame = mine.calls
    assert isinstance(frame, pd.DataFrame)
    pd.testing.assert_frame_equal(frame, want.reset_index(drop=True), check_dtype=True)
    assert list(mine.offsets_us.items()) == list(theirs["offsets_us"].items()), label
    assert mine.unmatched == theirs["unmatched"], label
    assert list(mine.incomplete_groups.items()) == list(theirs["incomplete_groups"].items()), label
    assert mine.world_size_inferred == theirs["world_size_inferred"], label
    return mine


def _same_waits(summaries: Sequence[RankSummary], m: MatchedCollectives, bubbles: dict[int, iv.Intervals], label: str) -> None:
    calls = ref.match(summaries)["calls"]  # the reference works from its own matching
    want = ref.per_rank_waits(calls)
    got = per_rank_waits(m)
    assert list(got.index) == list(want.index) and list(got.columns) == list(want.columns), label
    for c in want.columns:
        assert got[c].dtype == want[c].dtype, (label, c)
        assert np.allclose(got[c].to_numpy(), want[c].to_numpy(), rtol=1e-12, atol=1e-9), (label, c)
    totals = rank_totals(m)
    assert list(totals["calls"]) == [int(r) for r in want.index], label
    mine_claims, their_claims = wait_claims(m), ref.wait_claims(calls)
    assert list(mine_claims) == list(their_claims), label
    for r, (s, e) in their_claims.items():
        assert mine_claims[r][0].tolist() == s.tolist() and mine_claims[r][1].tolist() == e.tolist(), (label, r)

    caused, caused_ref = stragglers._caused_waits(m), ref.caused_waits(calls)
    assert list(caused) == list(caused_ref), label
    for r, (total, n) in caused_ref.items():
        assert caused[r][1] == n and caused[r][0] == pytest.approx(total, rel=1e-12, abs=1e-9), (label, r)

    for b in ({}, bubbles):
        assert stragglers._net_exposed_waits(m, b).tolist() == ref.net_exposed_waits(calls, b).tolist(), label
        rank, gain = stragglers._critical_gains(m, b)
        g = ref.critical_gains(calls, b)
        assert rank.tolist() == g["rank"].tolist() and gain.tolist() == g["gain_us"].tolist(), label
        if rank.size:
            counts = stragglers._value_counts(rank)
            assert list(counts.items()) == [(int(k), int(v)) for k, v in g["rank"].value_counts().items()], label
        ranks = sorted({int(r) for r in np.asarray(m.calls_table["rank"]).tolist()})
        for group in ([ranks[0]], ranks[-1:], ranks[:2], ranks[1::2], ranks, []):
            assert stragglers._group_gain_us(m, b, group) == ref.group_gain_us(calls, b, group), (label, group)


def _bubbles(summaries: Sequence[RankSummary], seed: int) -> dict[int, iv.Intervals]:
    """Some intervals over each rank's window, as a pipeline-bubble claim would be."""
    rng = np.random.default_rng(seed)
    out: dict[int, iv.Intervals] = {}
    for s in summaries[::2]:
        lo, hi = s.window
        a = np.sort(rng.uniform(lo, hi, 12))
        out[s.rank] = iv.union(a, a + rng.uniform(0, (hi - lo) / 20, a.size))
    return out


# --- real and sample jobs ----------------------------------------------------------------


def _summaries(folder: Path) -> list[RankSummary]:
    from gpuprof.readers import load_all

    return [summarize(t) for t in load_all([folder])]


SHARED = ("dlrm-8rank", "a100-2rank-nccl", "hta-sampled-2rank", "megatron-pp4-timeline")
SAMPLES = ("pipeline-dp2", "straggler", "megatron-timeline", "megatron-slow-worker", "dp-exposed", "imbalance")


@pytest.mark.parametrize("name", SHARED)
def test_real_jobs_match_as_pandas_matched_them(shared_traces: Path, name: str) -> None:
    summaries = _summaries(shared_traces / name)
    m = _same_matching(summaries, name)
    _same_waits(summaries, m, _bubbles(summaries, 1), name)
    # Members missing (a sample of the ranks) and one rank alone.
    part = summaries[::3] if len(summaries) > 3 else summaries[:1]
    _same_waits(part, _same_matching(part, f"{name} sampled"), {}, f"{name} sampled")
    _same_matching(summaries[-1:], f"{name} one rank")


@pytest.mark.parametrize("name", SAMPLES)
def test_sample_jobs_match_as_pandas_matched_them(name: str) -> None:
    summaries = _summaries(REPO / "sample_traces" / name)
    m = _same_matching(summaries, name)
    _same_waits(summaries, m, _bubbles(summaries, 2), name)


# --- generated jobs ------------------------------------------------------------------------


def _comms(rows: list[dict[str, Any]]) -> Table:
    data: dict[str, Any] = {}
    for c in COMMS_COLUMNS:
        vals = [r[c] for r in rows]
        if c in ("name", "coll_name", "pg"):
            arr = np.empty(len(vals), dtype=object)
            arr[:] = vals
            data[c] = arr
        elif c == "category":
            data[c] = np.array(vals, dtype=np.int8)
        elif c in ("start_us", "end_us", "launch_us"):
            data[c] = np.array(vals, dtype=np.float64)
        else:
            data[c] = np.array(vals, dtype=np.int64)
    return Table(data, COMMS_COLUMNS)


def _job(seed: int) -> list[RankSummary]:
    """A job of 2-7 ranks (some of a larger world absent) and 1-3 process groups (some
    declared with their members, some not); each rank skips some calls (uneven windows,
    partial steps), clocks are skewed per file and two ranks may share a file; arrivals are
    on a coarse grid so that ties happen; point-to-point calls are mixed in; one job in
    three is an op-level timeline with a pipeline layout (arrival from the last activity,
    waits on one's own replica). One in five is a whole job that says nothing of its size
    (the world size is inferred from the collectives)."""
    rng = np.random.default_rng(seed)
    world = int(rng.integers(2, 9))
    whole = seed % 5 == 4
    ranks = list(range(world)) if whole else sorted(rng.choice(world, size=int(rng.integers(2, world + 1)), replace=False).tolist())
    timeline = seed % 3 == 0
    n_pg = 0 if whole else int(rng.integers(1, 4))
    members = {f"g{k}": sorted(rng.choice(world, size=int(rng.integers(2, world + 1)), replace=False).tolist())
               for k in range(n_pg)}  # fmt: skip
    members["0"] = list(range(world))
    declared = {} if whole else {g: tuple(m) for g, m in members.items() if rng.random() < 0.5}
    colls = ["allreduce", "allgather", "reduce_scatter"]
    steps = int(rng.integers(1, 4))
    sources = {r: f"rank{r}.json" for r in ranks}
    if len(ranks) >= 3 and rng.random() < 0.5:
        sources[ranks[1]] = sources[ranks[0]]  # one file, two ranks: one clock
    skew = {src: float(rng.integers(-5, 5)) * 1000.0 for src in set(sources.values())}
    pp = 2
    rows: dict[int, list[dict[str, Any]]] = {r: [] for r in ranks}
    t = 0.0
    step_bounds = []
    for st in range(steps):
        s0 = t
        for _ in range(int(rng.integers(3, 12))):
            pg = rng.choice(list(members))
            coll = str(rng.choice(colls))
            arrive = {r: t + float(rng.integers(0, 6)) * 100.0 for r in members[str(pg)]}
            end = max(arrive.values()) + 200.0 + float(rng.integers(0, 3))
            for r in members[str(pg)]:
                if r not in rows or (not whole and rng.random() < 0.1):  # absent, or a call it skipped
                    continue
                call = {
                    "start_us": arrive[r] + skew[sources[r]],
                    "end_us": end + skew[sources[r]] + float(rng.integers(0, 3)),
                    "category": int(Category.COLLECTIVE),
                    "name": f"nccl {coll}",
                    "coll_name": coll,
                    "pg": str(pg),
                    "bytes": 1024,
                    "launch_us": np.nan,
                    "step": st if whole or rng.random() < 0.9 else -1,
                    "mb_id": -1,
                    "peer": -1,
                }
                rows[r].append(call)
                if rng.random() < 0.2:
                    rows[r].append({**rows[r][-1], "category": int(Category.P2P), "coll_name": "send", "name": "send"})
            t = end + float(rng.integers(100, 400))
        step_bounds.append((s0, t))
    out = []
    for r in ranks:
        rr = sorted(rows[r], key=lambda x: x["start_us"])
        if not rr:
            continue
        counts: dict[str, int] = {}
        issue = rng.permutation(len(rr)) if rng.random() < 0.2 else np.arange(len(rr))
        for i in issue.tolist():
            rr[i]["seq"] = counts.get(rr[i]["pg"], 0)
            counts[rr[i]["pg"]] = rr[i]["seq"] + 1
        off = skew[sources[r]]
        lo, hi = step_bounds[0][0] + off - 1000.0, step_bounds[-1][1] + off + 1000.0
        cs = np.sort(rng.uniform(lo, hi, 30))
        compute = iv.union(cs, cs + rng.uniform(10, 300, cs.size))
        compute = iv.clip(compute, lo, hi)
        parallel = {"pp_rank": r % pp, "dp_rank": r // pp, "pp_size": pp} if timeline else {}
        out.append(
            RankSummary(
                rank=r,
                source=sources[r],
                fmt="timeline" if timeline else "kineto",
                holds=TIMELINE_HOLDS if timeline else KINETO_HOLDS,
                device_name=None,
                device_memory_bytes=None,
                window=(lo, hi),
                steps=tuple(Step(k, a + off, b + off) for k, (a, b) in enumerate(step_bounds)),
                compute=compute,
                lost=iv.complement(compute, lo, hi),
                claims={},
                comms=_comms(rr),
                parallel=parallel,
                world_size=world if not whole and rng.random() < 0.3 else None,
                process_groups=declared,
            )
        )
    return out


@pytest.mark.parametrize("seed", range(40))
def test_generated_jobs_match_as_pandas_matched_them(seed: int) -> None:
    summaries = _job(seed)
    if not any(len(s.comms_table) for s in summaries):
        pytest.skip("no calls drawn")
    m = _same_matching(summaries, f"seed {seed}")
    _same_waits(summaries, m, _bubbles(summaries, seed), f"seed {seed}")


def test_generated_jobs_cover_what_they_claim_to() -> None:
    """The generated jobs do reach the cases: incomplete groups, unmatched calls, clock
    offsets, ties among the last arrivals, several groups, own-replica waits."""
    seen = {"incomplete": 0, "unmatched": 0, "offsets": 0, "ties": 0, "groups": 0, "own": 0, "inferred": 0}
    for seed in range(40):
        summaries = _job(seed)
        if not any(len(s.comms_table) for s in summaries):
            continue
        m = match_collectives(summaries)
        t = m.calls_table
        seen["incomplete"] += bool(m.incomplete_groups)
        seen["unmatched"] += m.unmatched > 0
        seen["offsets"] += any(abs(o) > 0 for o in m.offsets_us.values())
        last = np.asarray(t["is_last"])
        seen["ties"] += np.unique(np.asarray(t["key"])[last]).size < int(last.sum())
        seen["groups"] += len(set(t["pg"].tolist())) >= 3
        seen["own"] += bool((np.asarray(t["own_wait_us"]) > 0).any())
        seen["inferred"] += m.world_size_inferred is not None
    assert all(n >= 2 for n in seen.values()), seen


# --- the group-bys themselves ---------------------------------------------------------------


def test_groups_are_numbered_as_pandas_numbers_them() -> None:
    rng = np.random.default_rng(0)
    for _ in range(30):
        n = int(rng.integers(1, 300))
        a, b = rng.integers(0, 5, n), rng.integers(-2, 3, n)
        v = rng.integers(0, 7, n).astype(np.float64) / 2.0
        df = pd.DataFrame({"a": a, "b": b, "v": v})
        ids, k = grouping.groups(a, b)
        assert ids.tolist() == df.groupby(["a", "b"], sort=False).ngroup().tolist()
        one, k1 = grouping.groups(a)
        assert one.tolist() == df.groupby("a", sort=False).ngroup().tolist()
        assert grouping.median(ids, v, k)[ids].tolist() == df.groupby(["a", "b"], sort=False)["v"].transform("median").tolist()
        assert grouping.maximum(ids, v, k)[ids].tolist() == df.groupby(["a", "b"], sort=False)["v"].transform("max").tolist()
        assert grouping.nunique(one, b, k1)[one].tolist() == df.groupby("a")["b"].transform("nunique").tolist()
        assert grouping.size(ids, k)[ids].tolist() == df.groupby(["a", "b"], sort=False)["v"].transform("size").tolist()
        names = [f"n{x}" for x in rng.integers(0, 9, n)]
        assert grouping.factorize(names).tolist() == pd.factorize(pd.Series(names))[0].tolist()
        order = np.lexsort((b, a))
        new = grouping.runs((a[order], b[order]), n)
        assert grouping.cumcount(new).tolist() == df.iloc[order].groupby(["a", "b"], sort=False).cumcount().tolist()


# --- no pandas -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["dlrm-8rank", "megatron-pp4-timeline", "hta-sampled-2rank"])
def test_analyze_of_a_multi_rank_job_never_imports_pandas(shared_traces: Path, tmp_path: Path, name: str) -> None:
    # pandas made unimportable: any use of it on the analyze path fails the command.
    script = (
        "import sys, runpy; sys.modules['pandas'] = None; "
        "sys.argv = ['gpuprof', 'analyze', sys.argv[1], '--format', 'json', '-o', sys.argv[2]]; "
        "runpy.run_module('gpuprof', run_name='__main__')"
    )
    out = tmp_path / "report.json"
    got = subprocess.run(
        [sys.executable, "-c", script, str(shared_traces / name), str(out)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        check=False,
    )
    assert got.returncode == 0, got.stderr[-2000:]
    report = json.loads(out.read_text())
    assert len(report["ranks"]) >= 2
