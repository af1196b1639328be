"""The distributed advisors, tested on their facts (not their sentences).

Each job is simulated with one fault whose place and size are knobs, so the answer is known
by construction: the recommendation that carries the fault must name its rank, link, group
or stage in its facts, and measure its size (the ratio to its peers) close to the knob.
The knobs are not the scenarios' defaults, so nothing here is tuned to one job. How the
facts are worded is the phrasebook's (tests of ``gpuprof.advice.phrasebook``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuprof.model.report import Recommendation
from gpuprof.pipeline import run_analysis
from gpuprof.simulate import generate

SMALL = {"steps": 2, "microbatches": 8}


def _recommendation(tmp_path: Path, scenario: str, rec_id: str, **knobs: Any) -> Recommendation:
    out = generate(scenario, tmp_path / scenario, seed=5, **knobs)
    recs = run_analysis([out]).report.recommendations
    found = [r for r in recs if r.id == rec_id]
    assert found, [r.id for r in recs]
    return found[0]


@pytest.mark.slow
@pytest.mark.parametrize(("rank", "slowdown"), [(1, 1.6), (3, 2.5)])
def test_a_slow_host_is_its_rank_and_its_ratio(tmp_path: Path, rank: int, slowdown: float) -> None:
    rec = _recommendation(tmp_path, "slow_host", "straggler-host", steps=3, slow_host_rank=rank, host_slowdown=slowdown)
    f = rec.facts
    assert (f["slow_rank"], f["slow_hosts"], rec.ranks) == (rank, 1, (rank,))
    assert f["host_ratio"] == pytest.approx(slowdown, rel=0.1)
    assert f["host_us_per_step"] > f["peers_host_us_per_step"]
    assert f["step_after_us"] < f["step_us"]


@pytest.mark.slow
@pytest.mark.parametrize(("link", "replica", "slowdown"), [(0, 1, 6.0), (2, 0, 10.0)])
def test_a_slow_pipeline_link_is_its_two_stages_its_replica_and_its_ratio(
    tmp_path: Path, link: int, replica: int, slowdown: float
) -> None:
    rec = _recommendation(tmp_path, "megatron_slow_link", "straggler-link", **SMALL,
                          slow_link=link, slow_link_replica=replica, link_slowdown=slowdown)
    f = rec.facts
    assert (f["replica"], f["lower_stage"], f["upper_stage"]) == (replica, link, link + 1)
    assert f["transfer_ratio"] == pytest.approx(slowdown, rel=0.1)
    assert len(rec.ranks) == 2  # both ends of the link


@pytest.mark.slow
@pytest.mark.parametrize(("stage", "slowdown"), [(0, 4.0), (2, 6.0)])
def test_a_slow_data_parallel_group_is_its_stage_and_its_ratio(tmp_path: Path, stage: int, slowdown: float) -> None:
    rec = _recommendation(tmp_path, "megatron_slow_dp_group", "straggler-collective", **SMALL,
                          slow_dp_group=stage, group_slowdown=slowdown)
    f = rec.facts
    assert f["stage"] == stage
    assert f["transfer_ratio"] == pytest.approx(slowdown, rel=0.1)
    assert f["group_ranks"] == len(rec.ranks) >= 2


@pytest.mark.slow
@pytest.mark.parametrize(("rank", "slowdown"), [(0, 1.3), (3, 1.8)])
def test_a_slow_gpu_is_its_rank_its_ratio_and_hardware(tmp_path: Path, rank: int, slowdown: float) -> None:
    rec = _recommendation(tmp_path, "straggler", "straggler-rank", slow_rank=rank, slowdown=slowdown)
    f = rec.facts
    assert (f["slow_rank"], f["slow_ranks"], f["kind"]) == (rank, 1, "hardware")
    assert f["compute_ratio"] == pytest.approx(slowdown, rel=0.05)
    assert f["caused_wait_us_per_step"] > 0


@pytest.mark.slow
@pytest.mark.parametrize(("stage", "slowdown"), [(0, 1.4), (2, 1.8)])
def test_a_slow_stage_is_its_number_and_its_ratio(tmp_path: Path, stage: int, slowdown: float) -> None:
    rec = _recommendation(tmp_path, "megatron_slow_stage", "pipeline-imbalance", **SMALL,
                          slow_stage=stage, slowdown=slowdown)
    f = rec.facts
    assert f["slow_stage"] == stage
    assert f["stage_ratio"] == pytest.approx(slowdown, rel=0.1)
    assert f["balanced_span_us"] < f["span_us"]
