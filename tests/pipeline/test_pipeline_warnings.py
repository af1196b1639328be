"""The report's warnings: one line per distinct text, naming every rank it came from."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuprof.model.report import report_to_dict
from gpuprof.pipeline import analyze_paths, rank_warnings


def test_identical_warnings_collapse_into_one_line_naming_the_ranks() -> None:
    pairs = [(r, "file-level note") for r in (0, 1, 2, 3, 5, 6, 9)]
    pairs += [(4, "rank 4 only"), (2, "shared by two"), (7, "shared by two"), (0, "file-level note")]
    assert rank_warnings(pairs) == [
        "ranks 0-3, 5-6, 9: file-level note",  # rank 0 twice still counts once
        "rank 4: rank 4 only",
        "ranks 2, 7: shared by two",
    ]
    assert rank_warnings([]) == []
    assert rank_warnings([(12, "x")]) == ["rank 12: x"]


def _op(name: str, pid: int, tid: int, ts: float, dur: float, step: int) -> dict[str, Any]:
    return {
        "name": name,
        "cat": name,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "ph": "X",
        "args": {"step": step},
    }


def test_a_file_warning_of_eight_workers_is_listed_once(write_trace: Callable[..., Path]) -> None:
    # One timeline file, 8 workers (pp 8), steps 5 then 9 only 300 us apart: the reader's
    # file-level warning about non-consecutive steps reaches all 8 ranks.
    events: list[dict[str, Any]] = []
    for p in range(8):
        events.append(
            {
                "name": "thread_name",
                "pid": 0,
                "tid": p,
                "ph": "M",
                "args": {"name": f"PP rank {p}, TP rank 0, compute"},
            }
        )
        for step, base in ((5, 0.0), (9, 1000.0)):
            events += [
                _op("forward-compute", 0, p, base + 10 * p, 300, step),
                _op("optimizer", 0, p, base + 600, 100, step),
            ]
    path = write_trace("timeline.json", {"traceEvents": events})
    report = analyze_paths([path])
    assert len(report.ranks) == 8
    steps_notes = [w for w in report.warnings if "non-consecutive" in w]
    assert len(steps_notes) == 1 and steps_notes[0].startswith("ranks 0-7: the timeline holds")
    assert len(report.warnings) == len(set(report.warnings))
    # The JSON report carries the same single line.
    doc = json.loads(json.dumps(report_to_dict(report)))
    assert sum("non-consecutive" in w for w in doc["warnings"]) == 1
