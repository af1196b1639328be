"""Reading a trace as a stream of blocks gives exactly what reading it whole gives.

Blocks are normally megabytes and pieces hundreds of KB; here both are shrunk to a few
hundred bytes so that small constructed traces are read in many blocks, with block ends and
cuts landing everywhere (inside strings, numbers, between events).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuprof.errors import BadTraceError
from gpuprof.model.timeline import RankTrace
from gpuprof.readers import chunks, jsonio, load_file, textstream
from gpuprof.readers.jsonio import decode_trace

Builder = Callable[..., dict[str, Any]]
WriteTrace = Callable[..., Path]
CPU = 77


def _events(event: Builder, n: int = 120) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(n):
        out.append(event("cpu_op", f"aten::op{i % 7}", 10.0 * i, 4, pid=CPU, tid=CPU))
        out.append(
            event("cuda_runtime", "cudaLaunchKernel", 10.0 * i + 1, 1, pid=CPU, tid=CPU, correlation=i)
        )
        out.append(event("kernel", f"k{i}", 10.0 * i + 2, 3, pid=0, tid=7, correlation=i, stream=7))
    return out


def _whole(path: Path, monkeypatch: pytest.MonkeyPatch) -> list[RankTrace]:
    with monkeypatch.context() as m:
        m.setattr(chunks, "TARGET_BYTES", 1 << 30)
        m.setattr(textstream, "BLOCK_BYTES", 1 << 30)
        return load_file(path)


def _streamed(path: Path, monkeypatch: pytest.MonkeyPatch, block: int = 700) -> list[RankTrace]:
    with monkeypatch.context() as m:
        m.setattr(chunks, "TARGET_BYTES", 300)
        m.setattr(textstream, "BLOCK_BYTES", block)
        m.setattr(textstream, "_IN_BYTES", 200)  # gzip: a few hundred compressed bytes at a time
        return load_file(path)


def _same(a: list[RankTrace], b: list[RankTrace]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.device.equals(y.device) and x.host.equals(y.host)
        assert (x.rank, x.steps, x.memory, x.world_size, x.device_name, x.warnings, x.truncated) == (
            y.rank,
            y.steps,
            y.memory,
            y.world_size,
            y.device_name,
            y.warnings,
            y.truncated,
        )


def _kineto_text(kineto: Builder, event: Builder) -> str:
    doc = kineto([], device_name="GPU A")
    del doc["traceEvents"]
    doc["traceEvents"] = _events(event)
    # Top-level keys after the event list, as Kineto writes them: only the last piece has them.
    doc["distributedInfo"] = {"rank": 5, "world_size": 8}
    doc["with_stack"] = 1
    return json.dumps(doc, indent=1)


def test_blocks_are_read_as_pieces_are_decoded(
    write_trace: WriteTrace, kineto: Builder, event: Builder, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_trace("t.json", _kineto_text(kineto, event))
    read: list[int] = []
    real = jsonio.text_blocks

    def counted(p: Path, warnings: list[str], block_bytes: int | None = None, **kw: Any) -> Iterator[bytes]:
        for b in real(p, warnings, block_bytes, **kw):
            read.append(len(b))
            yield b

    monkeypatch.setattr(jsonio, "text_blocks", counted)
    monkeypatch.setattr(chunks, "TARGET_BYTES", 300)
    monkeypatch.setattr(textstream, "BLOCK_BYTES", 700)
    raw = decode_trace(path)
    first_blocks = len(read)
    n_pieces = sum(1 for _ in raw.pieces())
    assert n_pieces > 20
    assert first_blocks < len(read) // 4  # the first piece needed only the start of the file
    assert sum(read) == path.stat().st_size
    assert raw.top.distributed_info == {"rank": 5, "world_size": 8} and raw.top.with_stack == 1


@pytest.mark.parametrize("block", [257, 700, 5000])
def test_object_trace_streamed_equals_whole(
    write_trace: WriteTrace, kineto: Builder, event: Builder, monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    path = write_trace("t.json", _kineto_text(kineto, event))
    whole = _whole(path, monkeypatch)
    streamed = _streamed(path, monkeypatch, block)
    _same(whole, streamed)
    (t,) = streamed
    assert t.rank == 5 and t.world_size == 8 and t.python_stacks and t.device_name == "GPU A"
    assert list(t.device["name"].astype(str)) == [f"k{i}" for i in range(120)]


def test_gzip_and_bare_list_streamed_equal_whole(
    write_trace: WriteTrace, event: Builder, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = json.dumps(_events(event), indent=2).encode()
    half = len(text) // 2  # two gzip members, as concatenated files are
    path = write_trace("rank2.json.gz", gzip.compress(text[:half]) + gzip.compress(text[half:]))
    whole = _whole(path, monkeypatch)
    _same(whole, _streamed(path, monkeypatch))
    assert whole[0].rank == 2 and len(whole[0].device) == 120 and not whole[0].warnings


def test_cut_off_file_streamed_is_read_up_to_the_cut(
    write_trace: WriteTrace, kineto: Builder, event: Builder, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _kineto_text(kineto, event)
    path = write_trace("cut.json", text[: len(text) * 2 // 3])
    whole = _whole(path, monkeypatch)
    _same(whole, _streamed(path, monkeypatch))
    (t,) = whole
    assert t.truncated and any("cut off" in w for w in t.warnings)
    names = list(t.device["name"].astype(str))
    assert 0 < len(names) < 120 and names == [f"k{i}" for i in range(len(names))]


def test_cut_gzip_streamed_keeps_its_warning(
    write_trace: WriteTrace, kineto: Builder, event: Builder, monkeypatch: pytest.MonkeyPatch
) -> None:
    gz = gzip.compress(_kineto_text(kineto, event).encode())
    path = write_trace("bad.json.gz", gz[: len(gz) * 2 // 3])
    whole = _whole(path, monkeypatch)
    _same(whole, _streamed(path, monkeypatch))
    assert any("gzip file is cut off" in w for w in whole[0].warnings)


def test_corrupt_gzip_fails_naming_the_file_or_reads_what_came_before(
    write_trace: WriteTrace, kineto: Builder, event: Builder, monkeypatch: pytest.MonkeyPatch
) -> None:
    gz = bytearray(gzip.compress(_kineto_text(kineto, event).encode()))
    gz[len(gz) // 2 : len(gz) // 2 + 64] = bytes(64)
    path = write_trace("bad.json.gz", bytes(gz))
    # Zeros where compressed data was: zlib hands out garbage text, then fails its check.
    # Decompressed in one call, nothing came before the failure: the file is refused.
    with pytest.raises(BadTraceError, match="gzip") as info:
        _whole(path, monkeypatch)
    assert info.value.path == str(path)
    # Decompressed a little at a time, the events before the damage are read, and said so.
    (t,) = _streamed(path, monkeypatch)
    assert t.truncated and any("gzip data is corrupt" in w for w in t.warnings)
    names = list(t.device["name"].astype(str))
    # Garbage text before the failed check may hold copies of earlier events: only the
    # start is certain.
    assert 40 < len(names) < 120 and names[:40] == [f"k{i}" for i in range(40)]


def test_false_cuts_in_nested_args_fall_back_to_whole(
    write_trace: WriteTrace, kineto: Builder, event: Builder, monkeypatch: pytest.MonkeyPatch
) -> None:
    evs = [event("kernel", f"k{i}", i, 1, pid=0, tid=7) for i in range(60)]
    evs += [
        event("kernel", f"n{i}", 60 + i, 1, pid=0, tid=7, nested=[{"a": j} for j in range(30)])
        for i in range(40)
    ]
    path = write_trace("n.json", json.dumps(kineto(evs, rank=1), indent=1))
    whole = _whole(path, monkeypatch)
    _same(whole, _streamed(path, monkeypatch))
    assert len(whole[0].device) == 100


def test_big_integers_streamed(
    write_trace: WriteTrace, kineto: Builder, event: Builder, monkeypatch: pytest.MonkeyPatch
) -> None:
    evs = _events(event)
    evs.insert(150, event("kernel", "huge", 5000, 1, pid=0, tid=7, correlation=2**70, stream=2**65))
    path = write_trace("big.json", json.dumps(kineto(evs), indent=1))
    whole = _whole(path, monkeypatch)
    _same(whole, _streamed(path, monkeypatch))
    huge = whole[0].device[whole[0].device["name"].astype(str) == "huge"]
    assert list(huge["correlation"]) == [-1] and list(huge["stream"]) == [7]


def test_one_line_trace_is_read_whole(
    write_trace: WriteTrace, kineto: Builder, event: Builder, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_trace("line.json", json.dumps(kineto(_events(event))))  # no newlines: no cuts
    _same(_whole(path, monkeypatch), _streamed(path, monkeypatch))
