"""Accuracy of ``analyze`` on simulated jobs whose answer is known by construction.

For every scenario of ``gpuprof simulate`` and several seeds, the report must put each
rank's lost time in the right cause, within :data:`TOLERANCE` of the rank's window, and
its top recommendation must be the scenario's cause (for a straggler or a slow pipeline
stage, pointing at the slow rank). For a run with nothing to fix, no recommendation may
claim more than :data:`MINOR_PCT` of the step time. With balanced stages, the measured
pipeline bubble must match the schedule's theoretical fraction.

The truth comes from the simulator's own bookkeeping (``ground_truth.json``), never from
the analyzer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuprof.model.report import CAUSES, Report
from gpuprof.simulate import generate, read_truth

analyze_paths = pytest.importorskip("gpuprof.pipeline").analyze_paths

TOLERANCE = 0.10  # per cause, as a share of the rank's window
MINOR_PCT = 5.0  # a healthy run may have recommendations, none above this saving
BUBBLE_TOLERANCE = 0.03  # absolute, on the bubble fraction

# (case id, scenario, knobs); small jobs, so that the whole file runs in seconds
CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("healthy", "healthy", {"steps": 2, "layers": 4}),
    ("healthy-dp", "healthy", {"ranks": 2, "steps": 2, "layers": 4}),
    ("pp-gpipe", "pipeline", {"schedule": "gpipe", "microbatches": 4, "steps": 2, "stage_ms": 0.5}),
    ("pp-1f1b", "pipeline", {"schedule": "1f1b", "microbatches": 8, "steps": 2, "stage_ms": 0.5}),
    (
        "pp-interleaved",
        "pipeline",
        {"schedule": "interleaved", "chunks": 2, "microbatches": 4, "steps": 2, "stage_ms": 0.5},
    ),
    (
        "pp-dp2",
        "pipeline",
        {"schedule": "1f1b", "microbatches": 4, "steps": 2, "stage_ms": 0.5, "dp": 2, "stages": 2},
    ),
    (
        "pp-slow-stage",
        "pipeline",
        {
            "schedule": "1f1b",
            "microbatches": 8,
            "steps": 2,
            "stage_ms": 0.5,
            "slow_stage": 1,
            "slowdown": 1.6,
        },
    ),
    ("dp-exposed", "dp_exposed", {"ranks": 3, "steps": 2, "layers": 4}),
    ("dp-overlapped", "dp_overlapped", {"ranks": 3, "steps": 2, "layers": 4}),
    ("straggler", "straggler", {"ranks": 3, "steps": 2, "layers": 4, "slow_rank": 2}),
    ("imbalance", "imbalance", {"ranks": 3, "steps": 3, "layers": 4}),
    ("memory", "memory_pressure", {"steps": 2, "layers": 4}),
    (
        "memory-offload-only",
        "memory_pressure",
        {"steps": 2, "layers": 4, "flush": False, "mallocs": 0, "pageable_mb": 0.0, "offload_mb": 96.0},
    ),
    ("input-bound", "input_bound", {"steps": 3, "layers": 4}),
    ("sync-heavy", "sync_heavy", {"steps": 2, "layers": 4}),
    ("launch-bound", "launch_bound", {"steps": 2, "layers": 8}),
    (
        "rl",
        "rl_post_training",
        {"steps": 2, "layers": 2, "tokens_min": 32, "tokens_max": 320, "reward_ms": 4.0},
    ),
]
SEEDS = (0, 1, 2)


PARAMS = [
    pytest.param(scenario, knobs, seed, id=f"{case_id}-seed{seed}")
    for case_id, scenario, knobs in CASES
    for seed in SEEDS
]


_cache: dict[tuple[str, str, int], tuple[dict[str, Any], Report]] = {}


@pytest.fixture(scope="module")
def sim_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("accuracy")


def _run(root: Path, scenario: str, knobs: dict[str, Any], seed: int) -> tuple[dict[str, Any], Report]:
    key = (scenario, repr(sorted(knobs.items())), seed)
    if key not in _cache:
        out = generate(scenario, root / f"{scenario}-{abs(hash(key[1])) % 10**8}-{seed}", seed=seed, **knobs)
        _cache[key] = (read_truth(out), analyze_paths([out]))
    return _cache[key]


@pytest.mark.parametrize("scenario,knobs,seed", PARAMS)
def test_lost_time_goes_to_the_right_cause(
    sim_root: Path, scenario: str, knobs: dict[str, Any], seed: int
) -> None:
    truth, report = _run(sim_root, scenario, knobs, seed)
    assert [r.rank for r in report.ranks] == [t["rank"] for t in truth["ranks"]]
    wrong = []
    for got, want in zip(report.ranks, truth["ranks"]):
        window = want["window_us"]
        assert got.window_us == pytest.approx(window, rel=0.01), f"rank {got.rank}: window"
        for cause in CAUSES:
            diff = float(got.lost_us[cause]) - want["lost_us"][cause.value]
            if abs(diff) > TOLERANCE * window:
                wrong.append(
                    f"rank {got.rank} {cause.value}: analyzed {got.lost_us[cause] / window:.1%}, truth {want['lost_us'][cause.value] / window:.1%}"
                )
    assert not wrong, "; ".join(wrong)


@pytest.mark.parametrize("scenario,knobs,seed", PARAMS)
def test_top_recommendation_is_the_right_one(
    sim_root: Path, scenario: str, knobs: dict[str, Any], seed: int
) -> None:
    truth, report = _run(sim_root, scenario, knobs, seed)
    expected = truth["expected"]
    recs = report.recommendations
    if expected["top_category"] is None:
        big = [
            (r.category.value, round(r.estimated_savings_pct, 1))
            for r in recs
            if r.estimated_savings_pct > MINOR_PCT
        ]
        assert not big, f"healthy run, yet recommendations claim large savings: {big}"
        return
    assert recs, f"no recommendation; expected {expected['top_category']}"
    assert recs[0].category.value == expected["top_category"], [
        (r.category.value, round(r.estimated_savings_pct, 1)) for r in recs[:3]
    ]
    if expected["culprit_ranks"] and len(expected["culprit_ranks"]) == 1:
        # a straggler or slow stage: the fix applies to the slow rank, not the waiting ones
        assert list(recs[0].ranks) == expected["culprit_ranks"]


# Balanced pipelines where the schedule's idle time dominates: full-size stages (1 ms per
# microbatch) and small activations, so that transfers and the first stage's input copy
# add little to the theoretical fraction (the simulator's own check is in test_simulate).
BUBBLE_CASES: list[tuple[str, dict[str, Any]]] = [
    ("gpipe-m4", {"schedule": "gpipe", "microbatches": 4}),
    ("1f1b-m8", {"schedule": "1f1b", "microbatches": 8}),
    ("1f1b-m16", {"schedule": "1f1b", "microbatches": 16, "steps": 1}),
    ("interleaved-v2-m8", {"schedule": "interleaved", "chunks": 2, "microbatches": 8}),
    ("1f1b-dp2", {"schedule": "1f1b", "microbatches": 8, "dp": 2, "stages": 2}),
]


@pytest.mark.parametrize(
    "knobs", [pytest.param({"act_mb": 0.25, "steps": 2, **k}, id=case) for case, k in BUBBLE_CASES]
)
def test_balanced_pipeline_bubble_matches_the_schedule(sim_root: Path, knobs: dict[str, Any]) -> None:
    truth, report = _run(sim_root, "pipeline", knobs, 0)
    theory = truth["expected"]["theoretical_bubble_fraction"]
    fractions = []
    for got, want in zip(report.ranks, truth["ranks"]):
        pipeline_compute = want["compute_by_phase_us"]["pipeline"]
        bubble = float(got.lost_us[CAUSES[0]])
        fractions.append(bubble / (bubble + pipeline_compute))
    measured = sum(fractions) / len(fractions)
    assert measured == pytest.approx(theory, abs=BUBBLE_TOLERANCE), (
        f"analyzed bubble {measured:.3f}, theory {theory:.3f}"
    )
