"""The world size inferred from the collectives when the traces do not state it (issue 12, item 1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import layouts as L
import pytest

from gpuprof.model.report import CAUSES, report_to_dict
from gpuprof.pipeline import analyze_paths
from gpuprof.simulate import generate

INFERRED = "world size inferred from the collectives"


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate("straggler", tmp_path_factory.mktemp("job"), ranks=4, steps=3, layers=4, slow_rank=3)


def _report(path: Path) -> dict[str, Any]:
    return report_to_dict(analyze_paths([path]))


@pytest.mark.parametrize("rewrite", [L.drop_world_size, L.drop_distributed_info])
def test_complete_job_without_world_size_names_the_straggler(job: Path, tmp_path: Path, rewrite: Any) -> None:
    base = _report(job)
    got = _report(L.per_rank(job, tmp_path / "split", rewrite))
    assert not any(INFERRED in w for w in base["warnings"])
    assert any(INFERRED in w and ": 4 " in w for w in got["warnings"])
    assert got["job"]["straggler_analysis"]["world_size"] == 4
    assert "incomplete_groups" not in got["job"]["straggler_analysis"]
    top, base_top = got["recommendations"][0], base["recommendations"][0]
    assert (top["id"], top["ranks"]) == (base_top["id"], base_top["ranks"]) == ("straggler-rank", [3])
    assert top["estimated_savings_pct"] == pytest.approx(base_top["estimated_savings_pct"], abs=0.5)
    for a, b in zip(got["ranks"], base["ranks"]):
        for c in CAUSES:
            assert a["lost_us"][c.value] == pytest.approx(b["lost_us"][c.value], abs=1e-3 * b["window_us"])


def test_a_gap_in_the_ranks_is_not_a_complete_job(job: Path, tmp_path: Path) -> None:
    split = L.per_rank(job, tmp_path / "split", L.drop_world_size)
    (split / "rank1.json.gz").unlink()  # ranks 0, 2, 3: rank 1 is missing
    got = _report(split)
    assert not any(INFERRED in w for w in got["warnings"])
    assert "world_size" not in got["job"]["straggler_analysis"]
    assert got["job"]["straggler_analysis"]["incomplete_groups"]
    assert not got["job"]["stragglers"]



def test_an_unknown_group_size_is_said_so() -> None:
    from reportfactory import rank

    from gpuprof.advice import AdviceContext
    from gpuprof.advice.distributed import straggler_advice
    from gpuprof.job.findings import JobFindings, StragglerAnalysis

    reports = [rank(0, lost_ms={"straggler": 20.0}), rank(1, lost_ms={"straggler": 22.0})]
    info = StragglerAnalysis(incomplete_groups={"0": (2, -1)})
    ctx = AdviceContext(summaries=[], reports=reports, cross=JobFindings(measured=True, straggler_analysis=info))
    [rec] = straggler_advice(ctx)
    assert rec.id == "straggler-absent-rank"
    assert "process groups only partly in the input (0: 2 of an unknown number of ranks)" in rec.evidence


def test_collectives_of_subgroups_say_nothing_of_the_world(tmp_path: Path) -> None:
    # Two data-parallel replicas of a 2-stage pipeline: the collectives have 2 members of 4.
    job = generate(
        "pipeline", tmp_path / "pp", schedule="1f1b", microbatches=4, steps=2, stage_ms=0.5, dp=2, stages=2
    )
    got = _report(L.per_rank(job, tmp_path / "split", L.drop_world_size))
    assert got["job"]["straggler_analysis"]["collectives_matched"] > 0
    assert not any(INFERRED in w for w in got["warnings"])
    assert "world_size" not in got["job"]["straggler_analysis"]
