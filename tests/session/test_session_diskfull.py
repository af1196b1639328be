"""The session writer on a full disk: never raises, keeps what it can, says what it lost.

A full disk is injected at the writer's one write seam (``writer._write``) and at the
metadata replacement; tests/record/test_runner_diskfull.py does the same on a real small tmpfs.
"""

from __future__ import annotations

import errno
import json
import threading
from pathlib import Path
from typing import Callable

import pytest

from gpuprof.errors import GpuprofError
from gpuprof.session import SESSION_SCHEMA, read_session
from gpuprof.session import writer as writer_mod
from gpuprof.session.layout import META_FILE, RESERVE_FILE, SAMPLES_FILE
from gpuprof.session.writer import JsonlAppender, SessionDirTaken, SessionWriter, claim_session_dir


class Disk:
    """A disk with ``free`` bytes left; ``None`` = unlimited. Partial writes like a real one."""

    def __init__(self, free: int | None) -> None:
        self.free = free

    def write(self, real: Callable[[int, bytes], int]) -> Callable[[int, bytes], int]:
        def fake(fd: int, data: bytes) -> int:
            if self.free is None:
                return real(fd, data)
            if self.free <= 0:
                raise OSError(errno.ENOSPC, "No space left on device")
            n = real(fd, data[: self.free])
            self.free -= n
            return n

        return fake


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Disk:
    d = Disk(None)
    monkeypatch.setattr(writer_mod, "_write", d.write(writer_mod._write))
    return d


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_full_disk_keeps_records_and_a_freed_disk_gets_them_all_intact(tmp_path: Path, disk: Disk) -> None:
    f = JsonlAppender(tmp_path / "x.jsonl", flush_interval_s=0.0)
    f.append({"i": 0})
    disk.free = 4  # the next line is cut after 4 bytes
    for i in range(1, 5):
        f.append({"i": i})  # no exception out of append
    assert f.error == "No space left on device" and f.failing
    assert (tmp_path / "x.jsonl").read_text().count("\n") == 1  # a torn line after the first
    disk.free = None  # space again (a checkpoint was deleted)
    assert f.flush()
    f.close()
    assert [r["i"] for r in _lines(tmp_path / "x.jsonl")] == [0, 1, 2, 3, 4]  # the torn line was completed
    assert f.lines_lost == 0 and not f.failing


def test_records_the_disk_never_takes_are_counted_at_close(tmp_path: Path, disk: Disk) -> None:
    f = JsonlAppender(tmp_path / "x.jsonl", flush_interval_s=0.0, max_backlog_bytes=100)
    disk.free = 0
    for i in range(20):
        f.append({"i": i})
    f.close()
    assert f.lines_lost == 20  # some dropped for the bound, the rest never written
    assert (tmp_path / "x.jsonl").read_text() == ""


def test_writer_problems_name_the_file_and_error(tmp_path: Path, disk: Disk,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    w = SessionWriter(tmp_path / "s", flush_interval_s=0.0)
    assert w.write_meta({"schema": SESSION_SCHEMA, "status": "running"})
    disk.free = 0

    def no_space(path: Path, data: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writer_mod, "write_json_atomic", no_space)
    w.samples.append({"time_unix_s": 1.0, "gpu": 0})
    w.event("warning", "x")
    assert w.write_meta({"schema": SESSION_SCHEMA, "status": "finished"}) is False
    w.close()
    described = [p.describe() for p in w.problems()]
    root = tmp_path / "s"
    assert described == [
        f"{root / META_FILE}: No space left on device",
        f"{root / SAMPLES_FILE}: No space left on device (1 record lost)",
        f"{root / 'events.jsonl'}: No space left on device (1 record lost)",
    ]
    assert json.loads((root / META_FILE).read_text())["status"] == "running"  # the old file is intact


def test_a_later_metadata_write_repairs_an_earlier_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = SessionWriter(tmp_path)
    real = writer_mod.write_json_atomic
    calls = []

    def flaky(path: Path, data: object) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, data)  # type: ignore[arg-type]

    monkeypatch.setattr(writer_mod, "write_json_atomic", flaky)
    assert not w.write_meta({"schema": SESSION_SCHEMA, "status": "running"})
    assert w.write_meta({"schema": SESSION_SCHEMA, "status": "finished"})
    w.close()
    assert w.problems() == []
    assert read_session(tmp_path).meta["status"] == "finished"


def test_reserve_holds_space_until_released(tmp_path: Path) -> None:
    w = SessionWriter(tmp_path / "s", reserve_bytes=64 * 1024)
    reserve = tmp_path / "s" / RESERVE_FILE
    assert reserve.stat().st_size == 64 * 1024
    w.release_reserve()
    assert not reserve.exists()
    w.close()
    assert not [p for p in (tmp_path / "s").iterdir() if p.name.startswith(".")]


def test_claim_is_exclusive_among_racing_runs(tmp_path: Path) -> None:
    for trial in range(10):
        target = tmp_path / f"t{trial}" / "sess"
        if trial % 2:
            target.mkdir(parents=True)  # an existing empty folder, as a job script may make
        barrier = threading.Barrier(8)
        won: list[int] = []
        refused: list[str] = []

        def claim(i: int) -> None:
            barrier.wait()
            try:
                claim_session_dir(target)
                won.append(i)
            except SessionDirTaken as exc:
                refused.append(str(exc))

        threads = [threading.Thread(target=claim, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(won) == 1 and len(refused) == 7, (won, refused)
        assert all(str(target) in r for r in refused)


def test_claim_refuses_other_sessions_files_and_non_folders(tmp_path: Path) -> None:
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / META_FILE).write_text("{}")
    with pytest.raises(SessionDirTaken, match="another gpuprof run"):
        claim_session_dir(tmp_path / "used")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    with pytest.raises(SessionDirTaken, match="not empty"):
        claim_session_dir(tmp_path / "full")
    assert (tmp_path / "full" / "notes.txt").read_text() == "mine"
    (tmp_path / "file").write_text("x")
    with pytest.raises(GpuprofError, match="not a folder"):
        claim_session_dir(tmp_path / "file")
    claim_session_dir(tmp_path / "new" / "deeper")
    assert (tmp_path / "new" / "deeper" / META_FILE).exists()


def test_claim_passes_a_full_disk_up_as_oserror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # No space is the disk's problem, not the user's: the caller runs the job unrecorded.
    real_open = writer_mod.os.open

    def no_space(path: object, flags: int, mode: int = 0o777) -> int:
        if str(path).endswith(META_FILE):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, flags, mode)  # type: ignore[arg-type]

    monkeypatch.setattr(writer_mod.os, "open", no_space)
    with pytest.raises(OSError) as exc:
        claim_session_dir(tmp_path / "s")
    assert not isinstance(exc.value, GpuprofError) and exc.value.errno == errno.ENOSPC
