"""Hidden copies still take the copy engine's time.

The copy what-ifs give the copies they hide no time at all; a step cannot be shorter than
the busiest copy direction keeps its engine busy. On the memory-pressure sample the
pinned host-to-device copies alone take longer per step than the compute: before the
bound, hiding every copy at once "saved" 76.8 % of the step, down to the compute alone.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from gpuprof.model.report import report_to_dict

run_analysis = pytest.importorskip("gpuprof.pipeline").run_analysis

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "memory-pressure"


def _pinned_copy_us_per_direction(trace: Path) -> dict[str, float]:
    """Total time of the pinned copies of each direction, read straight from the trace
    (the sample's copies of one direction never overlap: one stream)."""
    with gzip.open(trace, "rt") as fh:
        doc = json.load(fh)
    out = {"HtoD": 0.0, "DtoH": 0.0}
    for e in doc["traceEvents"]:
        name = str(e.get("name", ""))
        if e.get("cat") == "gpu_memcpy" and "Pinned" in name:
            out[name.split()[1]] += float(e["dur"])
    return out


def test_hidden_copies_never_shorten_the_step_below_the_copy_engine_time() -> None:
    analysis = run_analysis([SAMPLE])
    report = report_to_dict(analysis.report)
    steps = report["ranks"][0]["steps"]
    step_us = report["job"]["whatif"]["measured_step_us"]
    busiest_us = max(_pinned_copy_us_per_direction(SAMPLE / "rank0.pt.trace.json.gz").values()) / steps
    # Within the window: the sample's copies all run inside the two profiled steps.
    assert analysis.cross.whatifs.model.copy_floor_us() == pytest.approx(busiest_us, rel=0.01)
    bound_pct = 100.0 * (1.0 - busiest_us / step_us)
    assert busiest_us > 0.3 * step_us  # the bound matters here: more than the compute
    hidden = report["job"]["whatif"]["savings_pct"]["hidden_copies"]
    assert hidden <= bound_pct + 0.01
    assert report["job"]["combined_savings_pct"] <= bound_pct + 0.01
    rec = next(r for r in report["recommendations"] if r["whatif"] == "hidden_copies")
    assert any("copy engine" in line for line in rec["evidence"])
