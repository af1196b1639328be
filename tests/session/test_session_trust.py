"""A session folder is untrusted input: gpuprof reads only files inside it (issue 33, item 4).

A hook record naming ``/etc/passwd``, a symlinked ``traces/`` or ``hooks/``, ``samples.jsonl``
as a link to ``/dev/zero``: none of them may make ``gpuprof analyze SESSION`` open a file
outside the folder (gpuprof/session/trust.py).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from clirun import run_cli

from gpuprof.session import SESSION_SCHEMA, read_session
from gpuprof.session.layout import HOOKS_DIR, META_FILE, SAMPLES_FILE, TRACES_DIR

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
TRACE = SAMPLES / "healthy" / "rank0.pt.trace.json.gz"

pytestmark = pytest.mark.skipif(os.name != "posix", reason="symbolic links and FIFOs")


def _session(root: Path, hooks: list[dict[str, Any]] | None = None, own_trace: bool = True) -> Path:
    root.mkdir(parents=True)
    meta = {"schema": SESSION_SCHEMA, "status": "finished", "command": ["python", "x.py"], "gpus": [],
            "hooks_enabled": True}
    (root / META_FILE).write_text(json.dumps(meta))
    (root / TRACES_DIR).mkdir()
    if own_trace:
        shutil.copy(TRACE, root / TRACES_DIR / "rank0.pt.trace.json.gz")
    if hooks is not None:
        (root / HOOKS_DIR).mkdir()
        (root / HOOKS_DIR / "rank1-7.jsonl").write_text("".join(json.dumps(r) + "\n" for r in hooks))
    return root


def _job_trace(path: str, pid: int = 7) -> list[dict[str, Any]]:
    return [{"time_unix_s": 1.0, "kind": "start", "rank": 1, "pid": pid},
            {"time_unix_s": 2.0, "kind": "job_trace", "rank": 1, "pid": pid, "path": path}]


@pytest.mark.parametrize("kind", ["absolute", "relative"])
def test_a_hook_record_naming_a_file_outside_the_session_is_never_opened(tmp_path: Path, kind: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    outside = tmp_path / "elsewhere" / "rank1.pt.trace.json.gz"
    outside.parent.mkdir()
    shutil.copy(SAMPLES / "dp-exposed" / "rank1.pt.trace.json.gz", outside)
    monkeypatch.chdir(tmp_path)
    named = str(outside) if kind == "absolute" else os.path.relpath(outside, tmp_path)
    s = _session(tmp_path / "s", hooks=_job_trace(named))
    assert [p.name for p in read_session(s).trace_paths] == ["rank0.pt.trace.json.gz"]
    r = run_cli("analyze", str(s), "--format", "json")
    assert r.code == 0, r.stderr
    report = json.loads(r.stdout)
    assert [rank["rank"] for rank in report["ranks"]] == [0]  # was [0, 1]: the outside file read as a rank
    assert any("outside the session folder: not read" in w for w in report["warnings"])


def test_etc_passwd_named_by_a_hook_record_is_not_opened(tmp_path: Path) -> None:
    s = _session(tmp_path / "s", hooks=_job_trace("/etc/passwd"), own_trace=True)
    r = run_cli("analyze", str(s), "--format", "json")
    assert r.code == 0, r.stderr
    report = json.loads(r.stdout)
    assert [rank["rank"] for rank in report["ranks"]] == [0]
    # was: opened, read as a trace and named on stderr as one that cannot be read
    assert "skipped /etc/passwd" not in r.stderr and not any("skipped /etc/passwd" in w for w in report["warnings"])


@pytest.mark.parametrize("folder", [TRACES_DIR, HOOKS_DIR])
def test_a_symlinked_traces_or_hooks_folder_is_not_read(tmp_path: Path, folder: str) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(TRACE, elsewhere / "rank0.pt.trace.json.gz")
    (elsewhere / "rank0-1.jsonl").write_text(json.dumps({"time_unix_s": 1.0, "kind": "start", "pid": 1}) + "\n")
    s = _session(tmp_path / "s", own_trace=folder != TRACES_DIR)
    if folder == TRACES_DIR:
        (s / TRACES_DIR).rmdir()
    (s / folder).symlink_to(elsewhere, target_is_directory=True)
    session = read_session(s)
    if folder == TRACES_DIR:
        assert session.trace_paths == ()
    else:
        assert session.hook_events is None
    assert f"{folder}/ is a symbolic link and was not read (a session is read only from inside itself)" \
        in session.warnings


def test_a_trace_that_is_a_link_out_of_the_session_is_not_read(tmp_path: Path) -> None:
    s = _session(tmp_path / "s")
    (s / TRACES_DIR / "rank1.pt.trace.json.gz").symlink_to(SAMPLES / "dp-exposed" / "rank1.pt.trace.json.gz")
    r = run_cli("analyze", str(s), "--format", "json")
    assert r.code == 0, r.stderr
    report = json.loads(r.stdout)
    assert [rank["rank"] for rank in report["ranks"]] == [0]
    assert "traces/rank1.pt.trace.json.gz not read: a symbolic link leading out of the session folder" \
        in report["warnings"]


def test_session_files_that_lead_out_or_are_not_regular_are_not_read(tmp_path: Path) -> None:
    s = _session(tmp_path / "s")
    (s / SAMPLES_FILE).symlink_to("/dev/zero")  # was: read without end
    os.mkfifo(s / "events.jsonl")  # was: waited for a writer forever
    session = read_session(s)
    assert session.samples is None
    assert "samples.jsonl not read: a symbolic link leading out of the session folder" in session.warnings
    assert "events.jsonl not read: not a regular file" in session.warnings


def test_session_json_that_leads_out_is_refused_with_one_line(tmp_path: Path) -> None:
    s = tmp_path / "s"
    s.mkdir()
    real = tmp_path / "meta.json"
    real.write_text(json.dumps({"schema": SESSION_SCHEMA, "status": "finished", "command": ["x"], "gpus": [],
                                "hooks_enabled": True}))
    (s / META_FILE).symlink_to(real)
    r = run_cli("analyze", str(s))
    assert r.code == 2 and r.traceback is None
    assert r.stderr_lines == [f"gpuprof: {s / META_FILE}: session metadata not read: a symbolic link leading out "
                              "of the session folder"]


def test_a_trace_inside_the_session_reached_by_a_link_inside_it_is_read(tmp_path: Path) -> None:
    s = _session(tmp_path / "s", own_trace=False)
    (s / "keep").mkdir()
    shutil.copy(TRACE, s / "keep" / "r.json.gz")
    (s / TRACES_DIR / "rank0.pt.trace.json.gz").symlink_to(s / "keep" / "r.json.gz")
    assert [p.name for p in read_session(s).trace_paths] == ["rank0.pt.trace.json.gz"]
