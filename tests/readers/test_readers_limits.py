"""Untrusted input: times that cannot be times, deep nesting, odd ranks, bombs and limits.

Each case was reproduced first (issue 11): missing or non-numeric ``ts`` became 0, broken
durations were taken at face value, ``dur: "NaN"`` leaked a numpy warning, 100,000-deep
nesting in ``args`` and a rank of ``"²"`` ended in tracebacks, and whitespace or one huge
string in a small ``.json.gz`` took minutes and GBs.
"""

from __future__ import annotations

import gzip
import subprocess
import sys
import warnings
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuprof.errors import BadTraceError
from gpuprof.readers import ReadLimits, load_file, textstream
from gpuprof.readers.limits import InputLimitError
from gpuprof.readers.timecheck import MAX_EVENT_DURATION_US

Builder = Callable[..., dict[str, Any]]
WriteTrace = Callable[..., Path]
GPU, CPU = 0, 50


def _kernels(event: Builder, n: int = 20) -> list[dict[str, Any]]:
    return [event("kernel", f"k{i}", 1000.0 + 10 * i, 5, pid=GPU, tid=7, stream=7) for i in range(n)]


def _read(path: Path, **limits: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy RuntimeWarning may leak
        (t,) = load_file(path, limits=ReadLimits(**limits))
    return t


@pytest.mark.parametrize(
    ("change", "warning"),
    [
        ({"ts": None}, "3 events without a timestamp ('ts') were skipped"),
        ({"ts": "abc"}, "3 events whose timestamp ('ts') is not a time"),
        ({"ts": 2.0**60}, "3 events whose timestamp ('ts') is not a time"),
        ({"dur": None}, "3 events without a duration ('dur') were skipped"),
        ({"dur": -5}, "3 events with a negative duration were skipped"),
        ({"dur": 2**80}, "3 events whose duration is not a number or longer than 24 hours"),
        ({"dur": 1e308}, "3 events whose duration is not a number or longer than 24 hours"),
        ({"dur": 11.6 * 86400e6}, "3 events whose duration is not a number or longer than 24 hours"),
        ({"dur": "NaN"}, "3 events whose duration is not a number or longer than 24 hours"),
    ],
)
def test_events_whose_times_are_not_times_are_skipped_and_counted(
    write_trace: WriteTrace, kineto: Builder, event: Builder, change: dict[str, Any], warning: str
) -> None:
    evs = _kernels(event)
    for e in evs[5:8]:
        for k, v in change.items():
            if v is None:
                del e[k]
            else:
                e[k] = v
    t = _read(write_trace("rank0.json", kineto(evs)))
    assert len(t.device) == 17
    assert [w for w in t.warnings if "skipped" in w] == [w for w in t.warnings if w.startswith(warning)]
    assert any(w.startswith(warning) for w in t.warnings)
    assert t.device["start_us"].min() == 1000.0 and t.device["end_us"].max() == 1195.0


def test_durations_up_to_the_bound_are_kept(write_trace: WriteTrace, kineto: Builder, event: Builder) -> None:
    evs = _kernels(event) + [event("cpu_op", "long op", 1000.0, MAX_EVENT_DURATION_US, pid=CPU, tid=CPU)]
    t = _read(write_trace("rank0.json", kineto(evs)))
    assert len(t.host) == 1 and not any("skipped" in w for w in t.warnings)


def test_timeline_ops_without_times_are_skipped(write_trace: WriteTrace) -> None:
    ops = [
        {"name": "forward-compute", "ph": "X", "pid": 0, "tid": 1, "ts": 10.0 * i, "dur": 5, "args": {"step": 1}}
        for i in range(10)
    ]
    del ops[3]["ts"]
    ops[4]["dur"] = -1
    (t,) = load_file(write_trace("timeline.json", {"traceEvents": ops}))
    assert len(t.device) == 8
    assert "1 event without a timestamp ('ts') was skipped" in t.warnings
    assert "1 event with a negative duration was skipped" in t.warnings


def test_deep_nesting_inside_args_is_one_clear_error(write_trace: WriteTrace, kineto: Builder, event: Builder) -> None:
    text = gzip.compress(
        (
            '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "pid": 0, "tid": 7, '
            '"args": {"deep": ' + "[" * 100_000 + "]" * 100_000 + "}}]}"
        ).encode()
    )
    path = write_trace("deep.json.gz", text)
    with pytest.raises(BadTraceError, match="nested deeper") as info:
        load_file(path)
    assert info.value.path == str(path)


@pytest.mark.parametrize("rank", ["²", "9" * 5000, 2**40])
def test_a_rank_that_is_not_a_number_is_unknown_with_a_warning(
    write_trace: WriteTrace, kineto: Builder, event: Builder, rank: Any
) -> None:
    doc = kineto(_kernels(event))
    doc["distributedInfo"] = {"rank": rank, "world_size": 2}
    t = _read(write_trace("worker1.json", doc))
    assert t.rank == 1 and t.world_size == 2  # from the file name instead
    assert any(w.startswith("distributedInfo.rank ") and w.endswith("is not a rank number; ignored") for w in t.warnings)


def test_whitespace_only_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "blank.json.gz"
    path.write_bytes(gzip.compress(b" \n\t" * 300_000))
    monkeypatch.setattr(textstream, "BLOCK_BYTES", 4096)
    with pytest.raises(BadTraceError, match="only whitespace"):
        load_file(path)


def _gz_bomb(path: Path, head: bytes, fill: bytes, n_mb: int, tail: bytes) -> Path:
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    with path.open("wb") as fh:
        fh.write(c.compress(head))
        for _ in range(n_mb):
            fh.write(c.compress(fill * (1 << 20)))
        fh.write(c.compress(tail) + c.flush())
    return path


_KERNEL = b'{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "pid": 0, "tid": 7}'


def test_one_huge_string_is_refused_at_the_event_limit(tmp_path: Path) -> None:
    path = _gz_bomb(
        tmp_path / "bomb.json.gz", b'{"traceEvents": [' + _KERNEL[:-1] + b', "x": "', b"A", 12, b'"}]}'
    )
    assert path.stat().st_size < 100_000
    with pytest.raises(InputLimitError, match="GPUPROF_MAX_EVENT_MB=8") as info:
        load_file(path, limits=ReadLimits(max_event_bytes=4_000_000))
    assert info.value.path == str(path) and "4 MB" in info.value.message


def test_whitespace_inside_the_event_list_is_refused(tmp_path: Path) -> None:
    path = _gz_bomb(
        tmp_path / "ws.json.gz", b'{"traceEvents": [' + _KERNEL + b",\n", b" ", 12, _KERNEL.replace(b'"ts": 1', b'"ts": 5') + b"]}"
    )
    with pytest.raises(InputLimitError, match="without an event boundary"):
        load_file(path, limits=ReadLimits(max_event_bytes=4_000_000))
    # Under a larger limit the same file is a trace of two kernels.
    t = _read(path, max_event_bytes=20_000_000)
    assert len(t.device) == 2


def test_event_limit_is_raised_by_its_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPROF_MAX_EVENT_MB", "1024")
    assert ReadLimits().max_event_bytes == 1024 * 10**6
    monkeypatch.setenv("GPUPROF_MAX_EVENT_MB", "")
    assert ReadLimits().max_event_bytes == 256 * 10**6
    monkeypatch.setenv("GPUPROF_MAX_EVENT_MB", "nonsense")  # was silently the default (issue 33)
    with pytest.raises(BadTraceError, match="GPUPROF_MAX_EVENT_MB=nonsense: expected a number of MB"):
        ReadLimits()


@pytest.mark.parametrize("gz", [False, True])
def test_input_larger_than_max_input_gb_is_refused(write_trace: WriteTrace, kineto: Builder, event: Builder, gz: bool) -> None:
    path = write_trace("rank0.json.gz" if gz else "rank0.json", kineto(_kernels(event, 2000)), gz=gz)
    with pytest.raises(InputLimitError, match="--max-input-gb"):
        load_file(path, limits=ReadLimits(max_input_bytes=50_000))
    assert len(_read(path, max_input_bytes=10**9).device) == 2000


def test_cli_max_input_gb_is_one_line_and_exit_2(write_trace: WriteTrace, kineto: Builder, event: Builder) -> None:
    path = write_trace("rank0.json.gz", kineto(_kernels(event, 12_000)), gz=True)
    proc = subprocess.run(
        [sys.executable, "-m", "gpuprof", "analyze", str(path), "--max-input-gb", "0.001"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert str(path) in line and "--max-input-gb" in line and "0.001 GB" in line
