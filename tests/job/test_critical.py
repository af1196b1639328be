"""The critical path of a step (``gpuprof.job.critical``), drawn in the HTML timeline.

Every answer is known by construction: a data-parallel job built by hand where one rank is
slower (its compute sets every all-reduce's end, so the whole step is its work), and
pipelines simulated with one slow stage, where the path must cross the stages in the
schedule's order while the first microbatch fills the pipeline and spend most of the step
on the slow stage's rank. Which stage is slow varies, so no answer can be fixed in advance.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from test_replay import dp_job

from gpuprof.accounting.summarize import summarize
from gpuprof.job.critical import critical_path
from gpuprof.job.cross_rank import analyze_job
from gpuprof.model.report import report_to_dict
from gpuprof.pipeline import run_analysis
from gpuprof.simulate import generate


def _by_rank(segments: list[dict[str, Any]]) -> Counter[int]:
    out: Counter[int] = Counter()
    for s in segments:
        out[int(s["rank"])] += float(s["end_us"]) - float(s["start_us"])
    return out


@pytest.mark.parametrize("slow_rank", [0, 2])
def test_a_slow_data_parallel_rank_carries_the_whole_step(slow_rank: int) -> None:
    slow = [1.0] * 4
    slow[slow_rank] = 1.5
    summaries = [summarize(t) for t in dp_job(slow, steps=3)]
    cross = analyze_job(summaries)
    assert cross.whatifs is not None
    s = summaries[slow_rank].steps[1]  # the middle step, on the slow rank's clock (offset 0)
    path = critical_path(cross.whatifs.model, s.start_us, s.end_us)
    share = _by_rank(path)
    assert set(share) == {slow_rank}
    # Its compute, all-reduce and optimizer; only the launch latencies at the step's
    # start (10 µs each) are nobody's.
    assert share[slow_rank] >= 0.97 * (s.end_us - s.start_us)
    # Segments are in time order and never overlap.
    ends = [(p["start_us"], p["end_us"]) for p in path]
    assert all(a < b for a, b in ends) and all(ends[k][1] <= ends[k + 1][0] for k in range(len(ends) - 1))


@pytest.fixture(scope="module", params=[1, 2])
def slow_stage_job(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any]]:
    stage = int(request.param)
    out = generate(
        "pipeline",
        tmp_path_factory.mktemp(f"slowstage{stage}"),
        seed=3,
        whatifs=False,
        stages=4,
        slow_stage=stage,
        slowdown=2.0,
        microbatches=4,
        stage_ms=0.5,
        steps=2,
    )
    return stage, report_to_dict(run_analysis([out]).report)


def test_the_path_of_a_pipeline_fills_the_stages_in_order_and_stays_on_the_slow_one(
    slow_stage_job: tuple[int, dict[str, Any]],
) -> None:
    stage, report = slow_stage_job
    tl = report["timeline"]
    assert tl["critical_path_source"] == "replay"
    path = tl["critical_path"]
    share = _by_rank(path)
    # One rank per stage here (rank = stage): the slow stage's rank holds the step longest.
    assert max(share, key=lambda r: share[r]) == stage
    assert share[stage] >= 0.5 * tl["span_us"]
    # The first microbatch's forward goes 0 -> 1 -> ... -> slow stage before anything else.
    ranks = [p["rank"] for p in path]
    assert ranks[: stage + 1] == list(range(stage + 1))
    assert sum(share.values()) >= 0.9 * tl["span_us"]
    # Every segment lies on a drawn lane and inside the shown span.
    drawn = {lane["rank"] for lane in tl["lanes"]}
    assert all(p["rank"] in drawn and 0 <= p["start_us"] < p["end_us"] <= tl["span_us"] + 0.1 for p in path)


def test_the_html_timeline_outlines_the_replayed_path(slow_stage_job: tuple[int, dict[str, Any]]) -> None:
    from gpuprof.render.charts import timeline_chart

    _, report = slow_stage_job
    svg = timeline_chart(report["timeline"])
    assert svg.count('<g class="crit">') == len(report["timeline"]["critical_path"])
    assert "walked on the job&#x27;s replay" in svg or "walked on the job's replay" in svg


def test_without_device_work_in_the_span_there_is_no_path() -> None:
    summaries = [summarize(t) for t in dp_job([1.0, 1.0], steps=2)]
    cross = analyze_job(summaries)
    assert cross.whatifs is not None
    assert critical_path(cross.whatifs.model, -1e9, -1e9 + 1.0) == []
