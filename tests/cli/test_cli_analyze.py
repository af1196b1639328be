"""The analyze command as a user runs it: formats, saved reports, clean stdout."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "healthy"


def gpuprof(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuprof", *args], capture_output=True, text=True)


def test_json_on_stdout_is_only_the_report() -> None:
    proc = gpuprof("analyze", str(SAMPLE), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "gpuprof.report/1"


def test_unknown_output_extension_asks_for_a_format(tmp_path: Path) -> None:
    out = tmp_path / "report.xyz"
    proc = gpuprof("analyze", str(SAMPLE), "-o", str(out))
    assert proc.returncode == 2
    assert "--format" in proc.stderr and "report.xyz" in proc.stderr
    assert not out.exists()
    proc = gpuprof("analyze", str(SAMPLE), "-o", str(out), "--format", "markdown")
    assert proc.returncode == 0
    assert out.read_text().startswith("### gpuprof")


def test_saved_report_renders_again_and_refuses_trace_options(tmp_path: Path) -> None:
    saved = tmp_path / "r.json"
    assert gpuprof("analyze", str(SAMPLE), "-o", str(saved)).returncode == 0
    html = tmp_path / "r.html"
    proc = gpuprof("analyze", str(saved), "-o", str(html))
    assert proc.returncode == 0, proc.stderr
    assert "<html" in html.read_text().lower()
    proc = gpuprof("analyze", str(saved), "--steps", "1:2")
    assert proc.returncode == 2
    assert "saved report" in proc.stderr
