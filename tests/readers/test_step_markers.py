"""Steps from other markers when a trace has no ``ProfilerStep#N`` (issue 12, item 5)."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import layouts as L
import pytest

from gpuprof.model.report import CAUSES, report_to_dict
from gpuprof.pipeline import analyze_paths
from gpuprof.readers import load_file
from gpuprof.readers.stepmarkers import PROFILER_STEP
from gpuprof.simulate import generate


def _kernel(ts: float, dur: float, corr: int) -> dict[str, Any]:
    return {
        "ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": ts, "dur": dur,
        "args": {"correlation": corr, "stream": 7},
    }  # fmt: skip


def _launch(ts: float, corr: int) -> dict[str, Any]:
    return {
        "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts,
        "dur": 2.0, "args": {"correlation": corr},
    }  # fmt: skip


def _host(name: str, ts: float, dur: float, cat: str = "user_annotation") -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}


def _iterations(n: int, marker: str | None, cat: str = "user_annotation", per_step: int = 1) -> list[dict[str, Any]]:
    """``n`` iterations of 1000 us: ``per_step`` marker ranges (micro-batches), then an
    ``Optimizer.step#SGD.step`` ending at 1000 k - 100; one kernel per micro-batch."""
    events = []
    corr = 1
    for k in range(n):
        t0 = 1000.0 * k
        for m in range(per_step):
            a = t0 + m * 800.0 / per_step
            if marker is not None:
                events.append(_host(marker, a, 800.0 / per_step - 10.0, cat))
            events.append(_launch(a + 5.0, corr))
            events.append(_kernel(a + 10.0, 800.0 / per_step - 30.0, corr))
            corr += 1
        events.append(_host("Optimizer.step#SGD.step", t0 + 800.0, 100.0, "cpu_op"))
    return events


def _read(write_trace: Any, kineto: Any, events: list[dict[str, Any]]) -> Any:
    [trace] = load_file(write_trace("t.json", kineto(events)))
    return trace


def test_optimizer_steps_end_the_steps(write_trace: Any, kineto: Any) -> None:
    trace = _read(write_trace, kineto, _iterations(5, None))
    assert trace.step_marker == "Optimizer.step#SGD.step"
    # 5 optimizer steps: 4 complete steps, each from one optimizer end to the next
    assert [(s.number, s.start_us, s.end_us) for s in trace.steps] == [
        (k, 1000.0 * k - 100.0, 1000.0 * (k + 1) - 100.0) for k in range(1, 5)
    ]
    assert any("Optimizer.step#SGD.step" in w and "4 complete steps" in w for w in trace.warnings)


@pytest.mark.parametrize(
    ("name", "cat"),
    [
        ("## train_step ##", "user_annotation"),
        ("run_training_batch", "user_annotation"),
        ("[LightningModule]Net.training_step", "user_annotation"),
        ("transformers/trainer.py(3000): training_step", "python_function"),
        ("train.py(82): train_step", "python_function"),
    ],
)
def test_bracketing_markers_are_steps(write_trace: Any, kineto: Any, name: str, cat: str) -> None:
    trace = _read(write_trace, kineto, _iterations(3, name, cat))
    assert trace.step_marker == name
    # each step runs from the start of its range to the start of the next; the last ends
    # with its range
    assert [(s.number, s.start_us, s.end_us) for s in trace.steps] == [
        (1, 0.0, 1000.0), (2, 1000.0, 2000.0), (3, 2000.0, 2790.0)
    ]  # fmt: skip


def test_profiler_step_wins(write_trace: Any, kineto: Any) -> None:
    events = _iterations(3, "## train_step ##")
    events += [_host(f"ProfilerStep#{7 + k}", 1000.0 * k, 999.0) for k in range(3)]
    trace = _read(write_trace, kineto, events)
    assert trace.step_marker == PROFILER_STEP
    assert [s.number for s in trace.steps] == [7, 8, 9]
    assert not any("no ProfilerStep" in w for w in trace.warnings)


def test_nested_markers_count_once(write_trace: Any, kineto: Any) -> None:
    events = _iterations(3, "[Strategy]DDPStrategy.training_step")
    events += [_host("[LightningModule]Net.training_step", 1000.0 * k + 1, 700.0) for k in range(3)]
    trace = _read(write_trace, kineto, events)
    assert len(trace.steps) == 3


def test_micro_batches_give_way_to_optimizer_steps(write_trace: Any, kineto: Any) -> None:
    # gradient accumulation: 4 training_step calls per optimizer step
    trace = _read(write_trace, kineto, _iterations(4, "training_step", per_step=4))
    assert trace.step_marker == "Optimizer.step#SGD.step"
    assert len(trace.steps) == 3


def test_wrapping_optimizer_ends_the_step(write_trace: Any, kineto: Any) -> None:
    # an EMA optimizer wraps the real one: the step ends when the wrapper ends
    events = [e for e in _iterations(4, None) if not e["name"].startswith("Optimizer")]
    for k in range(4):
        events.append(_host("Optimizer.step#EMA.step", 1000.0 * k + 800.0, 150.0, "cpu_op"))
        events.append(_host("Optimizer.step#Shampoo.step", 1000.0 * k + 805.0, 100.0, "cpu_op"))
    trace = _read(write_trace, kineto, events)
    assert trace.step_marker == "Optimizer.step#EMA.step"
    assert [s.end_us for s in trace.steps] == [1950.0, 2950.0, 3950.0]


def test_no_marker_no_steps(write_trace: Any, kineto: Any) -> None:
    events = [e for e in _iterations(3, None) if not e["name"].startswith("Optimizer")]
    trace = _read(write_trace, kineto, events)
    assert trace.steps == () and trace.step_marker is None


# --- the same job with other markers: the same diagnosis -------------------------------


@pytest.fixture(scope="module")
def straggler_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate("straggler", tmp_path_factory.mktemp("straggler"), ranks=3, steps=3, layers=4, slow_rank=2)


def _shares(report: dict[str, Any]) -> dict[int, dict[str, float]]:
    return {r["rank"]: {c.value: r["lost_us"][c.value] / r["window_us"] for c in CAUSES} for r in report["ranks"]}


@pytest.mark.parametrize("style", ["optimizer", "train_step", "lightning", "hf"])
def test_same_diagnosis_with_other_step_markers(straggler_job: Path, tmp_path: Path, style: str) -> None:
    base = report_to_dict(analyze_paths([straggler_job]))
    job = L.per_rank(straggler_job, tmp_path / style, L.step_markers(style))
    got = report_to_dict(analyze_paths([job]))
    assert [r["steps"] for r in got["ranks"]] == [2 if style == "optimizer" else 3] * 3
    marker = got["ranks"][0]["step_marker"]
    assert marker.startswith("Optimizer.step#") if style == "optimizer" else marker != PROFILER_STEP
    assert any("no ProfilerStep markers" in w for w in got["warnings"])
    top, base_top = got["recommendations"][0], base["recommendations"][0]
    assert (top["id"], top["ranks"]) == (base_top["id"], base_top["ranks"]) == ("straggler-rank", [2])
    assert top["estimated_savings_pct"] == pytest.approx(base_top["estimated_savings_pct"], abs=2.0)
    for rank, shares in _shares(got).items():
        for cause, share in shares.items():
            assert share == pytest.approx(_shares(base)[rank][cause], abs=0.02), (rank, cause)


def test_real_resnet_without_profiler_steps(shared_traces: Path, tmp_path: Path) -> None:
    """ResNet-50 on a V100 with its ProfilerStep markers renamed away: the six
    Optimizer.step markers give five steps and the same diagnosis."""
    src = shared_traces / "resnet50-nw0" / "worker0.pt.trace.json.gz"
    text = gzip.decompress(src.read_bytes()).replace(b'"ProfilerStep#', b'"RenamedStep#')
    stripped = tmp_path / "worker0.pt.trace.json.gz"
    stripped.write_bytes(gzip.compress(text, 1))
    base = report_to_dict(analyze_paths([src]))
    got = report_to_dict(analyze_paths([stripped]))
    assert base["ranks"][0]["steps"] == 6 and got["ranks"][0]["steps"] == 5
    assert got["ranks"][0]["step_marker"] == "Optimizer.step#SGD.step"
    assert [r["id"] for r in got["recommendations"][:2]] == [r["id"] for r in base["recommendations"][:2]]
    for cause in ("dataloader", "host"):
        share = got["ranks"][0]["lost_us"][cause] / got["ranks"][0]["window_us"]
        assert share == pytest.approx(base["ranks"][0]["lost_us"][cause] / base["ranks"][0]["window_us"], abs=0.03)
