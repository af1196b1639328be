"""The streaming decoder reads every real and sample trace exactly as plain ``json.load`` does.

The reference here decodes each file whole with the standard library and builds the event
structs by hand; the readers then make the same tables from either. The decoder under test
reads the file as a stream of blocks cut into pieces, here also with blocks and pieces
shrunk to tens of KB so that cuts land everywhere in these small files.
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import SHARED_TRACES

from gpuprof.model.timeline import RankTrace
from gpuprof.readers import _read, chunks, discover, load_file, textstream
from gpuprof.readers.events import NO_ARGS, PHASES, Args, Event, TopLevel
from gpuprof.readers.jsonio import RawTrace

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
_ARG_KEYS = [(f.name, f.encode_name) for f in msgspec.structs.fields(Args)]


def _time(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan


def _ident(v: Any) -> int | str:
    return v if isinstance(v, (int, str)) and not isinstance(v, bool) else str(v)


def _event(d: dict[str, Any]) -> Event:
    a = d.get("args")
    args = Args(**{name: a.get(key) for name, key in _ARG_KEYS}) if isinstance(a, dict) else NO_ARGS
    ph = d.get("ph", "")
    return Event(
        ph=ph if ph in PHASES else "",
        cat=str(d.get("cat") or ""),
        name=str(d.get("name") or ""),
        ts=_time(d.get("ts")),
        dur=_time(d.get("dur")),
        pid=_ident(d.get("pid", -1)),
        tid=_ident(d.get("tid", -1)),
        args=args,
    )


def reference(path: Path, order: int) -> list[RankTrace]:
    raw_bytes = path.read_bytes()
    doc = json.loads(gzip.decompress(raw_bytes) if raw_bytes[:2] == b"\x1f\x8b" else raw_bytes)
    is_object = isinstance(doc, dict)
    events = [_event(e) for e in (doc["traceEvents"] if is_object else doc)]
    top = TopLevel()
    if is_object:
        top = TopLevel(doc.get("deviceProperties"), doc.get("distributedInfo"), doc.get("schemaVersion"), doc.get("with_stack"))
    raw = RawTrace(events, iter(()), top, is_object, [])
    from gpuprof.readers.ranks import rank_hint_from_name

    return _read(raw, path, rank_hint_from_name(path), order)


def _same(a: list[RankTrace], b: list[RankTrace]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.device.equals(y.device), x.source
        assert x.host.equals(y.host), x.source
        assert (x.rank, x.steps, x.memory, x.world_size, x.device_name, x.device_index, x.parallel) == (
            y.rank, y.steps, y.memory, y.world_size, y.device_name, y.device_index, y.parallel
        )
        assert (x.process_groups, x.warnings, x.truncated, x.python_stacks) == (
            y.process_groups, y.warnings, y.truncated, y.python_stacks
        )


def _job_folders() -> list[Path]:
    shared = SHARED_TRACES
    folders = sorted(p for p in SAMPLES.iterdir() if p.is_dir())
    if shared.is_dir():
        folders += sorted(p for p in shared.iterdir() if p.is_dir() and p.name != "LICENSES")
    return folders


@pytest.mark.parametrize("folder", _job_folders(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_decoder_equals_json_load(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sources = discover([folder])
    assert sources
    for src in sources:
        expected = reference(src.path, src.order)
        assert sum(len(t.device) + len(t.host) for t in expected) > 0
        _same(load_file(src.path, src.rank_hint, src.order), expected)
        with monkeypatch.context() as m:
            m.setattr(chunks, "TARGET_BYTES", 16 << 10)
            m.setattr(textstream, "BLOCK_BYTES", 40_009)
            m.setattr(textstream, "_IN_BYTES", 7_001)
            _same(load_file(src.path, src.rank_hint, src.order), expected)


def test_shared_traces_are_there_or_skipped(shared_traces: Path) -> None:
    # The parametrized test above covers ../shared/traces only when it exists; say so.
    assert any(p.is_dir() for p in shared_traces.iterdir())
