"""What ``gpuprof run`` says and saves when the job ends: reports in the session folder
whatever --format prints, nothing but gpuprof lines on stderr for json/html, --save-report,
and a CPU-only run that ends with what was measured instead of "nothing to analyze"."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gpuprof.accounting.host_steps import host_steps
from gpuprof.cli.run import report_run
from gpuprof.model.timeline import (
    HOST_COLUMNS,
    Category,
    Kind,
    RankTrace,
    Step,
    empty_device_table,
    make_table,
)
from gpuprof.record.runner import RunResult
from gpuprof.session import SESSION_SCHEMA
from gpuprof.session.writer import SessionWriter

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


def _session(root: Path, trace: Path | None, steps: int = 0) -> Path:
    w = SessionWriter(root)
    w.write_meta({"schema": SESSION_SCHEMA, "status": "finished", "command": ["python", "train.py"],
                  "exit_code": 0, "gpus": [], "hooks_enabled": True,
                  "profile_schedule": {"wait": 1, "warmup": 1, "active": 3}, "warnings": []})
    w.close()
    if trace is not None:
        shutil.copy(trace, root / "traces" / "rank0.pt.trace.json.gz")
    if steps:
        lines = [json.dumps({"time_unix_s": 100.0 + 0.25 * i, "kind": "step", "rank": 0, "pid": 42, "step": i})
                 for i in range(1, steps + 1)]
        (root / "hooks" / "rank0-42.jsonl").write_text("\n".join(lines) + "\n")
    return root


def _result(root: Path) -> RunResult:
    return RunResult(exit_code=0, signal=None, session_dir=root)


@pytest.mark.parametrize("fmt", ["text", "markdown", "json", "html"])
def test_reports_are_saved_in_the_session_whatever_the_format(tmp_path: Path, fmt: str,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    root = _session(tmp_path / "s", SAMPLES / "healthy" / "rank0.pt.trace.json.gz")
    report_run(root, fmt, None, _result(root))
    out, err = capsys.readouterr()
    assert out == ""  # stdout belongs to the job
    saved = json.loads((root / "report.json").read_text())
    assert saved["schema"] == "gpuprof.report/1" and [r["rank"] for r in saved["ranks"]] == [0]
    assert (root / "report.html").read_text().lstrip().lower().startswith("<!doctype html")
    if fmt in ("json", "html"):
        # Never a JSON or HTML document dumped into the terminal beside the job's output.
        assert all(line.startswith("gpuprof: ") for line in err.splitlines()), err
        assert f"report in {root / 'report.html'}" in err
    elif fmt == "markdown":
        assert any(line.startswith("#") and "gpuprof" in line for line in err.splitlines())
    else:
        assert "gpuprof: job: exit code 0" in err


def test_save_report_dash_prints_the_chosen_format_on_stdout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _session(tmp_path / "s", SAMPLES / "healthy" / "rank0.pt.trace.json.gz")
    report_run(root, "json", Path("-"), _result(root))
    out, err = capsys.readouterr()
    assert json.loads(out)["schema"] == "gpuprof.report/1"
    assert "{" not in err


def test_save_report_file_takes_its_format_from_the_extension(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _session(tmp_path / "s", SAMPLES / "healthy" / "rank0.pt.trace.json.gz")
    dest = tmp_path / "ci-report.md"
    report_run(root, "text", dest, _result(root))
    assert dest.read_text().startswith("#")
    assert f"report written to {dest}" in capsys.readouterr().err


def test_a_report_that_cannot_be_saved_is_one_line_and_the_rest_goes_on(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    root = _session(tmp_path / "s", SAMPLES / "healthy" / "rank0.pt.trace.json.gz")
    (root / "report.json").mkdir()  # something in the way, as a full disk would be
    report_run(root, "text", None, _result(root))
    err = capsys.readouterr().err
    assert len([ln for ln in err.splitlines() if "report not saved in the session" in ln]) == 1
    assert "session saved in" in err


def test_cpu_only_run_says_the_same_summary_in_all_four_places(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """stderr at the end of the run, report.json, report.html and `gpuprof analyze SESSION`
    all carry the one CPU-only summary (figures.cpu_only_summary), never "nothing to analyze"."""
    from gpuprof.api import analyze
    from gpuprof.render import render
    from gpuprof.render.figures import cpu_only_summary

    root = _session(tmp_path / "s", SAMPLES / "cpu-training" / "worker0.pt.trace.json.gz", steps=9)
    report_run(root, "text", None, _result(root))
    err = capsys.readouterr().err
    assert "nothing to analyze" not in err
    assert "gpuprof: no GPU activity was recorded (CPU only); measured on the host:" in err
    assert "9 optimizer steps, median 250.0 ms apart by the job's own clock" in err
    host = "rank 0, 3 profiled steps: mean step 2.6 ms on the host; 2.0 ms of it (76%) inside torch operators"
    assert host in err
    assert err.count("on a GPU, gpuprof splits each step") == 1
    assert err.count("no GPU activity") == 1  # the rank's note is the headline, not also a warning
    saved = json.loads((root / "report.json").read_text())
    assert saved["run"] == {"optimizer_steps": 9, "step_time_median_us": 250000.0, "step_time_mean_us": 250000.0,
                            "cpu_only": True, "rank": 0, "profiled_steps": 3,
                            "host_step_us": pytest.approx(2648.91, abs=1e-3), "host_op_us": pytest.approx(2000.534, abs=1e-3)}
    assert saved["ranks"][0]["host_steps"]["profiled_steps"] == 3
    page = (root / "report.html").read_text()
    assert "nothing to analyze" not in page and host in page
    again = analyze(root)
    summary = cpu_only_summary(again)
    assert summary is not None and any(host in line for line in summary.lines)
    for fmt in ("text", "markdown", "html"):
        assert host in render(again, fmt), fmt


def test_a_cpu_only_trace_outside_a_session_is_summarized_per_rank(shared_traces: Path) -> None:
    """A torchrun job on CPUs: the host time inside gloo collectives, per rank."""
    from gpuprof.api import analyze
    from gpuprof.render import render

    report = analyze(shared_traces / "edge-cpu-only-gloo")
    text = render(report, "text")
    assert "nothing to analyze" not in text
    assert "rank 34, 1 profiled step: mean step 210.1 ms on the host; 178.8 ms of it (85%) in gloo collectives" in text


def test_a_command_that_cannot_start_is_not_analyzed(tmp_path: Path) -> None:
    """`gpuprof run -- nonexistent-cmd`: exit 127 after the one error line, no report."""
    import subprocess
    import sys

    out = tmp_path / "s"
    p = subprocess.run([sys.executable, "-m", "gpuprof", "run", "--out", str(out), "--", "gpuprof-no-such-command"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 127
    assert p.stderr.rstrip().splitlines()[-1] == "gpuprof: cannot run 'gpuprof-no-such-command': No such file or directory"
    assert not out.exists()  # no session folder for a job that never ran


def test_analyzing_a_session_is_silent_about_its_own_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """report.json, written by gpuprof beside the traces, is never read as a trace nor warned about."""
    from gpuprof.api import analyze

    root = _session(tmp_path / "s", SAMPLES / "healthy" / "rank0.pt.trace.json.gz")
    report_run(root, "text", None, _result(root))
    capsys.readouterr()
    report = analyze(root)
    assert not [w for w in report.warnings if "report.json" in w or "skipped" in w], report.warnings


def test_host_steps_counts_nested_operators_once_per_step() -> None:
    host = make_table(
        {
            "start_us": [0.0, 10.0, 12.0, 30.0, 100.0, 150.0, 0.0],
            "end_us": [40.0, 20.0, 18.0, 50.0, 130.0, 400.0, 200.0],
            "kind": [Kind.OP, Kind.OP, Kind.OP, Kind.OP, Kind.OP, Kind.OP, Kind.OP],
            "category": [Category.OTHER] * 6 + [Category.STEP],
            "name": ["aten::a", "aten::b", "aten::c", "aten::d", "aten::e", "aten::f", "ProfilerStep#1"],
        },
        HOST_COLUMNS,
    )
    trace = RankTrace(rank=0, source="x", fmt="kineto", device=empty_device_table(), host=host,
                      steps=(Step(1, 0.0, 100.0), Step(2, 100.0, 200.0), Step(3, 200.0, 260.0)))
    h = host_steps(trace)
    # Step 1: [0,50) = 50 us in ops (nested and overlapping counted once); step 2: [100,130) + [150,200) = 80;
    # step 3: [200,260) = 60. The step marker itself is not an operator. Means, as every report's step.
    assert h.steps == 3 and h.step_us == pytest.approx(260 / 3) and h.op_us == pytest.approx(190 / 3)
    assert h.op_pct == pytest.approx(100 * 190 / 260)
    assert host_steps(RankTrace(rank=0, source="x", fmt="kineto", device=empty_device_table(), host=host)).steps == 0
