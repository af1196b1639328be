"""The windows' files in the session folder (gpuprof/session/windows.py), as gpuprof run
writes them, as the hooks read their requests, and as readers take them: untrusted input."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from gpuprof.errors import GpuprofError
from gpuprof.session.windows import (
    WindowRequest,
    read_demands,
    read_window_files,
    request_from_dict,
    running_with_windows,
    take_demand,
    window_dir,
    write_demand,
    write_request,
)

HOOKS = Path(__file__).resolve().parents[2] / "gpuprof" / "record" / "hooks"


def req(n: int, start: int = 100) -> WindowRequest:
    return WindowRequest(window=n, start_step=start, warmup=2, active=3, reason="every", detail="every 100 steps",
                         requested_unix_s=1.0, requested_at_step=start - 20)


@pytest.fixture()
def hook_windows():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(HOOKS))
    try:
        import gpuprof_hook_windows

        yield gpuprof_hook_windows
    finally:
        sys.path.remove(str(HOOKS))


def test_a_request_is_written_whole_and_read_back(tmp_path: Path) -> None:
    folder = write_request(tmp_path, req(1))
    assert folder == window_dir(tmp_path, 1) == tmp_path / "windows" / "0001"
    assert sorted(os.listdir(tmp_path / "windows")) == ["0001"]  # no temporary folder left
    [w] = read_window_files(tmp_path)
    assert w.request == req(1) and w.traces == () and w.problems == ()
    with pytest.raises(FileExistsError):
        write_request(tmp_path, req(1))


@pytest.mark.parametrize("doc", [None, [], {"window": 1}, {**req(1).to_dict(), "window": "1"},
                                 {**req(1).to_dict(), "reason": "whim"}, {**req(1).to_dict(), "active": 0},
                                 {**req(1).to_dict(), "start_step": True}, {**req(1).to_dict(), "detail": 5}])
def test_a_damaged_request_is_not_a_request(doc: object) -> None:
    assert request_from_dict(doc) is None


def test_readers_take_only_plain_files_inside_the_session(tmp_path: Path) -> None:
    write_request(tmp_path, req(1))
    traces = window_dir(tmp_path, 1) / "traces"
    traces.mkdir()
    (traces / "rank0.pt.trace.json.gz").write_bytes(b"x")
    (traces / ".77.tmp.pt.trace.json.gz").write_bytes(b"x")  # a process killed while exporting
    outside = tmp_path.parent / f"{tmp_path.name}-outside.json.gz"
    outside.write_bytes(b"secret")
    (traces / "rank1.pt.trace.json.gz").symlink_to(outside)
    (window_dir(tmp_path, 1) / "diagnosis.json").write_text("x" * (5 << 20))  # far too large to be ours
    elsewhere = tmp_path.parent / f"{tmp_path.name}-win"
    write_request(elsewhere, req(2))
    (tmp_path / "windows" / "0002").symlink_to(window_dir(elsewhere, 2))
    (tmp_path / "windows" / "notes").mkdir()
    bad = tmp_path / "windows" / "0003"
    bad.mkdir()
    (bad / "request.json").write_text(json.dumps({**req(4).to_dict()}))  # names another window
    found = read_window_files(tmp_path)
    assert [w.window for w in found] == [1, 3]
    one, three = found
    assert one.traces == ("windows/0001/traces/rank0.pt.trace.json.gz",)
    assert one.unfinished == ("windows/0001/traces/.77.tmp.pt.trace.json.gz",) and one.diagnosis is None
    assert three.request is None and three.problems == ("windows/0003/request.json names window 4",)


def test_demands_are_read_oldest_first_and_taken(tmp_path: Path) -> None:
    a = write_demand(tmp_path, now=20.0)
    b = write_demand(tmp_path, at_step=500, now=10.0)
    (tmp_path / "control" / "demand-junk.json").write_text("{not json")
    found = read_demands(tmp_path)
    assert [d.name for d in found] == ["demand-junk.json", b, a]  # a damaged one is a plain demand
    assert found[1].at_step == 500 and found[2].at_step is None
    take_demand(tmp_path, found[1])
    take_demand(tmp_path, found[1])  # already gone: fine
    assert [d.name for d in read_demands(tmp_path)] == ["demand-junk.json", a]


def test_trigger_needs_a_running_session_that_takes_windows(tmp_path: Path) -> None:
    meta = {"schema": "gpuprof.session/1", "status": "running", "windows": {"keep": 3}}
    (tmp_path / "session.json").write_text(json.dumps(meta))
    running_with_windows(tmp_path)
    for change, why in (({"status": "finished"}, "the run has ended"), ({"windows": None}, "takes no windows"),
                        ({"schema": "other"}, "not a gpuprof session")):
        (tmp_path / "session.json").write_text(json.dumps({**meta, **change}))
        with pytest.raises(GpuprofError, match=why):
            running_with_windows(tmp_path)


def test_the_hooks_see_a_new_request_at_their_next_poll(tmp_path: Path, hook_windows) -> None:  # type: ignore[no-untyped-def]
    r = hook_windows.WindowRequests(str(tmp_path))
    assert not r.poll(0.0) and r.next_start() is None  # no windows/ yet: one failed stat
    write_request(tmp_path, req(2, start=300))
    write_request(tmp_path, req(1, start=200))
    (tmp_path / "windows" / "0009").mkdir()  # a folder without a request (not gpuprof's doing)
    assert r.poll(1.0) and r.next_poll_s == 1.0 + hook_windows.POLL_S
    assert r.next_start() == 200 - 2 - 1  # the profiler starts after the step before the warm-up
    assert r.take() == (200, 1, 2, 3) and r.take() == (300, 2, 2, 3) and r.take() is None
    assert not r.poll(2.0)  # nothing new


def test_the_hooks_ignore_a_damaged_request(tmp_path: Path, hook_windows) -> None:  # type: ignore[no-untyped-def]
    folder = tmp_path / "windows" / "0001"
    folder.mkdir(parents=True)
    (folder / "request.json").write_text(json.dumps({**req(1).to_dict(), "active": -1}))
    r = hook_windows.WindowRequests(str(tmp_path))
    assert not r.poll(0.0) and r.pending == []
