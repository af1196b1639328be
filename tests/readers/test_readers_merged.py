"""Merged multi-rank files split into ranks at read time (issue 12, item 2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import layouts as L
import pytest
from clirun import run_cli

from gpuprof.errors import BadTraceError
from gpuprof.model.report import CAUSES, report_to_dict
from gpuprof.pipeline import analyze_paths
from gpuprof.readers import chunks, load_file
from gpuprof.readers.merged import _label_ranks
from gpuprof.simulate import generate


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate("straggler", tmp_path_factory.mktemp("job"), ranks=4, steps=3, layers=4, slow_rank=3)


@pytest.fixture(scope="module")
def base(job: Path) -> dict[str, Any]:
    return report_to_dict(analyze_paths([job]))


def _same_diagnosis(got: dict[str, Any], base: dict[str, Any]) -> None:
    assert [r["rank"] for r in got["ranks"]] == [0, 1, 2, 3]
    for a, b in zip(got["ranks"], base["ranks"]):
        assert a["steps"] == b["steps"]
        assert a["window_us"] == pytest.approx(b["window_us"], rel=1e-9)
        assert a["compute_us"] == pytest.approx(b["compute_us"], rel=1e-9)
        for c in CAUSES:
            assert a["lost_us"][c.value] == pytest.approx(b["lost_us"][c.value], abs=1e-6 * b["window_us"])
    assert [(r["id"], r["ranks"]) for r in got["recommendations"]] == [
        (r["id"], r["ranks"]) for r in base["recommendations"]
    ]
    assert got["recommendations"][0]["estimated_savings_pct"] == pytest.approx(
        base["recommendations"][0]["estimated_savings_pct"], abs=0.01
    )


def test_tracefusion_file_reads_as_its_ranks(job: Path, base: dict[str, Any], tmp_path: Path) -> None:
    merged = L.tracefusion(job, tmp_path / "merged_trace_all_events.json.gz")
    traces = load_file(merged)
    assert [t.rank for t in traces] == [0, 1, 2, 3]
    assert [t.device_index for t in traces] == [0, 1, 2, 3]  # the GPU, not rank * 1e8 + GPU
    got = report_to_dict(analyze_paths([merged]))
    _same_diagnosis(got, base)
    assert "ranks 0-3: read from a merged file of 4 ranks (tracefusion)" in got["warnings"]


def test_tracefusion_with_ranks_on_process_metadata_only(
    job: Path, base: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    merged = L.tracefusion(job, tmp_path / "merged.json.gz", rank_on="metadata")
    # Small pieces: the first piece holds rank 0's events but none of its metadata events
    # (written last), so the ranks only show as mixing, and the rank marks come later.
    monkeypatch.setattr(chunks, "TARGET_BYTES", 64 << 10)
    import gpuprof.readers as readers

    later: list[str] = []
    split_later = readers._split_later
    monkeypatch.setattr(
        readers, "_split_later", lambda path, why, *limits: later.append(why) or split_later(path, why, *limits)
    )
    got = report_to_dict(analyze_paths([merged]))
    assert later == ["events of 4 GPUs, and the same ProfilerStep recorded several times"]
    _same_diagnosis(got, base)


def test_rank_labelled_pids(job: Path, base: dict[str, Any], tmp_path: Path) -> None:
    merged = L.sglang_merge(job, tmp_path / "merged-1234.trace.json.gz")
    traces = load_file(merged)
    # the merged file keeps rank 0's distributedInfo: its world size holds, its rank does not
    assert [(t.rank, t.world_size) for t in traces] == [(0, 4), (1, 4), (2, 4), (3, 4)]
    got = report_to_dict(analyze_paths([merged]))
    _same_diagnosis(got, base)
    assert "ranks 0-3: read from a merged file of 4 ranks (rank-labelled pids)" in got["warnings"]


def test_labels_without_numbers_are_numbered_in_order() -> None:
    assert _label_ranks(["TP01", "TP00"]) == ({"TP01": 1, "TP00": 0}, [])
    ranks, notes = _label_ranks(["DP1 TP0", "DP0 TP1", "DP0 TP0"])
    assert ranks == {"DP0 TP0": 0, "DP0 TP1": 1, "DP1 TP0": 2}
    assert len(notes) == 1 and "ranks numbered by label" in notes[0]


def test_ranks_mixed_in_an_unknown_form_are_refused(job: Path, tmp_path: Path) -> None:
    merged = L.plain_concat(job, tmp_path / "all_ranks.json.gz")
    with pytest.raises(BadTraceError, match="holds events of several ranks"):
        load_file(merged)
    res = run_cli("analyze", str(merged), "--format", "json")
    assert res.code == 2 and res.traceback is None and res.stdout == ""
    [line] = res.stderr_lines
    assert str(merged) in line and "merged in a form gpuprof does not recognize" in line


def _launch(ts: float, corr: int, pid: int) -> dict[str, Any]:
    return {
        "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid, "tid": pid, "ts": ts,
        "dur": 2.0, "args": {"correlation": corr},
    }  # fmt: skip


def _kernel(ts: float, corr: int, gpu: int) -> dict[str, Any]:
    return {
        "ph": "X", "cat": "kernel", "name": "gemm", "pid": gpu, "tid": 7, "ts": ts, "dur": 5.0,
        "args": {"correlation": corr, "stream": 7},
    }  # fmt: skip


def test_one_process_on_two_gpus_is_one_rank(write_trace: Any, kineto: Any) -> None:
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 900}]
    for i in range(40):
        events += [_launch(20.0 * i, i, 1), _kernel(20.0 * i + 3, i, i % 2)]
    [trace] = load_file(write_trace("one.json", kineto(events)))
    assert any("several GPUs" in w for w in trace.warnings)


def test_two_processes_sharing_correlation_ids_are_refused(write_trace: Any, kineto: Any) -> None:
    events = []
    for pid in (1, 2):
        for i in range(40):
            events += [_launch(20.0 * i + pid, i, pid), _kernel(20.0 * i + 3 + pid, i, 0)]
    with pytest.raises(BadTraceError, match="40 of its 80 kernel launches share a correlation id"):
        load_file(write_trace("two.json", kineto(events)))


def _claims(tmp_path: Path, ranks: int, per_rank: int) -> Path:
    import gzip
    import json

    events = [
        {"ph": "X", "cat": "kernel", "name": "gemm_kernel", "pid": r * 10 + 1, "tid": 7, "ts": 1000 + k * 10,
         "dur": 5, "args": {"rank": r, "device": 0, "stream": 7, "correlation": k + 1}}
        for r in range(ranks)
        for k in range(per_rank)
    ]
    path = tmp_path / f"merged-{ranks}.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    return path


def test_claimed_ranks_cannot_outnumber_the_events(tmp_path: Path) -> None:
    # Issue 20, case 16: 60,000 kernels claiming 20,000 ranks ran past 120 s and 3.6 GB, the
    # cost following the claimed ranks (a fixed cost each), not the file. Here 2,000 ranks
    # of 3 events: at most 64 ranks may be claimed for 6,000 events.
    r = run_cli("analyze", str(_claims(tmp_path, 2000, 3)), "--format", "json")
    assert r.code == 2 and len(r.stderr_lines) == 1
    assert "claims 2000 ranks for 6000 events" in r.stderr and "at most 64 here" in r.stderr
    # A small merged file of a few small ranks is still split and read.
    r = run_cli("analyze", str(_claims(tmp_path, 8, 30)), "--format", "json")
    assert r.code == 0, r.stderr
