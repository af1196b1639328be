"""``gpuprof.torch.trace_handler`` in a real ``torch.profiler`` loop (CPU build of torch)."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import gpuprof
from gpuprof.model.schema import first_problem
from gpuprof.readers.saved import read_report

torch = pytest.importorskip("torch", reason="needs torch (pip install torch==2.13.0, the CPU build)")
pytestmark = pytest.mark.torch


def _train(steps: int, on_trace_ready: object, wait: int = 1, warmup: int = 1, active: int = 2, repeat: int = 0) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(16, 32), torch.randn(16, 1)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=torch.profiler.schedule(wait=wait, warmup=warmup, active=active, repeat=repeat),
        on_trace_ready=on_trace_ready,
    ) as prof:
        for _ in range(steps):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            prof.step()


@pytest.mark.filterwarnings("ignore:Warning. Profiler clears events")  # torch's note on repeat > 1
def test_each_cycle_writes_its_trace_and_report(tmp_path: Path) -> None:
    out = io.StringIO()
    handler = gpuprof.torch.trace_handler(tmp_path / "traces", file=out)
    _train(9, handler, repeat=2)  # two cycles of 1 wait + 1 warm-up + 2 recorded steps

    traces = sorted((tmp_path / "traces").glob("*.pt.trace.json.gz"))
    assert len(traces) == 2 and traces == sorted(handler.trace_paths)
    for t in traces:
        # <worker>.<time_ns>.pt.trace.json.gz, as tensorboard_trace_handler named them.
        assert re.fullmatch(r".+_\d+\.\d{19}\.pt\.trace\.json\.gz", t.name), t.name
    assert not [p for p in (tmp_path / "traces").iterdir() if p.name.startswith(".")]  # no temporary left

    reports = sorted((tmp_path / "traces").glob("*.gpuprof.json"))
    assert len(reports) == 2 and reports == sorted(handler.report_paths)
    for trace, saved in zip(traces, reports):
        assert saved.name == trace.name.replace(".pt.trace.json.gz", ".gpuprof.json")
        doc = json.loads(saved.read_text())
        assert first_problem(doc) is None
        assert doc["inputs"] == [str(trace)]
        assert read_report(saved).to_dict() == doc
    # A CPU-only job: the report says there was no GPU activity, rather than inventing figures.
    assert all(r is not None and r.ranks[0].window_us == 0 for r in handler.reports)
    printed = out.getvalue()
    assert printed.count("no GPU activity") >= 2
    # Two profiled steps each cycle, each a ProfilerStep the analysis can read.
    trace_doc = json.loads(__import__("gzip").decompress(traces[0].read_bytes()))
    steps = {e["name"] for e in trace_doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")}
    assert len(steps) == 2


def test_folder_of_cycles_is_read_without_the_saved_reports(tmp_path: Path) -> None:
    """`gpuprof analyze` on the handler's folder reads the traces and skips its reports silently."""
    handler = gpuprof.torch.trace_handler(tmp_path, worker_name="rank0", print_report=False)
    _train(5, handler)
    assert len(handler.trace_paths) == 1 and len(handler.report_paths) == 1
    report = gpuprof.analyze(tmp_path)
    assert report.ranks[0].source == str(handler.trace_paths[0])
    assert not [w for w in report.warnings if "skipped" in w]


def test_plain_json_and_no_report(tmp_path: Path) -> None:
    out = io.StringIO()
    handler = gpuprof.torch.trace_handler(tmp_path, worker_name="w", use_gzip=False, print_report=False,
                                          save_report=False, file=out)
    _train(5, handler)
    assert [p.name for p in tmp_path.iterdir()] == [handler.trace_paths[0].name]
    assert handler.trace_paths[0].name.startswith("w.") and handler.trace_paths[0].name.endswith(".pt.trace.json")
    json.loads(handler.trace_paths[0].read_text())
    assert out.getvalue() == "" and handler.reports == []


def test_a_failed_analysis_never_stops_training(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    import gpuprof.pipeline.inputs

    def broken(*_a: object, **_k: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(gpuprof.pipeline.inputs, "outcome_of", broken)
    handler = gpuprof.torch.trace_handler(tmp_path)
    _train(5, handler)
    err = capsys.readouterr().err
    assert len(handler.trace_paths) == 1 and handler.trace_paths[0].exists()
    assert handler.reports == [None]
    assert "could not analyze" in err and "RuntimeError: boom" in err and len(err.strip().splitlines()) == 1


def test_importing_the_integration_does_not_import_torch() -> None:
    code = "import sys, gpuprof.torch; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_outside_torch_distributed_the_report_goes_to_stderr_whole_and_without_a_rank_guess(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A non-distributed run: the trace's rank is known (the one process), so no "does not
    record its rank" warning, in the printed report or the saved one; the report is on
    stderr (stdout is the training log's) and, off a terminal, no line of it is broken."""
    handler = gpuprof.torch.trace_handler(tmp_path)
    _train(5, handler)
    out, err = capsys.readouterr()
    assert out == ""
    assert "no GPU activity was recorded" in err
    assert "does not record its rank" not in err
    saved = json.loads(handler.report_paths[0].read_text())
    assert not [w for w in saved["warnings"] if "does not record its rank" in w]
    # The report's long lines stay whole (a bullet never continues on an indented line).
    assert not [ln for ln in err.splitlines() if ln.startswith("     ") and not ln.lstrip().startswith(("-", ">"))]
    assert any(len(ln) > 100 for ln in err.splitlines())
