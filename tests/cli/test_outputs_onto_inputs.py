"""An output never replaces an input, two outputs are never one file, and any legal output
name works (issue 20, cases 9-12; docs/reliability.md "Outputs")."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from clirun import run_cli

from gpuprof.util.atomic import write_text_atomic

ROOT = Path(__file__).resolve().parents[2]
HEALTHY = ROOT / "sample_traces" / "healthy" / "rank0.pt.trace.json.gz"
STRAGGLER = ROOT / "sample_traces" / "straggler"


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    dest = tmp_path / "rank0.json"
    import gzip

    dest.write_bytes(gzip.decompress(HEALTHY.read_bytes()))
    return dest


def test_analyze_refuses_to_write_its_report_onto_the_input_trace(trace: Path, tmp_path: Path) -> None:
    before = trace.read_bytes()
    r = run_cli("analyze", str(trace), "-o", str(trace), "--format", "json")
    assert r.code == 2 and r.stderr_lines == [f"gpuprof: {trace}: -o would overwrite an input; choose another file"]
    assert trace.read_bytes() == before
    link = tmp_path / "link.json"
    link.symlink_to(trace)  # the same file by another name
    r = run_cli("analyze", str(trace), "-o", str(link), "--format", "json")
    assert r.code == 2 and trace.read_bytes() == before


def test_analyze_refuses_a_trace_of_an_input_folder_but_writes_a_new_file_there(tmp_path: Path) -> None:
    job = tmp_path / "job"
    shutil.copytree(STRAGGLER, job)
    victim = job / "rank1.pt.trace.json.gz"
    before = victim.read_bytes()
    r = run_cli("analyze", str(job), "-o", str(victim), "--format", "json")
    assert r.code == 2 and "would overwrite a file of an input" in r.stderr and victim.read_bytes() == before
    r = run_cli("analyze", str(job), "-o", str(job / "report.md"))
    assert r.code == 0 and (job / "report.md").read_text().startswith("#")


def test_check_refuses_to_write_junit_onto_the_baseline(tmp_path: Path) -> None:
    base = tmp_path / "b.json"
    assert run_cli("analyze", str(STRAGGLER), "-o", str(base)).code == 0
    before = base.read_bytes()
    r = run_cli("check", str(STRAGGLER), "--no-config", "--baseline", str(base), "--junit", str(base))
    assert r.code == 2 and r.stderr_lines == [
        f"gpuprof: {base}: --junit would overwrite the baseline report; choose another file"
    ]
    assert base.read_bytes() == before
    json.loads(before)


def test_check_refuses_two_outputs_onto_one_file(tmp_path: Path) -> None:
    out = tmp_path / "x.json"
    r = run_cli("check", str(STRAGGLER), "--no-config", "--min-compute-pct", "1", "--save-report", str(out), "--junit", str(out))
    assert r.code == 2 and r.stderr_lines == [f"gpuprof: {out}: --save-report and --junit name the same file; give each its own"]
    assert not out.exists()


def test_diff_refuses_to_write_onto_its_base(tmp_path: Path) -> None:
    base = tmp_path / "b.json"
    assert run_cli("analyze", str(STRAGGLER), "-o", str(base)).code == 0
    before = base.read_bytes()
    r = run_cli("diff", str(base), str(STRAGGLER), "-o", str(base))
    assert r.code == 2 and "-o would overwrite BASE" in r.stderr and base.read_bytes() == before


@pytest.mark.parametrize("length", [247, 250, 252, 255])
def test_any_legal_output_name_is_written(tmp_path: Path, length: int) -> None:
    # The temporary file beside it is cut to fit NAME_MAX (it was 10 bytes longer than the name).
    name = "r" * (length - len(".md")) + ".md"
    r = run_cli("analyze", str(STRAGGLER), "-o", str(tmp_path / name))
    assert r.code == 0, r.stderr
    assert [p.name for p in tmp_path.iterdir()] == [name]
    wide = "é" * ((length - 3) // 2) + ".md"  # two bytes a character: NAME_MAX counts bytes
    write_text_atomic(tmp_path / wide, "x")
    assert (tmp_path / wide).read_text() == "x"
