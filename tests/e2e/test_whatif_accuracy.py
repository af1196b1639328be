"""Accuracy of the analyzer's what-if estimates against the simulator's what-if truth (issue 10).

Each case is simulated with ``gpuprof simulate``'s engine; ``ground_truth.json`` holds, for
every what-if fix that applies, the step time of the *fixed job simulated again*
(:mod:`gpuprof.simulate.whatif`). The analyzer sees only the traces. For each case:

* every fix the scenario is built to show (``whatif.intended``) has a recommendation whose
  ``whatif`` key names it, and its ``estimated_savings_pct`` is within :data:`REL` of the
  simulated saving;
* that recommendation's ``ranks`` name the ranks the fix speeds up, where the truth knows
  them (``whatif.culprit_ranks``: the slow rank, the slow stage's ranks): a non-empty
  subset of them, the very rank when there is one;
* ``job.combined_savings_pct`` (every recommendation at once, one replay) is within
  :data:`REL` of the truth of ``all`` (every applicable fix at once), with an absolute
  floor of :data:`FLOOR_PP` points where the truth is small (a healthy job);
* ``job.model_error_pct`` (the replay of the unchanged job against the measured steps) is
  within :data:`MODEL_ERROR_PCT`.

The cases are the five situations of issue 10 (sync then host work; a pipeline whose
microbatches only the NCCL send/recv kernels show; one slow replica of one stage in
PP 4 x DP 4; a slow stage with data-parallel replicas that vary; allocator frees inside
operators on ROCm names), one of them also as a Megatron-style timer timeline, and every
existing scenario with a fix truth. Small jobs, two seeds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuprof.model.report import report_to_dict
from gpuprof.simulate import generate, read_truth

run_analysis = pytest.importorskip("gpuprof.pipeline").run_analysis

REL = 0.20  # relative tolerance on a saving
FLOOR_PP = 1.0  # absolute floor, percentage points, for small truths (combined savings only)
MODEL_ERROR_PCT = 5.0

# (case id, scenario, knobs, generate options)
CASES: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = [
    # 1. .item() after each layer, then 2 ms of Python before the next launch
    (
        "sync-then-host",
        "sync_heavy",
        {"items_per_layer": 1, "python_ms": 2.0, "layer_ms": 1.0, "layers": 4, "steps": 2},
        {},
    ),
    # 2. 4 microbatches on 4 stages, no forward/backward annotations: only NCCL send/recv
    (
        "pp-unannotated",
        "pipeline",
        {"microbatches": 4, "annotate": False, "stage_ms": 0.5, "steps": 2},
        {},
    ),
    # 3. PP 4 x DP 4, rank 0 (stage 0 of replica 0) computes 2x slower than its peers
    (
        "pp4-dp4-slow-rank",
        "pipeline",
        {
            "stages": 4,
            "dp": 4,
            "slow_rank": 0,
            "slowdown": 2.0,
            "microbatches": 4,
            "stage_ms": 0.5,
            "steps": 1,
        },
        {},
    ),
    # 4. stage 3 has 1.5x the work, and the two data-parallel replicas differ by 30 %
    (
        "pp-slow-stage-dp-spread",
        "pipeline",
        {
            "stages": 4,
            "dp": 2,
            "slow_stage": 3,
            "slowdown": 1.5,
            "replica_spread": 0.3,
            "microbatches": 4,
            "stage_ms": 0.5,
            "steps": 1,
        },
        {},
    ),
    # 5. hipFree inside aten operators: allocator churn and host overhead in the same gaps
    ("alloc-churn-rocm", "alloc_churn", {"layers": 3, "steps": 2}, {"platform": "rocm"}),
    # situation 4 again, as Megatron's timers record it (distributed optimizer)
    (
        "megatron-slow-stage-dp-spread",
        "pipeline",
        {
            "stages": 4,
            "dp": 2,
            "slow_stage": 3,
            "slowdown": 1.5,
            "replica_spread": 0.3,
            "microbatches": 4,
            "stage_ms": 0.5,
            "steps": 2,
            "dist_opt": True,
        },
        {"layout": "megatron"},
    ),
    # issue 19: the two large 3D-parallel jobs as real exports record them (communication
    # spans only its transfer, waits are untimed gaps before it; one TP rank per position)
    ("megatron-slow-worker", "megatron_slow_worker", {"microbatches": 8}, {}),
    ("megatron-uneven-data", "megatron_uneven_data", {"dp": 8}, {}),
    # the existing scenarios, each with the fix it is built to show
    ("input-bound", "input_bound", {"layers": 4, "steps": 2}, {}),
    ("sync-heavy", "sync_heavy", {"layers": 4, "steps": 2}, {}),
    ("launch-bound", "launch_bound", {"layers": 8, "steps": 2}, {}),
    ("memory-pressure", "memory_pressure", {"layers": 4, "steps": 2}, {}),
    ("straggler", "straggler", {"ranks": 4, "layers": 4, "steps": 2}, {}),
    ("imbalance", "imbalance", {"ranks": 3, "layers": 4, "steps": 3}, {}),
    ("dp-exposed", "dp_exposed", {"ranks": 3, "layers": 4, "steps": 2}, {}),
    ("pp-1f1b", "pipeline", {"microbatches": 8, "stage_ms": 0.5, "steps": 2}, {}),
    (
        "pp-slow-stage",
        "pipeline",
        {"microbatches": 8, "stage_ms": 0.5, "slow_stage": 1, "slowdown": 1.6, "steps": 2},
        {},
    ),
    ("pp-dp2", "pipeline", {"stages": 2, "dp": 2, "microbatches": 4, "stage_ms": 0.5, "steps": 2}, {}),
    (
        "rl",
        "rl_post_training",
        {"layers": 2, "tokens_min": 32, "tokens_max": 320, "reward_ms": 4.0, "steps": 2},
        {},
    ),
    ("healthy", "healthy", {"layers": 4, "steps": 2}, {}),
    ("dp-overlapped", "dp_overlapped", {"ranks": 3, "layers": 4, "steps": 2}, {}),
]
SEEDS = (0, 1)

PARAMS = [
    pytest.param(scenario, knobs, options, seed, id=f"{case_id}-seed{seed}")
    for case_id, scenario, knobs, options in CASES
    for seed in SEEDS
]

# Known limits of the replay, kept visible: strict, so that a fix shows up as a failure to
# remove the mark. (Empty since buffered sends pair with their unwaited receives as
# one-way "after" groups: pp-slow-stage's balanced_stages was 18.2 % against 13.6 %.)
KNOWN_LIMITS: set[str] = set()
ESTIMATE_PARAMS = [
    pytest.param(
        *p.values,
        id=p.id,
        marks=[pytest.mark.xfail(strict=True, reason="unpaired buffered point-to-point sends (see KNOWN_LIMITS)")]
        if p.id in KNOWN_LIMITS
        else [],
    )
    for p in PARAMS
]

_cache: dict[str, tuple[dict[str, Any], dict[str, Any], float | None]] = {}


@pytest.fixture(scope="module")
def sim_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("whatif-accuracy")


def _run(
    root: Path, scenario: str, knobs: dict[str, Any], options: dict[str, Any], seed: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(ground truth, JSON report) of one case, simulated and analyzed once per module."""
    return _run3(root, scenario, knobs, options, seed)[:2]


def _run3(
    root: Path, scenario: str, knobs: dict[str, Any], options: dict[str, Any], seed: int
) -> tuple[dict[str, Any], dict[str, Any], float | None]:
    """Also the analyzer's replay of every fix the simulator applied, all at once."""
    key = f"{scenario}-{sorted(knobs.items())}-{sorted(options.items())}-{seed}"
    if key not in _cache:
        out = generate(scenario, root / f"case{len(_cache)}", seed=seed, **options, **knobs)
        truth = read_truth(out)
        analysis = run_analysis([out])
        w = analysis.cross.whatifs
        applied = (truth.get("whatif") or {}).get("applied") or []
        _cache[key] = (
            truth,
            report_to_dict(analysis.report),
            None if w is None else w.combined_pct(applied),
        )
    return _cache[key]


def _within(estimate: float, truth: float, floor_pp: float = 0.0) -> bool:
    return abs(estimate - truth) <= max(REL * abs(truth), floor_pp)


def _summary(report: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [
        (r.get("whatif"), r["category"], round(r["estimated_savings_pct"], 1), r["ranks"])
        for r in report["recommendations"]
    ]


@pytest.mark.parametrize("scenario,knobs,options,seed", ESTIMATE_PARAMS)
def test_intended_whatif_estimate_matches_the_simulated_fix(
    sim_root: Path, scenario: str, knobs: dict[str, Any], options: dict[str, Any], seed: int
) -> None:
    truth, report = _run(sim_root, scenario, knobs, options, seed)
    wi = truth["whatif"]
    wrong = []
    for fix in wi["intended"]:
        want = wi["savings_pct"][fix]
        recs = [r for r in report["recommendations"] if r.get("whatif") == fix]
        if not recs:
            wrong.append(f"no recommendation with whatif={fix} (truth {want:.1f}%)")
            continue
        got = recs[0]["estimated_savings_pct"]
        lo, hi = recs[0].get("savings_low_pct"), recs[0].get("savings_high_pct")
        if fix == "no_dataloader" and lo is not None and hi is not None:
            # Loading in workers gives back what the host's free cores allow, which one trace
            # cannot show: the truth must lie in the stated range (issue 28 item 4).
            if not (lo - FLOOR_PP <= want <= hi * (1 + REL) + FLOOR_PP):
                wrong.append(f"{fix}: simulated {want:.1f}% outside the stated {lo:.1f}-{hi:.1f}%")
        elif not _within(got, want):
            wrong.append(f"{fix}: estimated {got:.1f}%, simulated {want:.1f}%")
        culprits = wi.get("culprit_ranks", {}).get(fix)
        if culprits:
            ranks = list(recs[0]["ranks"])
            if not ranks or not set(ranks) <= set(culprits):
                wrong.append(f"{fix}: ranks {ranks}, the fix speeds up ranks {culprits}")
            elif len(culprits) == 1 and ranks != culprits:
                wrong.append(f"{fix}: ranks {ranks}, the culprit is rank {culprits[0]}")
    assert not wrong, "; ".join(wrong) + f" -- recommendations {_summary(report)}"


@pytest.mark.parametrize("scenario,knobs,options,seed", PARAMS)
def test_combined_saving_matches_all_fixes_simulated_together(
    sim_root: Path, scenario: str, knobs: dict[str, Any], options: dict[str, Any], seed: int
) -> None:
    """The fixes the simulator applied, replayed all at once by the analyzer, against the
    job simulated with all of them; and the report's own combined saving (of the fixes it
    recommends) never above the largest share of a step any rank loses."""
    truth, report, got = _run3(sim_root, scenario, knobs, options, seed)
    want = truth["whatif"]["savings_pct"]["all"]
    assert got is not None, f"no combined what-if; warnings {report['warnings']}"
    assert _within(got, want, FLOOR_PP), (
        f"combined {got:.1f}%, all fixes simulated {want:.1f}% -- recommendations {_summary(report)}"
    )
    shown = report.get("job", {}).get("combined_savings_pct")
    lost = max(sum(r["lost_us"].values()) / r["window_us"] for r in report["ranks"] if r["window_us"] > 0)
    replayed = [r for r in report["recommendations"] if r.get("whatif")]
    assert (shown is None) == (not replayed)
    assert shown is None or shown <= 100 * lost + 1e-6


@pytest.mark.parametrize("scenario,knobs,options,seed", PARAMS)
def test_replay_of_the_unchanged_job_reproduces_its_steps(
    sim_root: Path, scenario: str, knobs: dict[str, Any], options: dict[str, Any], seed: int
) -> None:
    _, report = _run(sim_root, scenario, knobs, options, seed)
    err = report.get("job", {}).get("model_error_pct")
    assert err is not None and abs(err) <= MODEL_ERROR_PCT, f"model error {err}%"
