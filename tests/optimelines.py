"""Builders of small op-level timelines (the Megatron exporter's format) for tests: one op,
the thread names of a worker's lanes, and a folder with the timeline and its meta file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

LANES = ("compute", "pp-comm", "tp-comm", "dp-comm", "misc")


def op(name: str, pid: int, tid: int, ts: float, dur: float, step: int, mb: int = -1) -> dict[str, Any]:
    """One timer span (µs) of microbatch ``mb`` (-1: none) in ``step``."""
    return {"name": name, "cat": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "ph": "X",
            "args": {"step": step, "model_chunk": 0, "mb_id": mb, "seq_id": 0}}


def threads(dp: int, pp: int, dp_size: int) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The thread-name events of worker (dp, pp) and the tid of each of its lanes."""
    base = (pp * dp_size + dp) * len(LANES)
    meta = [
        {"name": "thread_name", "pid": dp, "tid": base + k, "ph": "M",
         "args": {"name": f"PP rank {pp}, TP rank 0, {lane}"}}
        for k, lane in enumerate(LANES)
    ]
    return meta, {lane: base + k for k, lane in enumerate(LANES)}


def write(folder: Path, events: list[dict[str, Any]], meta: str) -> Path:
    """``folder`` with the timeline and its meta file (YAML text)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "timeline-t.json").write_text(json.dumps(events))
    (folder / "meta-t.yaml").write_text(meta)
    return folder
