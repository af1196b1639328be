"""Filtered traces: what the trace lacks, and the advice held back for it (issue 12, item 3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import layouts as L
import pytest

from gpuprof.accounting.evidence import Evidence, trace_lacks
from gpuprof.advice import CATEGORY_NEEDS, NEEDS, hold_back, needs_of
from gpuprof.model.report import CAUSES, Cause, Recommendation, report_to_dict
from gpuprof.pipeline import analyze_paths
from gpuprof.readers import load_file
from gpuprof.simulate import generate


def _report(path: Path) -> dict[str, Any]:
    return report_to_dict(analyze_paths([path]))


def _rec(rid: str, category: Cause, ranks: tuple[int, ...] = (0,)) -> Recommendation:
    return Recommendation(rid, category, f"title of {rid}", 10.0, ranks, ("measured",), ("do it",))


# --- the central filter ------------------------------------------------------------------


def test_every_cause_declares_what_it_needs() -> None:
    assert set(CATEGORY_NEEDS) == set(CAUSES)
    assert NEEDS["comm-overlap"] >= {Evidence.COMPUTE_KERNELS}
    assert NEEDS["host-overhead"] >= {Evidence.HOST_EVENTS, Evidence.LAUNCH_CALLS}
    # an id not in the table needs what its category needs
    assert needs_of(_rec("new-dataloader-idea", Cause.DATALOADER)) == CATEGORY_NEEDS[Cause.DATALOADER]


def test_an_advisor_declares_what_its_recommendations_need(monkeypatch: pytest.MonkeyPatch) -> None:
    import gpuprof.advice.context as advice  # the advisors' registry

    monkeypatch.setattr(advice, "ADVISORS", [])
    monkeypatch.setattr(advice, "_ADVISOR_NEEDS", {})

    @advice.advisor(needs=[Evidence.ALL_KERNELS])
    def kernel_census(ctx: Any) -> list[Recommendation]:
        return []

    @advice.advisor
    def plain(ctx: Any) -> list[Recommendation]:
        return []

    assert advice.ADVISORS == [kernel_census, plain]
    rec = _rec("kernel-census", Cause.OTHER)
    assert needs_of(rec, kernel_census) == {Evidence.ALL_KERNELS}
    assert needs_of(rec, plain) == frozenset()


def test_a_recommendation_is_held_back_when_a_rank_it_rests_on_lacks_what_it_needs() -> None:
    lacks = {0: {"host_events": "no host events: a GPU-only trace"}, 1: {}}
    local = _rec("dataloader-starvation", Cause.DATALOADER, (0,))
    held = hold_back(local, needs_of(local), lacks)
    assert held is not None and held.missing == {"host_events": (0,)}
    assert held.line == (
        "held back 'title of dataloader-starvation': it needs host events "
        "(rank 0: no host events: a GPU-only trace)"
    )
    # rank 1 has its host events: advice about rank 1 alone stands
    assert hold_back(_rec("dataloader-starvation", Cause.DATALOADER, (1,)), needs_of(local), lacks) is None
    # a job-level cause rests on every rank, whatever ranks it names
    comm = _rec("comm-overlap", Cause.COMMUNICATION, (1,))
    lacks_compute = {0: {"compute_kernels": "no compute kernels, only communication kernels"}, 1: {}}
    assert hold_back(comm, needs_of(comm), lacks_compute) is not None
    # nothing lacking, or nothing needed: kept
    assert hold_back(comm, needs_of(comm), {0: {}, 1: {}}) is None
    assert hold_back(_rec("x", Cause.OTHER), frozenset(), lacks) is None


# --- what a trace lacks ------------------------------------------------------------------


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate("straggler", tmp_path_factory.mktemp("job"), ranks=4, steps=3, layers=4, slow_rank=3)


def _lacks(path: Path) -> dict[str, str]:
    from gpuprof.accounting.summarize import summarize

    [trace] = load_file(path)
    return dict(summarize(trace).facts.trace_lacks)


def test_trace_lacks(job: Path, tmp_path: Path) -> None:
    assert _lacks(L.rank_files(job)[0]) == {}
    nccl = _lacks(L.per_rank(job, tmp_path / "nccl", L.nccl_only) / "rank0.json.gz")
    assert nccl["compute_kernels"] == "no compute kernels, only communication kernels"
    assert nccl["host_events"].startswith("no host events")
    gpu = _lacks(L.per_rank(job, tmp_path / "gpu", L.gpu_only) / "rank0.json.gz")
    assert set(gpu) == {"host_events", "launch_calls", "runtime_calls", "all_launches"}
    with_host = _lacks(L.per_rank(job, tmp_path / "ncclh", L.nccl_only_with_host) / "rank0.json.gz")
    assert set(with_host) == {"compute_kernels", "all_kernels"}
    assert "launch calls have their device event" in with_host["all_kernels"]


def test_a_trace_filtered_to_launch_calls(write_trace: Any, kineto: Any, event: Any) -> None:
    events = []
    for i in range(120):
        events.append(event("cuda_runtime", "cudaLaunchKernel", 10.0 * i, 2.0, pid=1, tid=1, correlation=i))
        events.append(event("kernel", "gemm", 10.0 * i + 3, 5.0, pid=0, tid=7, correlation=i, stream=7))
    [trace] = load_file(write_trace("t.json", kineto(events)))
    from gpuprof.accounting.summarize import summarize

    lacks = summarize(trace).facts.trace_lacks
    assert list(lacks) == ["runtime_calls"] and "only launch calls among its 120" in lacks["runtime_calls"]
    # one usual non-launch call among them: not filtered
    events.append(event("cuda_runtime", "cudaStreamSynchronize", 2000.0, 5.0, pid=1, tid=1, correlation=999))
    [trace] = load_file(write_trace("t2.json", kineto(events)))
    assert trace_lacks(trace, summarize(trace).facts.trust) == {}


# --- whole jobs in filtered layouts ------------------------------------------------------


@pytest.mark.parametrize("rewrite", [L.nccl_only, L.nccl_only_with_host])
def test_nccl_only_holds_back_overlap_and_cost_but_says_who_is_late(job: Path, tmp_path: Path, rewrite: Any) -> None:
    base = _report(job)
    assert base["recommendations"][0]["id"] == "straggler-rank"
    got = _report(L.per_rank(job, tmp_path / "nccl", rewrite))
    ids = {r["id"] for r in got["recommendations"]}
    assert not ids & {"comm-overlap", "exposed-communication", "straggler-rank", "communication-slow-collectives"}
    held = {h["id"]: h for h in got["held_back"]}
    assert "compute_kernels" in held["straggler-rank"]["needs"]
    # what the collectives themselves show is still there: rank 3 arrives last
    assert held["straggler-rank"]["ranks"] == [3]
    assert [s["rank"] for s in got["job"]["stragglers"]] == [3]
    lines = [w for w in got["warnings"] if w.startswith("held back 'Rank 3 arrives last")]
    assert len(lines) == 1 and "compute kernels (ranks 0-3: no compute kernels" in lines[0]
    assert any("the trace has no compute kernels" in w for w in got["warnings"])
    assert got["warnings"][: len(held)] == [w for w in got["warnings"] if w.startswith("held back")]


def test_renderers_say_advice_was_held_back(job: Path, tmp_path: Path) -> None:
    from gpuprof.render import render

    report = analyze_paths([L.per_rank(job, tmp_path / "nccl", L.nccl_only)])
    for fmt in ("text", "markdown", "html"):
        out = render(report, fmt, width=200)
        # the straggler and overlap advice, and the general advice for the idle time no
        # rule explains (all of it: no compute kernels in the file)
        assert "No recommendation the trace supports: 3 held back" in out, fmt
        assert "no cause of lost time stands out" not in out


def test_gpu_only_keeps_the_diagnosis_from_device_events(job: Path, tmp_path: Path) -> None:
    base = _report(job)
    got = _report(L.per_rank(job, tmp_path / "gpu", L.gpu_only))
    top, base_top = got["recommendations"][0], base["recommendations"][0]
    assert (top["id"], top["ranks"]) == (base_top["id"], base_top["ranks"]) == ("straggler-rank", [3])
    assert top["estimated_savings_pct"] == pytest.approx(base_top["estimated_savings_pct"], abs=1.0)
    assert not any(r["category"] in ("host", "dataloader", "sync") for r in got["recommendations"])
    assert any("the trace has no host events" in w for w in got["warnings"])


def test_gpu_only_host_bound_job_gets_no_host_advice(tmp_path: Path) -> None:
    job = generate("launch_bound", tmp_path / "lb", steps=2, layers=8)
    assert _report(job)["recommendations"][0]["category"] == "host"
    got = _report(L.per_rank(job, tmp_path / "gpu", L.gpu_only))
    assert not any(r["category"] == "host" for r in got["recommendations"])
    assert got["ranks"][0]["lost_us"]["host"] == 0.0  # no host event behind a host cause


def test_real_export_filtered_to_launches(shared_traces: Path) -> None:
    """hta-sampled-2rank: every runtime call is a launch (the export dropped the sync,
    event and allocation calls). Advice resting on those calls would be held back; host
    advice rests on the launches and ops, which are there, and stands."""
    from gpuprof.accounting.summarize import summarize
    from gpuprof.readers import discover

    for src in discover([shared_traces / "hta-sampled-2rank"]):
        [trace] = src.load()
        assert list(summarize(trace).facts.trace_lacks) == ["runtime_calls"]
    assert Evidence.RUNTIME_CALLS in NEEDS["sync-host-blocking"]
    assert Evidence.RUNTIME_CALLS not in NEEDS["host-overhead"]
    got = _report(shared_traces / "hta-sampled-2rank")
    assert "held_back" not in got
    assert {r["id"] for r in got["recommendations"]} >= {"host-overhead", "exposed-communication"}
