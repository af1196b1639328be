"""One file of a folder that cannot be read: the other ranks are analyzed, the file named
(exit 0 with a warning), or exit 2 with --strict (issue 20, case 22)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest
from clirun import run_cli

STRAGGLER = Path(__file__).resolve().parents[2] / "sample_traces" / "straggler"


@pytest.fixture
def job(tmp_path: Path) -> Path:
    folder = tmp_path / "job"
    shutil.copytree(STRAGGLER, folder)
    return folder


def _damage(path: Path) -> None:
    path.write_bytes(gzip.compress(b"this is not a trace"))


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_damaged_rank_is_skipped_and_named(job: Path, jobs: str) -> None:
    bad = job / "rank2.pt.trace.json.gz"
    _damage(bad)
    r = run_cli("analyze", str(job), "--format", "json", "--jobs", jobs)
    assert r.code == 0, r.stderr
    report = json.loads(r.stdout)
    assert [x["rank"] for x in report["ranks"]] == [0, 1, 3]
    line = f"skipped {bad}, which cannot be read: not JSON (a trace file starts with '{{' or '['); the other traces are analyzed (--strict makes this an error)"
    assert line in report["warnings"]
    assert r.stderr_lines == [f"gpuprof: warning: {line}"]  # also said where a JSON report on stdout would not


def test_strict_makes_it_exit_2_with_one_line(job: Path) -> None:
    bad = job / "rank2.pt.trace.json.gz"
    _damage(bad)
    for argv in (("analyze", str(job), "--strict"), ("check", str(job), "--no-config", "--min-compute-pct", "1", "--strict")):
        r = run_cli(*argv)
        assert r.code == 2 and r.stderr_lines == [f"gpuprof: {bad}: not JSON (a trace file starts with '{{' or '[')"]


def test_check_gates_the_other_ranks_and_says_which_was_left_out(job: Path) -> None:
    _damage(job / "rank0.pt.trace.json.gz")
    r = run_cli("check", str(job), "--no-config", "--min-compute-pct", "1")
    assert r.code == 0 and "rank0.pt.trace.json.gz, which cannot be read" in r.stderr


def test_a_file_named_on_the_command_line_still_fails(job: Path) -> None:
    bad = job / "rank2.pt.trace.json.gz"
    _damage(bad)
    r = run_cli("analyze", str(job / "rank0.pt.trace.json.gz"), str(bad))
    assert r.code == 2 and len(r.stderr_lines) == 1


def test_when_no_file_of_the_folder_can_be_read_the_first_error_is_the_answer(job: Path) -> None:
    for f in sorted(job.glob("rank*.json.gz")):
        _damage(f)
    r = run_cli("analyze", str(job))
    assert r.code == 2 and r.stderr_lines == [f"gpuprof: {job / 'rank0.pt.trace.json.gz'}: not JSON (a trace file starts with '{{' or '[')"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their permissions")
def test_a_file_without_read_permission_is_skipped(job: Path) -> None:
    bad = job / "rank1.pt.trace.json.gz"
    bad.chmod(0)
    try:
        r = run_cli("analyze", str(job), "--format", "json")
    finally:
        bad.chmod(0o644)
    assert r.code == 0 and f"skipped {bad}, which cannot be read: cannot read: Permission denied" in r.stderr
