"""``gpuprof analyze`` and ``check`` name on stderr the files of a folder they left out: the
analysis' notices of code SKIPPED_UNREADABLE, not the report's words read back."""

from __future__ import annotations

import gzip
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from clirun import run_cli
from repo_paths import SAMPLES

import gpuprof.pipeline
from gpuprof.model import notice


@pytest.fixture
def bad(tmp_path: Path) -> Path:
    folder = tmp_path / "job"
    shutil.copytree(SAMPLES / "straggler", folder)
    path = folder / "rank2.pt.trace.json.gz"
    path.write_bytes(gzip.compress(b"this is not a trace"))
    return path


def test_a_reworded_skip_is_still_said(bad: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpuprof.pipeline, "unreadable_line", lambda path, exc: f"LEFT OUT {path} ({exc.message})")
    for argv in (("analyze", str(bad.parent), "-f", "json"), ("check", str(bad.parent), "--no-config", "--min-compute-pct", "1")):
        r = run_cli(*argv)
        assert r.code == 0, r.stderr
        assert f"gpuprof: warning: LEFT OUT {bad} (not JSON" in r.stderr, argv


def test_a_skip_under_another_code_is_not_said(bad: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    original = gpuprof.pipeline.unreadable_notice

    def other_code(path: Any, exc: Any) -> Any:
        return replace(original(path, exc), code=notice.TEXT)

    monkeypatch.setattr(gpuprof.pipeline, "unreadable_notice", other_code)
    r = run_cli("analyze", str(bad.parent), "-f", "json")
    assert r.code == 0 and "which cannot be read" in r.stdout  # still in the report's warnings
    assert "warning:" not in r.stderr


def test_the_skipped_notices_name_their_files(bad: Path) -> None:
    analysis = gpuprof.pipeline.run_analysis([bad.parent])
    assert [n.path for n in analysis.skipped] == [str(bad)]
    assert analysis.report.warnings == notice.words(analysis.notices)
