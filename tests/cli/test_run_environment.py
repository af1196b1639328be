"""``gpuprof run`` and ``check`` in an unusual process environment (issue 33, item 5).

A current folder that was deleted (``sh`` runs fine there), a locale that is not UTF-8 with
a non-ASCII session folder: the job runs and its exit code is gpuprof's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="a deleted current folder: Linux")

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "sample_traces" / "healthy"


def _in_deleted_folder(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    gone = tmp_path / "gone"
    gone.mkdir()

    def setup() -> None:
        os.chdir(gone)
        os.rmdir(gone)

    return subprocess.run([sys.executable, "-m", "gpuprof", *args], preexec_fn=setup, capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)))


def test_run_from_a_deleted_folder_runs_the_job(tmp_path: Path) -> None:
    p = _in_deleted_folder(tmp_path, "run", "--no-live", "--session-dir", str(tmp_path / "s"), "--", "sh", "-c",
                           "exit 7")
    assert p.returncode == 7, p.stderr  # was 1: os.getcwd() traceback before the job started
    assert "Traceback" not in p.stderr


def test_run_from_a_deleted_folder_with_the_default_session_folder(tmp_path: Path) -> None:
    p = _in_deleted_folder(tmp_path, "run", "--no-live", "--", "sh", "-c", "exit 7")
    assert p.returncode == 7 and "Traceback" not in p.stderr
    assert "the command runs unrecorded" in p.stderr


def test_check_from_a_deleted_folder(tmp_path: Path) -> None:
    p = _in_deleted_folder(tmp_path, "check", str(TRACE), "--min-compute-pct", "1")
    assert p.returncode == 0, p.stderr  # was 1: Path.cwd() traceback looking for pyproject.toml
    assert "Traceback" not in p.stderr


def test_a_non_utf8_locale_and_a_non_ascii_session_folder_keep_the_jobs_exit_code(tmp_path: Path) -> None:
    env = dict(os.environ, LC_ALL="POSIX", PYTHONCOERCECLOCALE="0", PYTHONUTF8="0", PYTHONPATH=str(ROOT))
    out = tmp_path / "sé-ssion"
    p = subprocess.run([sys.executable, "-m", "gpuprof", "run", "--no-live", "--session-dir", str(out), "--",
                        "sh", "-c", "exit 7"], capture_output=True, timeout=120, env=env)
    assert p.returncode == 7, p.stderr.decode(errors="replace")  # was 1: UnicodeEncodeError saving the report
    assert b"Traceback" not in p.stderr
    assert (out / "report.json").is_file() and (out / "report.html").is_file()
