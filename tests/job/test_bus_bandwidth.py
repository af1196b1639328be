"""Bus bandwidth only from the transfer after the last member arrived (issue 12, item 4).

The simulator moves an all-reduce's bytes at ``link_gbs`` once every member has arrived
(ring: 2 (n-1)/n of the buffer per rank, plus a 20 µs start-up), so the bus bandwidth
measured on the transfer part is known: a little under ``link_gbs``.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import layouts as L
import pytest

from gpuprof.model.report import report_to_dict
from gpuprof.pipeline import analyze_paths
from gpuprof.simulate import generate

LINK_GBS = 100.0


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # rank 3 computes 1.5x slower: the others wait for it inside every all-reduce
    return generate(
        "straggler", tmp_path_factory.mktemp("job"), ranks=4, steps=2, layers=4, slow_rank=3, link_gbs=LINK_GBS
    )


def _bandwidth(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    report = report_to_dict(analyze_paths([path]))
    return report["job"].get("collective_bandwidth") or {}, report


@pytest.mark.parametrize("layout", ["as written", "no world size"])
def test_bus_bandwidth_is_the_transfer_rate(job: Path, tmp_path: Path, layout: str) -> None:
    path = job if layout == "as written" else L.per_rank(job, tmp_path / "split", L.drop_world_size)
    bw, _ = _bandwidth(path)
    assert set(bw) == {"0", "1", "2", "3"}
    for b in bw.values():
        # 25 MB buckets: 375 us at 100 GB/s plus the 20 us start-up -> 95 GB/s; with the
        # waits for rank 3 (several ms) left in, it would be a few GB/s
        assert 0.85 * LINK_GBS <= b["busbw_gbps"] <= LINK_GBS
        assert b["measurable_calls"] == b["calls"] and b["bandwidth_note"] is None
        assert b["busbw_gbps"] <= b["peak_gbps"]


def test_one_rank_of_four_has_no_bandwidth(job: Path, tmp_path: Path) -> None:
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(L.rank_files(job)[0], alone)
    bw, report = _bandwidth(alone)
    assert bw["0"]["busbw_gbps"] is None and bw["0"]["algbw_gbps"] is None
    assert bw["0"]["bandwidth_note"].startswith("not measurable")
    text = " ".join(e for r in report["recommendations"] for e in r["evidence"])
    assert "GB/s achieved" not in text and "median bus bandwidth" not in text
