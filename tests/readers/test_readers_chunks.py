"""Reading a trace in pieces gives exactly what reading it whole gives.

Pieces are normally megabytes; here they are shrunk to a few hundred bytes so that small
constructed traces are split into many pieces, with cuts landing everywhere.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuprof.model.timeline import Category, RankTrace
from gpuprof.readers import chunks, load_file
from gpuprof.readers.jsonio import decode_trace

Builder = Callable[..., dict[str, Any]]
WriteTrace = Callable[..., Path]
CPU = 77


def _events(event: Builder, n_steps: int = 6) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    corr = 0
    for s in range(n_steps):
        base = 1000.0 * s
        out.append(event("user_annotation", f"ProfilerStep#{s}", base, 1000, pid=CPU, tid=CPU))
        out.append(event("python_function", "train.py(3): loop", base, 900, pid=CPU, tid=CPU))
        out.append(
            event("python_function", "torch/utils/data/dataloader.py(1): __next__", base, 5, pid=CPU, tid=CPU)
        )
        for k in range(4):
            corr += 1
            t = base + 10 + 100 * k
            out.append(
                event("cpu_op", "aten::mm", t, 20, pid=CPU, tid=CPU, **{"Input Dims": [[8, 8], [8, 8]]})
            )
            out.append(
                event("cuda_runtime", "cudaLaunchKernel", t + 1, 5, pid=CPU, tid=CPU, correlation=corr)
            )
            out.append(event("kernel", f"gemm_{k}", t + 30, 40, pid=0, tid=7, correlation=corr, stream=7))
        corr += 1
        out += [
            event("cpu_op", "c10d::alltoall_base_", base + 600, 50, pid=CPU, tid=CPU),
            event("cpu_op", "nccl:all_to_all", base + 601, 48, pid=CPU, tid=CPU),
            event("cuda_runtime", "cudaLaunchKernel", base + 602, 5, pid=CPU, tid=CPU, correlation=corr),
            event(
                "kernel",
                "ncclKernel_SendRecv_RING",
                base + 650,
                100,
                pid=0,
                tid=9,
                correlation=corr,
                stream=9,
            ),
            event(
                "gpu_memcpy",
                "Memcpy DtoH (Device -> Pageable)",
                base + 800,
                9,
                pid=0,
                tid=7,
                bytes=64,
                stream=7,
            ),
            event("kernel", "other_gpu_kernel", base + 10, 5, pid=3, tid=7),
            {
                "ph": "i",
                "name": "[memory]",
                "pid": CPU,
                "tid": CPU,
                "ts": base + 1,
                "args": {"Device Id": 0, "Device Type": 1, "Total Allocated": s, "Total Reserved": 100},
            },
            {"ph": "s", "id": corr, "pid": CPU, "tid": CPU, "ts": base + 602, "cat": "ac2g", "name": "ac2g"},
        ]
    return out


def _read(path: Path, monkeypatch: pytest.MonkeyPatch, target: int) -> list[RankTrace]:
    monkeypatch.setattr(chunks, "TARGET_BYTES", target)
    return load_file(path)


def _same(a: list[RankTrace], b: list[RankTrace]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.device.equals(y.device)
        assert x.host.equals(y.host)
        assert (x.rank, x.steps, x.memory, x.world_size, x.device_name, x.device_index) == (
            y.rank,
            y.steps,
            y.memory,
            y.world_size,
            y.device_name,
            y.device_index,
        )
        assert x.process_groups == y.process_groups
        assert x.warnings == y.warnings


def _pieces(path: Path) -> int:
    raw = decode_trace(path)
    return sum(1 for _ in raw.pieces())


def test_object_trace_in_pieces_equals_whole(
    write_trace: WriteTrace, kineto: Builder, event: Builder, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = kineto([], device_name="GPU A")
    del doc["traceEvents"]
    doc["traceEvents"] = _events(event)
    # Top-level keys after the events: only the last piece sees them.
    doc["distributedInfo"] = {"rank": 5, "world_size": 8, "pg_config": [{"pg_name": "0", "ranks": [0, 1]}]}
    doc["traceName"] = "x"
    path = write_trace("t.json", json.dumps(doc, indent=1))
    whole = _read(path, monkeypatch, 1 << 30)
    monkeypatch.setattr(chunks, "TARGET_BYTES", 400)
    assert _pieces(path) > 10
    pieces = load_file(path)
    _same(whole, pieces)
    (t,) = pieces
    assert t.rank == 5 and t.world_size == 8 and t.device_name == "GPU A"
    assert [s.number for s in t.steps] == list(range(6))
    sendrecv = t.device[t.device["name"].astype(str) == "ncclKernel_SendRecv_RING"]
    assert len(sendrecv) == 6 and (sendrecv["category"] == int(Category.COLLECTIVE)).all()
    assert (t.device["name"].astype(str) != "other_gpu_kernel").all()  # GPU 3 dropped
    assert len(t.memory) == 6
    assert (t.host["category"] == int(Category.DATALOAD)).sum() == 6
    assert "train.py(3): loop" not in set(t.host["name"].astype(str))


def test_bare_list_in_pieces_equals_whole(
    write_trace: WriteTrace, event: Builder, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_trace("rank2.json.gz", json.dumps(_events(event), indent=2), gz=True)
    whole = _read(path, monkeypatch, 1 << 30)
    monkeypatch.setattr(chunks, "TARGET_BYTES", 300)
    assert _pieces(path) > 10
    _same(whole, load_file(path))
    assert whole[0].rank == 2


def test_cut_inside_nested_args_extends_the_piece(
    write_trace: WriteTrace, kineto: Builder, event: Builder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Lists of dicts in args, written over several lines, offer false cut points: a piece
    # cut there does not decode and is extended to a later cut.
    evs = [event("kernel", f"k{i}", i, 1, pid=0, tid=7) for i in range(40)]
    evs += [
        event("kernel", f"n{i}", i, 1, pid=0, tid=7, nested=[{"a": j} for j in range(30)]) for i in range(40)
    ]
    path = write_trace("n.json", json.dumps(kineto(evs, rank=1), indent=1))
    whole = _read(path, monkeypatch, 1 << 30)
    monkeypatch.setattr(chunks, "TARGET_BYTES", 200)
    assert _pieces(path) > 5
    _same(whole, load_file(path))
    assert len(whole[0].device) == 80


def test_cut_off_file_in_pieces_recovers_like_whole(
    write_trace: WriteTrace, kineto: Builder, event: Builder, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = json.dumps(kineto(_events(event), rank=0), indent=1)
    path = write_trace("cut.json", text[: len(text) * 3 // 4])
    whole = _read(path, monkeypatch, 1 << 30)
    _same(whole, _read(path, monkeypatch, 300))
    assert any("cut off" in w for w in whole[0].warnings)


def test_timeline_in_pieces(write_trace: WriteTrace, monkeypatch: pytest.MonkeyPatch) -> None:
    ops = [
        {
            "name": "forward-compute",
            "cat": "x",
            "ph": "X",
            "pid": p,
            "tid": 0,
            "ts": 10.0 * i,
            "dur": 5,
            "args": {"step": i // 10, "mb_id": i % 10},
        }
        for p in range(3)
        for i in range(60)
    ]
    path = write_trace("timeline.json", json.dumps({"traceEvents": ops}, indent=1))
    whole = _read(path, monkeypatch, 1 << 30)
    _same(whole, _read(path, monkeypatch, 300))
    assert [t.rank for t in whole] == [0, 1, 2]


def test_concatenated_gzip_members(write_trace: WriteTrace, event: Builder) -> None:
    text = json.dumps([event("kernel", f"k{i}", i, 1, pid=0, tid=7) for i in range(50)]).encode()
    half = len(text) // 2
    (t,) = load_file(write_trace("rank0.json.gz", gzip.compress(text[:half]) + gzip.compress(text[half:])))
    assert len(t.device) == 50 and not t.warnings


@pytest.mark.parametrize("gz", [False, True])
def test_trace_on_one_line_is_cut_between_events(
    write_trace: WriteTrace, kineto: Builder, event: Builder, monkeypatch: pytest.MonkeyPatch, gz: bool
) -> None:
    # No newlines at all: cuts fall at any "},{" (here also inside the nested args, where
    # the piece is extended) and each piece still decodes to its events.
    evs = [event("kernel", f"k{i}", i, 1, pid=0, tid=7, nested=[{"a": 1}, {"b": 2}]) for i in range(300)]
    path = write_trace("rank4.json.gz" if gz else "rank4.json", json.dumps(kineto(evs, rank=4)), gz=gz)
    whole = _read(path, monkeypatch, 1 << 30)
    monkeypatch.setattr(chunks, "TARGET_BYTES", 300)
    assert _pieces(path) > 20
    _same(whole, load_file(path))
    assert list(whole[0].device["name"].astype(str)) == [f"k{i}" for i in range(300)]
