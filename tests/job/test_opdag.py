"""Issue 28: the dependency model of op-level timelines (gpuprof.job.opdag) and what-ifs
that move the way the job moves.

Answers known by construction (hand-built timelines whose replay under a change is worked
out below), by an independent model (the published what-if simulator's answers for the
three shared Megatron jobs, and their ``-ideal`` timelines), and by property (a what-if
that only shortens work never lengthens the replayed step).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from analyzed import analysis_of
from optimelines import op, threads, write
from repo_paths import SAMPLES, SHARED_TRACES

from gpuprof.job.opdag import applies
from gpuprof.job.opdag_order import BATCH_US, program_deps
from gpuprof.job.whatif_registry import names_where
from gpuprof.model.report import report_to_dict
from gpuprof.pipeline import run_analysis

SHARED = SHARED_TRACES

# What-ifs that only shorten work or remove waits (their declarations say): their replay is
# never longer.
SHORTENING = names_where(shortens=True)


def _untimed_sync_job(tmp_path: Path, slow_ms: float = 100.0, fast_ms: float = 50.0) -> Path:
    """Three data-parallel replicas of one stage. Replica 0 computes ``slow_ms``, the others
    ``fast_ms``; then every replica synchronizes in a call no timer wraps (a loss averaged
    over the group), so the fast replicas start ``logging`` right after replica 0 arrives
    at it, after an untimed gap. Nothing below is communication in the timers' sense, and
    ``logging`` is not compute either (a what-if on compute leaves it as it is). Steps are
    recorded together, 1 ms apart: each step is 108 ms as measured (the last 107)."""
    events: list[dict[str, Any]] = []
    step_us = slow_ms * 1000 + 2_000.0 + 5_000.0
    for d in range(3):
        meta, tid = threads(d, 0, 3)
        events += meta
        work = (slow_ms if d == 0 else fast_ms) * 1000.0
        for step in (1, 2, 3):
            t0 = (step - 1) * (step_us + 1_000.0)
            events += [
                op("forward-compute", d, tid["compute"], t0, work / 3, step, 0),
                op("backward-compute", d, tid["compute"], t0 + work / 3, 2 * work / 3, step, 0),
                # 2 ms of Python after the slow replica's arrival, the same on every replica
                op("logging", d, tid["misc"], t0 + slow_ms * 1000.0 + 2_000.0, 5_000.0, step),
            ]
    return write(tmp_path / "sync3", events, "dp_size: 3\npp_size: 1\ntp_size: 1\nworld_size: 3\n")


def test_an_untimed_wait_before_a_compute_op_moves_with_the_worker_it_waited_for(tmp_path: Path) -> None:
    """The fast replicas' gap before ``logging`` is a wait for replica 0 (found, not kept
    as a fixed delay): with replica 0 at its peers' median speed, every replica's step is
    50 + 2 + 5 (+ 1) ms instead of 100 + 2 + 5 (+ 1) ms: 50 ms of a mean step of 107.67 ms.
    A replay that kept the gap as measured would leave the fast replicas where they were:
    no saving at all."""
    a = run_analysis([_untimed_sync_job(tmp_path)])
    w = a.cross.whatifs
    assert w is not None and w.model.dag is not None
    assert w.model.dag.waits_found == 6  # two replicas, three steps
    assert abs(w.model_error_pct) < 0.01
    assert w.savings_pct("peer_median_compute") == pytest.approx(100 * 50 / (323 / 3), abs=0.05)
    report = report_to_dict(a.report)
    # The wait (50 ms a step) is the slow replica's doing: straggler on the fast replicas.
    # What stays other is what nothing explains: the logging op, the 2 ms before it (on the
    # fast replicas, the latency after the slow one arrived, as long as its own 2 ms of
    # Python) and the 1 ms between steps: 3 x 7 + 2 ms on every replica.
    for r in report["ranks"]:
        assert r["lost_us"]["straggler"] == pytest.approx(0.0 if r["rank"] == 0 else 150_000.0, abs=1.0)
        assert r["lost_us"]["other"] == pytest.approx(23_000.0, abs=1.0)


def test_the_wait_is_kept_as_a_fixed_delay_where_no_worker_explains_it(tmp_path: Path) -> None:
    """Every replica idles 20 ms before ``logging`` (host work no timer covers) and no
    other worker's arrival falls inside that gap: it stays a launch delay. The replicas do
    not synchronize, so the job's step is the slow replica's 100 + 20 + 5 ms; at its peers'
    speed it is 50 + 20 + 5 ms: 50 of 125 ms saved, the 20 ms gap kept."""
    events: list[dict[str, Any]] = []
    for d in range(3):
        meta, tid = threads(d, 0, 3)
        events += meta
        work = 100_000.0 if d == 0 else 50_000.0
        for step in (1, 2):
            t0 = (step - 1) * (work + 25_000.0)
            events += [
                op("forward-compute", d, tid["compute"], t0, work, step, 0),
                op("logging", d, tid["misc"], t0 + work + 20_000.0, 5_000.0, step),
            ]
    folder = write(tmp_path / "gap", events, "dp_size: 3\npp_size: 1\ntp_size: 1\nworld_size: 3\n")
    w = run_analysis([folder]).cross.whatifs
    assert w is not None and w.model.dag is not None and w.model.dag.waits_found == 0
    assert w.savings_pct("peer_median_compute") == pytest.approx(100 * 50 / 125, abs=0.05)


def test_program_order_batches_and_timer_jitter() -> None:
    """Ops starting together are one batch (both ends of a batched send/receive); the next
    op depends on both even though its timer starts 100 us before one of them ends; an op
    still running at a tenth of its length when the next one starts is asynchronous."""
    start = np.array([0.0, 1000.0, 1000.0 + BATCH_US / 2, 1200.0, 3000.0, 4000.0])
    end = np.array([1000.0, 1150.0, 1300.0, 3000.0, 13000.0, 5000.0])
    lane = np.array([0, 1, 1, 0, 2, 0])
    step = np.zeros(6, dtype=np.int64)
    deps, first, _ = program_deps(start, end, lane, step, [False])
    assert first.tolist() == [True, False, False, False, False, False]
    assert {1, 2} <= set(deps[3])  # the batch before it, 100 us of overlap tolerated
    assert 3 in deps[4] and 3 in deps[5]
    assert 4 not in deps[5]  # still running: not waited for
    # Step 1 not recorded with step 0 (not chained): its first op is anchored.
    deps2, first2, _ = program_deps(start, end, lane, np.array([0, 0, 0, 1, 1, 1]), [False, False])
    assert first2[3] and deps2[3] == []


def test_the_model_is_for_named_op_level_timelines_only(tmp_path: Path) -> None:
    a = _analysis(SAMPLES / "straggler")
    assert not applies(a.summaries) and a.cross.whatifs is not None and a.cross.whatifs.model.dag is None


# --- the published answers (shared traces) ------------------------------------------------

PUBLISHED = {
    # folder: (no_variation saving %, the -ideal timeline's step in seconds)
    "megatron-pp4-timeline": (16.8, 1.843),
    "megatron-dp4pp4-timeline": (49.7, 23.48),
    "megatron-dp32pp2-timeline": (35.3, 5.90),
}


def _shared(name: str) -> Path:
    path = SHARED / name
    if not path.is_dir():
        pytest.skip(f"{path} not found (shared traces are expected beside the clone; GPUPROF_SHARED_TRACES)")
    return path


def _analysis(path: Path) -> Any:
    """One analysis per input for the session (the monotonicity test and other files read the
    same jobs)."""
    return analysis_of(path)


@pytest.fixture(scope="module")
def published_reports() -> dict[str, dict[str, Any]]:
    out = {}
    for name in PUBLISHED:
        path = SHARED / name
        if path.is_dir():
            out[name] = report_to_dict(_analysis(path).report)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_no_variation_is_within_ten_percent_of_the_published_answer(
    name: str, published_reports: dict[str, dict[str, Any]]
) -> None:
    _shared(name)
    report = published_reports[name]
    got = report["job"]["whatif"]["savings_pct"]["no_variation"]
    want = PUBLISHED[name][0]
    assert abs(got - want) <= 0.10 * want, (got, want)
    assert abs(report["job"]["model_error_pct"]) < 1.0
    # Every microsecond of the untimed waits is given a cause.
    t = report["totals"]
    assert t["lost_us"]["other"] < 0.05 * t["window_us"]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_an_ideal_timeline_reads_as_the_step_the_authors_simulated(name: str) -> None:
    a = _analysis(_shared(name + "-ideal"))
    assert a.cross.whatifs is not None
    want_us = PUBLISHED[name][1] * 1e6
    assert a.cross.whatifs.model.measured_step_us == pytest.approx(want_us, rel=0.005)


@pytest.mark.slow
def test_the_slow_worker_job_names_rank_0_alone_first(published_reports: dict[str, dict[str, Any]]) -> None:
    _shared("megatron-dp4pp4-timeline")
    top = published_reports["megatron-dp4pp4-timeline"]["recommendations"][0]
    assert top["ranks"] == [0]
    assert 40.0 <= top["estimated_savings_pct"] <= 58.0


# --- monotonicity -------------------------------------------------------------------------


def _inputs() -> list[Path]:
    got = sorted(p for p in SAMPLES.iterdir() if p.is_dir())
    if SHARED.is_dir():
        got += sorted(p for p in SHARED.iterdir() if p.is_dir() and p.name != "LICENSES")
    return got


@pytest.mark.slow
@pytest.mark.parametrize("path", _inputs(), ids=lambda p: p.name)
def test_a_whatif_that_only_shortens_work_never_lengthens_the_step(path: Path) -> None:
    w = _analysis(path).cross.whatifs
    if w is None:
        pytest.skip(f"{path.name}: no job model")
    base = w.baseline.step_us
    for name, got in w.results.items():
        if name in SHORTENING:
            assert got.step_us <= base * (1 + 1e-9), (name, got.step_us, base)
    together = [n for n in w.results if n in SHORTENING]
    if together:
        assert w.model.replay(together).step_us <= base * (1 + 1e-9)
