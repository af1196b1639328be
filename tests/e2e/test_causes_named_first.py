"""Issue 28 item 3: every cause a large job carries, simulated as real exports record it, is
named first with a saving from a replay close to the simulated fix.

The answer is known by construction: the simulator runs the job again with the fix
(``truth/ground_truth.json``, :mod:`gpuprof.simulate.whatif`). Jobs are small (few steps
and microbatches) so the suite stays fast; the knobs that make each cause are the
scenario's own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuprof.model.report import report_to_dict
from gpuprof.pipeline import run_analysis
from gpuprof.simulate import generate, read_truth

SMALL = {"steps": 2, "microbatches": 8}

CASES: list[tuple[str, str, dict[str, Any], str, str]] = [
    # (id, scenario, knobs, the fix the top recommendation must carry, its recommendation id)
    ("slow-worker", "megatron_slow_worker", SMALL, "peer_median_compute", "straggler-rank"),
    ("slow-worker-last-stage-dp2", "megatron_slow_worker", {**SMALL, "dp": 2, "slow_rank": 6},
     "peer_median_compute", "straggler-rank"),
    ("slow-stage", "megatron_slow_stage", SMALL, "balanced_stages", "pipeline-imbalance"),
    ("slow-link", "megatron_slow_link", SMALL, "peer_median_link", "straggler-link"),
    ("slow-dp-group", "megatron_slow_dp_group", SMALL, "peer_median_collective", "straggler-collective"),
    ("uneven-data", "megatron_uneven_data", {"steps": 3, "dp": 8}, "balanced_batches", "straggler-rotating"),
    ("slow-host", "slow_host", {"steps": 3}, "peer_median_host", "straggler-host"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("scenario", "knobs", "fix", "rec_id"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_cause_is_named_first_with_its_simulated_saving(
    tmp_path: Path, scenario: str, knobs: dict[str, Any], fix: str, rec_id: str
) -> None:
    out = generate(scenario, tmp_path / scenario, seed=3, **knobs)
    truth = read_truth(out)["whatif"]
    want = float(truth["savings_pct"][fix])
    report = report_to_dict(run_analysis([out]).report)
    top = report["recommendations"][0]
    assert (top["whatif"], top["id"]) == (fix, rec_id), [(r["id"], r["whatif"]) for r in report["recommendations"]]
    assert abs(top["estimated_savings_pct"] - want) <= 0.2 * want, (top["estimated_savings_pct"], want)
    culprits = truth["culprit_ranks"].get(fix)
    if culprits and rec_id != "straggler-rotating":
        assert sorted(top["ranks"]) == sorted(culprits)
    assert abs(report["job"]["model_error_pct"]) < 1.0
