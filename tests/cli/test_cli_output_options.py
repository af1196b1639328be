"""Smaller conventions (issue 21, section 7): ``-o`` is the report file for every command,
a file name and ``--format`` that disagree are refused, ``diff --fail-on-worse``, no
``-0.0 pp``, the simulated ground truth where no trace reader looks, and the shared traces
found through ``GPUPROF_SHARED_TRACES``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from clirun import run_cli
from reportfactory import rank, report

from gpuprof.model.report import report_to_dict

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_traces"
GPUPROF = [sys.executable, "-m", "gpuprof"]


def _saved(path: Path, rep: object) -> Path:
    path.write_text(json.dumps(report_to_dict(rep)))  # type: ignore[arg-type]
    return path


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUPROF, "run", "--no-hooks", *args, "--", sys.executable, "-c", "pass"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)


def test_run_dash_o_is_the_report_file_and_the_session_folder_has_its_own_option(tmp_path: Path) -> None:
    p = _run(tmp_path, "--session-dir", "s1", "-o", "report.json")
    assert p.returncode == 0, p.stderr
    assert json.loads((tmp_path / "report.json").read_text())["schema"] == "gpuprof.report/1"
    assert (tmp_path / "s1" / "session.json").is_file()
    # The old spellings still work: --out for the folder, and -o DIR (a name that names no
    # report format) as the folder, with a note saying how to write it now.
    p = _run(tmp_path, "--out", "s2")
    assert p.returncode == 0 and (tmp_path / "s2" / "session.json").is_file()
    p = _run(tmp_path, "-o", "s3")
    assert p.returncode == 0 and (tmp_path / "s3" / "session.json").is_file()
    assert "write --session-dir DIR for the folder" in p.stderr
    p = _run(tmp_path, "-o", "a.json", "--save-report", "b.json")
    assert p.returncode == 2 and "the same option" in p.stderr


def test_check_writes_its_report_with_dash_o(tmp_path: Path) -> None:
    base = _saved(tmp_path / "base.json", report([rank(0, lost_ms={"host": 1})]))
    out = tmp_path / "checked.md"
    got = run_cli("check", str(base), "--baseline", str(base), "-o", str(out))
    assert got.code == 0, got.stderr
    assert out.read_text().startswith("### gpuprof")


@pytest.mark.parametrize("command", ["analyze", "diff"])
def test_a_file_name_and_a_format_that_disagree_are_refused(command: str, tmp_path: Path) -> None:
    base = _saved(tmp_path / "base.json", report([rank(0, lost_ms={"host": 1})]))
    out = tmp_path / "x.json"
    inputs = [str(base)] if command == "analyze" else [str(base), str(base)]
    got = run_cli(command, *inputs, "-o", str(out), "--format", "html")
    assert got.code == 2
    assert got.stderr_lines == [f"gpuprof: {out}: the file name says json but --format says html; "
                                "name the file for html or leave --format out"]
    assert not out.exists()
    assert run_cli(command, *inputs, "-o", str(tmp_path / "x.html"), "--format", "html").code == 0


def test_diff_fail_on_worse_fails_only_a_worse_run(tmp_path: Path) -> None:
    base = _saved(tmp_path / "base.json", report([rank(0, window_ms=100, steps=4)]))
    worse = _saved(tmp_path / "worse.json", report([rank(0, window_ms=200, steps=4, lost_ms={"dataloader": 100})]))
    got = run_cli("diff", str(base), str(worse), "--fail-on-worse")
    assert got.code == 1 and "worse overall" in got.stdout  # the diff is written, then the exit code
    assert run_cli("diff", str(worse), str(base), "--fail-on-worse").code == 0
    assert run_cli("diff", str(base), str(worse)).code == 0  # without the flag a diff is a diff


def test_no_negative_zero_percentage_points(tmp_path: Path) -> None:
    from gpuprof.util.phrases import pp, signed_pct

    assert pp(-0.04) == "0.0 pp" and pp(-0.05) == "-0.1 pp" and pp(2.5) == "+2.5 pp"
    assert signed_pct(-0.01) == "0.0%"
    a = _saved(tmp_path / "a.json", report([rank(0, window_ms=1000, lost_ms={"host": 100.0})]))
    b = _saved(tmp_path / "b.json", report([rank(0, window_ms=1000, lost_ms={"host": 99.96})]))
    for fmt in ("text", "markdown", "html"):
        out = run_cli("diff", str(a), str(b), "--format", fmt).stdout.split('<script type="application/json"')[0]
        assert "-0.0" not in out and "0.0 pp" in out, fmt


def test_the_ground_truth_is_where_no_trace_reader_looks() -> None:
    from gpuprof.simulate import TRUTH_FILE, read_truth

    simulated = [d for d in sorted(SAMPLES.iterdir()) if d.is_dir() and d.name != "cpu-training"]
    assert len(simulated) >= 20
    for folder in simulated:
        # A tool that takes every *.json of the folder (HolisticTraceAnalysis does) finds traces only.
        top = sorted(p.name for p in folder.iterdir() if p.name.endswith((".json", ".json.gz")))
        assert "ground_truth.json" not in top and (folder / TRUTH_FILE).is_file(), folder.name
        assert all(n == "session.json" or ".trace." in n or n.startswith("timeline-") for n in top), (folder.name, top)
        assert read_truth(folder)["schema"] == "gpuprof.simulate.truth/1"


def test_an_older_simulated_folder_is_still_read(tmp_path: Path) -> None:
    from gpuprof.simulate import TRUTH_FILE, generate, read_truth

    out = generate("healthy", tmp_path / "old", steps=1, layers=2, whatifs=False)
    moved = out / "ground_truth.json"
    (out / TRUTH_FILE).rename(moved)
    assert read_truth(out)["scenario"] == "healthy"
    got = run_cli("simulate", "healthy", "steps=1", "layers=2", "--no-whatifs", "-o", str(out))
    assert got.code == 0, got.stderr  # an earlier output (old layout) may be written over
    assert not moved.exists() and (out / TRUTH_FILE).is_file()


def test_the_shared_traces_folder_can_be_named_by_an_environment_variable(tmp_path: Path) -> None:
    code = "import conftest; print(conftest.SHARED_TRACES)"
    env = {**os.environ, "GPUPROF_SHARED_TRACES": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True,
                         cwd=ROOT / "tests").stdout.strip()
    assert out == str(tmp_path)
