"""Files written for the user: whole or not at all, readable by others, never onto a folder."""

from __future__ import annotations

import gzip
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gpuprof.errors import GpuprofError
from gpuprof.util.atomic import write_atomic, write_text_atomic


def test_written_file_gets_umask_permissions_not_0600(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        write_text_atomic(tmp_path / "r.json", "{}")
    finally:
        os.umask(old)
    mode = stat.S_IMODE((tmp_path / "r.json").stat().st_mode)
    assert mode == 0o644


def test_a_folder_as_destination_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(GpuprofError, match="is a folder"):
        write_text_atomic(tmp_path, "x")


def test_failure_midway_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    dest = tmp_path / "out.json"
    dest.write_text("old")

    def pieces():  # type: ignore[no-untyped-def]
        yield b"new"
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        write_atomic(dest, pieces())
    assert dest.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_gz_by_extension(tmp_path: Path) -> None:
    write_atomic(tmp_path / "t.json.gz", [b'{"a": 1}'])
    assert gzip.decompress((tmp_path / "t.json.gz").read_bytes()) == b'{"a": 1}'


def test_analyze_onto_a_folder_exits_2_with_one_line(tmp_path: Path) -> None:
    sample = Path(__file__).resolve().parents[2] / "sample_traces" / "healthy"
    proc = subprocess.run(
        [sys.executable, "-m", "gpuprof", "analyze", str(sample), "-o", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "is a folder" in proc.stderr
    assert "Traceback" not in proc.stderr
