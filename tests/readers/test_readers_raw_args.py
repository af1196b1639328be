"""Input shapes are kept as raw JSON text and decoded only where a message size needs them.

``Input Dims`` / ``Input type`` sit on every op of a trace recorded with shapes; the reader
types them ``msgspec.Raw`` so that no nested Python lists are built per op. What the
readers give must not change: the same message sizes as the shapes decoded with the
standard library, through every path (pieces streamed with events alive across pieces,
the loose fallback decode, a whole small trace), and no cyclic-GC work while reading.
"""

from __future__ import annotations

import gc
import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from gpuprof.model.dtypes import input_bytes, message_bytes
from gpuprof.readers import chunks, load_file, textstream
from gpuprof.readers.events import NO_RAW, Event, raw_value
from gpuprof.readers.jsonio import decode_trace

Builder = Callable[..., dict[str, Any]]
WriteTrace = Callable[..., Path]
CPU = 4321
MULTIMEM = "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*)"


def _shaped_job(event: Builder, n: int, pid: Any = CPU) -> list[dict[str, Any]]:
    """``n`` steps of a shaped op (a GEMM) and a symm_mem all-reduce whose only size is its
    input shapes, plus a memory sample per step: events that outlive their piece."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        t = 1000.0 * i
        mm = {"Input Dims": [[64, i + 1], [i + 1, 64]], "Input type": ["float", "float"]}
        out.append(event("cpu_op", "aten::mm", t, 50, pid=pid, tid=CPU, **mm))
        out.append(event("cuda_runtime", "cudaLaunchKernel", t + 1, 5, pid=pid, tid=CPU, correlation=2 * i))
        out.append(event("kernel", "sgemm", t + 10, 40, pid=0, tid=7, stream=7, correlation=2 * i))
        shapes = {"Input Dims": [[1024 * (i + 1)], [], []], "Input type": ["c10::BFloat16", "", ""]}
        out.append(event("cpu_op", "symm_mem::multimem_all_reduce_", t + 100, 50, pid=pid, tid=CPU, **shapes))
        out.append(
            event("cuda_runtime", "cudaLaunchKernel", t + 102, 5, pid=pid, tid=CPU, correlation=2 * i + 1)
        )
        out.append(event("kernel", MULTIMEM, t + 200, 80, pid=0, tid=7, stream=7, correlation=2 * i + 1))
        sample = {"Device Id": 0, "Total Allocated": 1000 + i, "Total Reserved": 4000}
        out.append(
            {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": pid, "tid": CPU, "ts": t + 300,
             "args": sample}
        )
    return out


def _expected_kernel_bytes(doc: dict[str, Any]) -> list[int]:
    """Message sizes of the all-reduce kernels from the shapes as ``json`` decodes them."""
    ops = sorted(
        (e["ts"], e["args"]) for e in doc["traceEvents"] if e.get("name") == "symm_mem::multimem_all_reduce_"
    )
    out = []
    for _, a in ops:
        size = message_bytes(a.get("In msg nelems"), a.get("Out msg nelems"), a.get("dtype"))
        if size is None:
            size = input_bytes(a.get("Input Dims"), a.get("Input type"))
        out.append(-1 if size is None else size)
    return out


def _kernel_bytes(path: Path) -> list[int]:
    (t,) = load_file(path)
    dev = t.device
    return [int(b) for b in dev.loc[dev["name"].astype(str) == MULTIMEM].sort_values("start_us")["bytes"]]


def test_shapes_are_raw_text_until_needed(write_trace: WriteTrace, kineto: Builder, event: Builder) -> None:
    path = write_trace("t.json", kineto(_shaped_job(event, 2)))
    events = [e for piece in decode_trace(path).pieces() for e in piece]
    mm = next(e for e in events if e.name == "aten::mm")
    assert isinstance(mm.args.input_dims, msgspec.Raw)  # no lists built while decoding
    assert raw_value(mm.args.input_dims) == [[64, 1], [1, 64]]
    assert raw_value(mm.args.input_type) == ["float", "float"]
    launch = next(e for e in events if e.name == "cudaLaunchKernel")
    assert launch.args.input_dims is NO_RAW and raw_value(launch.args.input_dims) is None
    assert raw_value([[3]]) == [[3]]  # a value an Args was built with stays as it is


@pytest.mark.parametrize("gz", [False, True])
def test_streamed_pieces_give_the_sizes_the_json_gives(
    write_trace: WriteTrace, kineto: Builder, event: Builder, monkeypatch: pytest.MonkeyPatch, gz: bool
) -> None:
    """Hundreds of pieces, with events (memory samples, the pieces' own lists) alive while
    the next piece is read: each piece is decoded from text of its own, so the raw fields
    holding on to it never stop the reader's buffer from growing or shrinking."""
    doc = kineto(_shaped_job(event, 60))
    path = write_trace("t.json.gz" if gz else "t.json", json.dumps(doc, indent=1), gz=gz)
    whole = load_file(path)
    monkeypatch.setattr(chunks, "TARGET_BYTES", 300)
    monkeypatch.setattr(textstream, "BLOCK_BYTES", 700)
    monkeypatch.setattr(textstream, "_IN_BYTES", 200)
    streamed = load_file(path)
    expected = _expected_kernel_bytes(doc)
    assert expected[:2] == [2048 * 1, 2048 * 2] and len(expected) == 60
    assert _kernel_bytes(path) == expected
    (a,), (b,) = whole, streamed
    assert a.device.equals(b.device) and a.host.equals(b.host) and a.memory == b.memory
    assert len(b.memory) == 60


def test_loose_decode_keeps_the_shapes(write_trace: WriteTrace, kineto: Builder, event: Builder) -> None:
    """A float pid sends the trace through the loose decode, which converts ``args`` from
    Python values: the shapes must still reach the message size."""
    doc = kineto(_shaped_job(event, 3, pid=4321.0))
    path = write_trace("t.json", doc)
    assert _kernel_bytes(path) == _expected_kernel_bytes(doc) == [2048, 4096, 6144]


def test_reading_a_shaped_trace_runs_no_gc(write_trace: WriteTrace, kineto: Builder, event: Builder) -> None:
    """Shapes built as nested lists on every op made the cyclic GC collect over and over
    while reading; as raw text, reading allocates no objects the GC tracks per event."""
    doc = kineto(_shaped_job(event, 400))
    path = write_trace("t.json", json.dumps(doc, indent=1))
    load_file(path)  # warm: imports and caches
    runs: list[int] = []

    def count(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            runs.append(info["generation"])

    gc.collect()
    gc.callbacks.append(count)
    try:
        load_file(path)
    finally:
        gc.callbacks.remove(count)
    assert runs == []


def test_real_shaped_ranks_match_their_json(shared_traces: Path) -> None:
    """Every communication op of the real traces recorded with shapes: the host table's
    message size equals the size computed from the shapes ``json`` decodes."""
    checked = 0
    for folder in ("b200-eager-rank0", "mi300-resnet-ckpt-rank0", "dlrm-8rank", "hta-sampled-2rank"):
        for path in sorted((shared_traces / folder).glob("*.json.gz")):
            doc = json.loads(gzip.decompress(path.read_bytes()))
            want: dict[tuple[str, float], int] = {}
            for e in doc["traceEvents"]:
                a = e.get("args") or {}
                if e.get("ph") == "X" and "Input Dims" in a and e.get("cat") == "cpu_op":
                    size = input_bytes(a["Input Dims"], a.get("Input type"))
                    told = message_bytes(a.get("In msg nelems"), a.get("Out msg nelems"), a.get("dtype"))
                    if size is not None and told is None:
                        want[(e["name"], float(e["ts"]))] = size
            (t,) = load_file(path)
            host = t.host
            got = {
                (n, float(s)): int(b)
                for n, s, b in zip(host["name"].astype(str), host["start_us"], host["bytes"])
                if int(b) >= 0
            }
            for key, size in want.items():
                if key in got:
                    assert got[key] == size, (path.name, key)
                    checked += 1
    assert checked > 70  # the b200 rank alone has 73 symm_mem all-reduces sized by shapes


def test_event_structs_stay_untracked() -> None:
    """Structs that the GC does not track: what keeps reading free of collections."""
    e = msgspec.json.decode(b'{"ph":"X","args":{"Input Dims":[[1]],"Input type":["float"]}}', type=Event)
    assert not gc.is_tracked(e) and not gc.is_tracked(e.args)
