"""Where ``-o`` points decides how it is written: links followed, devices and FIFOs written
into, regular files replaced whole keeping their mode, ``-`` is stdout; a full disk is one
line and exit 2 with the old file kept.

Special files are made in a temporary folder (``mknod``, ``mkfifo``), never under /dev.
Device nodes and a small tmpfs need root; those tests skip with the reason otherwise.
"""

from __future__ import annotations

import errno
import io
import os
import shutil
import stat
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from clirun import run_cli

from gpuprof.errors import GpuprofError
from gpuprof.util import atomic
from gpuprof.util.atomic import write_atomic, write_text_atomic

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "healthy"
NULL = os.makedev(1, 3)  # Linux's numbers for the null and full devices
FULL = os.makedev(1, 7)


def char_device(path: Path, dev: int) -> Path:
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, dev)
    except (PermissionError, AttributeError, OSError) as exc:
        pytest.skip(f"cannot make a device node here ({exc}); needs root on Linux")
    return path


def is_char_device(path: Path, dev: int) -> bool:
    st = path.lstat()
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == dev


def test_a_symlink_is_written_through_and_stays_a_link(tmp_path: Path) -> None:
    target = tmp_path / "real.txt"
    target.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(target.name)  # relative, as users make them
    write_text_atomic(link, "new")
    assert link.is_symlink() and os.readlink(link) == "real.txt"
    assert target.read_text() == "new"


def test_a_dangling_symlink_creates_its_target(tmp_path: Path) -> None:
    link = tmp_path / "link.txt"
    link.symlink_to(tmp_path / "later.txt")
    write_text_atomic(link, "new")
    assert link.is_symlink() and (tmp_path / "later.txt").read_text() == "new"


def test_a_regular_file_keeps_its_mode(tmp_path: Path) -> None:
    dest = tmp_path / "private.json"
    dest.write_text("old")
    dest.chmod(0o600)
    write_text_atomic(dest, "new")
    assert dest.read_text() == "new"
    assert stat.S_IMODE(dest.stat().st_mode) == 0o600


def test_a_new_path_is_created(tmp_path: Path) -> None:
    write_atomic(tmp_path / "r.json.gz", [b"{}"])
    assert (tmp_path / "r.json.gz").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["r.json.gz"]  # no temporary left


def test_a_fifo_is_written_into_and_stays_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    write_text_atomic(fifo, "through the pipe")
    reader.join(timeout=10)
    assert got == [b"through the pipe"]
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


def test_a_character_device_is_written_into_never_replaced(tmp_path: Path) -> None:
    null = char_device(tmp_path / "null", NULL)
    write_text_atomic(null, "discarded")
    assert is_char_device(null, NULL)
    link = tmp_path / "stdout"  # like /dev/stdout: a link to a device
    link.symlink_to(null)
    write_text_atomic(link, "discarded")
    assert link.is_symlink() and is_char_device(null, NULL)


def test_analyze_onto_a_device_node_needs_no_format_and_keeps_the_node(tmp_path: Path) -> None:
    null = char_device(tmp_path / "null", NULL)
    result = run_cli("analyze", str(SAMPLE), "-o", str(null))
    assert result.code == 0, result.stderr
    assert is_char_device(null, NULL)


def test_a_full_device_is_one_line_and_the_node_stays(tmp_path: Path) -> None:
    full = char_device(tmp_path / "full", FULL)
    with pytest.raises(GpuprofError, match="No space left on device") as err:
        write_text_atomic(full, "x" * 100_000)
    assert err.value.path == str(full)
    result = run_cli("analyze", str(SAMPLE), "-o", str(full), "--format", "json")
    assert result.traceback is None, result.traceback
    assert result.code == 2 and result.stderr_lines == [f"gpuprof: {full}: cannot write: No space left on device"]
    assert is_char_device(full, FULL)


def test_block_devices_and_sockets_are_refused(tmp_path: Path) -> None:
    import socket

    sock_path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        with pytest.raises(GpuprofError, match="is a socket; refusing"):
            write_text_atomic(sock_path, "x")
    assert stat.S_ISSOCK(sock_path.lstat().st_mode)
    block = tmp_path / "blk"
    try:
        os.mknod(block, stat.S_IFBLK | 0o600, os.makedev(7, 200))
    except OSError as exc:
        pytest.skip(f"cannot make a device node here ({exc}); needs root on Linux")
    with pytest.raises(GpuprofError, match="is a block device; refusing"):
        write_text_atomic(block, "x")
    assert stat.S_ISBLK(block.lstat().st_mode)


def test_dash_is_stdout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = run_cli("analyze", str(SAMPLE), "-o", "-", "--format", "json")
    assert result.code == 0, result.stderr
    assert result.stdout.lstrip().startswith("{") and '"gpuprof.report/1"' in result.stdout
    assert "written" not in result.stderr
    assert list(tmp_path.iterdir()) == []  # no file named "-"


def test_dash_is_stdout_for_write_atomic_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)

    class Out(io.StringIO):
        buffer = io.BytesIO()

    monkeypatch.setattr("sys.stdout", Out())
    write_atomic("-", [b"a", b"b"])
    assert Out.buffer.getvalue() == b"ab"
    assert list(tmp_path.iterdir()) == []


def test_annotate_to_stdout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    trace = next(SAMPLE.glob("rank*.json.gz"))
    result = run_cli("annotate", str(trace), "-o", "-")
    assert result.code == 0, result.stderr
    assert '"gpuprof: lost time (rank 0)"' in result.stdout
    assert list(tmp_path.iterdir()) == []


def test_a_write_that_fails_midway_is_one_error_naming_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without root (no tmpfs, no device node): the disk fills while writing."""
    dest = tmp_path / "report.json"
    dest.write_text("old")
    real_fdopen = os.fdopen

    class FullDisk(io.BufferedWriter):
        def write(self, data: object) -> int:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def fdopen(fd: int, mode: str = "r", *args: object, **kwargs: object) -> io.BufferedWriter:
        return FullDisk(real_fdopen(fd, "wb", buffering=0))  # type: ignore[arg-type]

    monkeypatch.setattr(atomic.os, "fdopen", fdopen)
    with pytest.raises(GpuprofError, match="cannot write: No space left on device"):
        write_text_atomic(dest, "new")
    assert dest.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


# --- a real full disk: a small tmpfs (root only) -----------------------------------------


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs holding ``old.json`` (and friends) and filled to the last byte."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], check=False, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({proc.stderr.strip()}); needs root")
    try:
        for name in ("old.json", "old.xml", "old.trace.json"):
            (mnt / name).write_text("old")
        with open(mnt / "filler", "wb", buffering=0) as fh:
            try:
                while True:
                    fh.write(b"\0" * 4096)
            except OSError:
                pass
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def _one_line_and_kept(result: object, path: Path) -> None:
    from clirun import CliResult

    assert isinstance(result, CliResult)
    assert result.traceback is None, result.traceback
    assert result.code == 2
    assert result.stderr_lines[-1] == f"gpuprof: {path}: cannot write: No space left on device", result.stderr
    assert path.read_text() == "old"
    assert sorted(p.name for p in path.parent.iterdir() if p.name.startswith(".")) == []  # no temporary left


def test_disk_full_on_analyze_output(full_disk: Path) -> None:
    out = full_disk / "old.json"
    _one_line_and_kept(run_cli("analyze", str(SAMPLE), "-o", str(out)), out)


def test_disk_full_on_check_junit(full_disk: Path) -> None:
    out = full_disk / "old.xml"
    result = run_cli("check", str(SAMPLE), "--no-config", "--min-compute-pct", "1", "--junit", str(out))
    _one_line_and_kept(result, out)


def test_disk_full_on_annotate_output(full_disk: Path) -> None:
    out = full_disk / "old.trace.json"
    trace = next(SAMPLE.glob("rank*.json.gz"))
    _one_line_and_kept(run_cli("annotate", str(trace), "-o", str(out)), out)
