"""Permissions of what gpuprof writes (issue 33, item 6).

``session.json`` and the hook logs hold the job's command line (a token passed as an
argument included): only their owner reads them, whatever the umask. Every other file gets
what the umask gives, and the umask is never read by setting it: another thread (a training
process's checkpoint writer, beside ``trace_handler``) would create files with the wrong
mode meanwhile.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gpuprof.util.atomic import write_text_atomic

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_session_json_is_readable_by_its_owner_only(tmp_path: Path, umask: int) -> None:
    out = tmp_path / "s"
    p = subprocess.run([sys.executable, "-m", "gpuprof", "run", "--no-report", "--no-live", "--out", str(out), "--",
                        "true", "--token=s3cret"], preexec_fn=lambda: os.umask(umask), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert _mode(out / "session.json") == 0o600  # was 0644 whatever the umask
    assert _mode(out / "events.jsonl") == 0o666 & ~umask
    assert _mode(out) == 0o777 & ~umask


def test_a_new_output_gets_its_mode_from_the_umask_without_the_umask_being_changed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_umask(mask: int) -> int:
        raise AssertionError("os.umask was called: another thread could create a file with mode 0666 meanwhile")

    old = os.umask(0o027)
    try:
        monkeypatch.setattr(os, "umask", no_umask)
        write_text_atomic(tmp_path / "r.txt", "x")
    finally:
        monkeypatch.undo()
        os.umask(old)
    assert _mode(tmp_path / "r.txt") == 0o640


def test_a_replaced_output_keeps_its_mode(tmp_path: Path) -> None:
    f = tmp_path / "r.txt"
    f.write_text("old")
    f.chmod(0o604)
    write_text_atomic(f, "new")
    assert _mode(f) == 0o604 and f.read_text() == "new"


def test_the_hook_log_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "gpuprof" / "record" / "hooks"))
    try:
        from gpuprof_hook_files import HookLog
    finally:
        sys.path.pop(0)
    old = os.umask(0o022)
    try:
        log = HookLog(lambda: str(tmp_path / "rank0-1.jsonl"))
        log.write('{"kind": "start", "argv": ["train.py", "--token=s3cret"]}\n')
        assert log.flush()
    finally:
        os.umask(old)
    assert _mode(tmp_path / "rank0-1.jsonl") == 0o600
