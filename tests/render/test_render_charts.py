"""The HTML report's timeline, step-time chart, per-rank table and cross-rank findings."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from reportfactory import XSS, rank, rec, report

from gpuprof.model.report import report_from_dict, report_to_dict
from gpuprof.render import render
from gpuprof.render.charts import nice_ticks, timeline_chart
from gpuprof.render.findings import job_blocks
from gpuprof.render.jsontables import fmt_value

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


def _timeline(**over: Any) -> dict[str, Any]:
    tl: dict[str, Any] = {
        "step": 3, "span_us": 1000.0, "bin_us": 1.0, "clock_offsets_applied": False, "slowest_rank": 1,
        "critical_rank": 1, "critical_path": [{"rank": 1, "start_us": 0.0, "end_us": 1000.0}],
        "critical_path_source": "critical_rank_per_step", "ranks_total": 2,
        "lanes": [
            {"rank": 0, "stage": None, "start_us": 0.0, "end_us": 1000.0,
             "segments": [["compute", 0.0, 600.0], ["straggler", 600.0, 1000.0]]},
            {"rank": 1, "stage": None, "start_us": 0.0, "end_us": 1000.0, "segments": [["compute", 0.0, 1000.0]]},
        ],
    }  # fmt: skip
    tl.update(over)
    return tl


def _lane_rects(html: str) -> list[tuple[float, float, str]]:
    return [
        (float(x), float(w), t)
        for x, w, t in re.findall(r'<rect x="([\d.]+)%" width="([\d.]+)%" y="7" height="14" fill="#[0-9A-F]{6}"><title>([^<]*)</title>', html)
    ]


def test_timeline_lanes_place_each_kind_on_the_common_clock() -> None:
    tl = _timeline()
    tl["lanes"][0]["segment_names"] = ["aten::mm", "ncclKernel_AllReduce"]
    html = timeline_chart(tl, slowest_rank=1)
    rects = _lane_rects(html)
    assert (0.0, 60.0, "compute · 600 µs · aten::mm · rank 0, from 0 µs into the step") in rects
    assert (60.0, 40.0, "straggler · 400 µs · ncclKernel_AllReduce · rank 0, from 600 µs into the step") in rects
    assert (0.0, 100.0, "compute · 1.0 ms · rank 1, from 0 µs into the step") in rects
    # The rank with the longest step (the report's) is tagged once and the role explained
    # in the legend; the critical path is a line on its lane (only), explained there too.
    assert html.count('class="tag">longest step') == 1 and "longest step: the rank whose mean step is the longest" in html
    assert "critical</b>" not in html  # no per-row "critical" badge: the line shows the path
    lane1 = html.split('aria-label="rank 1"')[1].split("</svg>")[0]
    assert '<g class="crit"><title>critical path on rank 1: 1.0 ms from 0 µs into the step</title>' in lane1
    assert html.count('<g class="crit">') == 1
    assert "critical path: the chain of work across ranks that set this step" in html
    assert "the rank that waited least in this step stands in for the critical path" in html
    assert "Step 3, the median step" in html


def test_pipeline_lanes_are_ordered_and_labelled_by_stage() -> None:
    lanes = [
        {"rank": r, "stage": st, "start_us": 0.0, "end_us": 10.0, "segments": [["pipeline_bubble", 0.0, 10.0]]}
        for r, st in ((0, 1), (1, 0), (2, 1), (3, 0))
    ]
    html = timeline_chart(_timeline(lanes=lanes, critical_path=[]))
    labels = re.findall(r'<span class="l">([^<]*)', html)
    assert labels == ["stage 0 · rank 1", "stage 0 · rank 3", "stage 1 · rank 0", "stage 1 · rank 2"]
    assert "critical path" not in html and "slowest" not in html


def test_malformed_timeline_from_a_saved_report_is_skipped_and_escaped() -> None:
    lanes = [
        {"rank": "0", "start_us": 0, "end_us": 1, "segments": []},  # rank not an int
        {"rank": 1, "start_us": 5.0, "end_us": 1.0, "segments": []},  # inverted
        {"rank": 2, "start_us": 0.0, "end_us": 10.0, "segments": [[XSS, 0, 5], ["compute", "a", 5], ["host", 0.0, 10.0]]},
    ]
    html = timeline_chart(_timeline(lanes=lanes, critical_path=[{"rank": 2, "start_us": "x"}], critical_path_source=XSS))
    assert len(_lane_rects(html)) == 1 and "host · 10 µs · rank 2" in html
    assert "<script" not in html and "<img" not in html
    assert timeline_chart({"lanes": "nope"}) == "" and timeline_chart(None) == ""


def test_saved_json_report_draws_the_same_timeline(tmp_path: Path) -> None:
    from gpuprof.pipeline import analyze_paths

    rep = analyze_paths([SAMPLES / "straggler"])
    again = report_from_dict(json.loads(render(rep, "json")))
    page = render(again, "html")
    visible = page.split('<script type="application/json"')[0]
    assert visible == render(rep, "html").split('<script type="application/json"')[0]
    assert "One step, every rank" in page
    # Rank 2 is the straggler: the others wait for it, its step is the longest, the path runs on it.
    assert re.search(r'rank 2<b class="tag">longest step</b>', page) and page.count('class="tag">longest step') == 1
    lane2 = page.split('aria-label="rank 2"')[1].split("</svg>")[0]
    assert '<g class="crit">' in lane2


def test_step_times_chart_has_a_dot_per_rank_and_step_and_rings_the_critical_rank() -> None:
    ranks = [rank(r, window_ms=100, steps=4) for r in range(3)]
    job = {"critical_rank_per_step": [{"step": s, "rank": 2} for s in range(10, 14)]}
    page = render(report(ranks, extra={"job": job}), "html")
    assert page.count('class="dot"') == 12
    assert page.count('class="ring"') == 4
    assert "step 1: rank 2, the pace-setter" in page
    assert "pace-setter: in a step, the rank that waited least" in page


def test_per_rank_table_puts_the_largest_causes_first_and_names_the_idle_ones() -> None:
    rep = report([rank(0, lost_ms={"host": 5, "dataloader": 30}), rank(1, lost_ms={"sync": 1})])
    page = render(rep, "html")
    table = page.split("<h2>Per rank</h2>")[1]
    heads = re.findall(r"<th>([^<]*)</th>", table.split("</thead>")[0])
    assert heads == ["rank", "steps", "mean step ms", "compute", "dataloader", "host", "sync", "window ms"]
    assert "No time lost to pipeline_bubble, communication, straggler, memory, other." in table
    assert "Every rank: NVIDIA H100 80GB HBM3." in table


def test_cross_rank_findings_are_sentences_and_tables_never_json() -> None:
    job = {
        "stragglers": [{"rank": 2, "caused_wait_us_per_step": 11387.2, "last_arrivals": 8, "collectives": 8,
                        "phase": "backward", "phase_ratio": 1.505}],
        "critical_rank_per_step": [{"step": 1, "rank": 2, "waited_us": 0.0}, {"step": 2, "rank": 2, "waited_us": 0.0}],
        "a_new_finding": {"nested": {"deeper": [{"x_us": 1500.0, "name": XSS}]}, "ratio": 0.5, "note": XSS},
    }  # fmt: skip
    page = render(report([rank(0), rank(1), rank(2)], extra={"job": job}), "html")
    section = page.split("<h2>Across ranks</h2>")[1].split("<h2>")[0].split('<script type="application/json"')[0]
    assert "Rank 2 arrived last at 8 of 8 collectives; the other ranks waited 11.4 ms per step for it; " \
           "its backward takes 1.50× the others&#x27; median." in section  # fmt: skip
    assert "Rank 2 was the pace-setter in 2 of 2 steps." in section
    assert "Rank roles: pace-setter: in a step, the rank that waited least" in section
    assert "<h3>A new finding</h3>" in section and "<td>1.5 ms</td>" in section
    assert "&lt;script&gt;" in section and "<script" not in section
    assert "{" not in section and '"' not in re.sub(r'<[^>]*>', "", section)


def test_finding_values_carry_the_unit_their_key_names() -> None:
    assert fmt_value("wait_us_per_step", 1500.0) == "1.5 ms"
    assert fmt_value("bubble_fraction", 0.2727) == "27.3%"
    assert fmt_value("bytes_per_step", 2.5e8) == "250.0 MB"
    assert fmt_value("busbw_gbps", 94.937) == "94.9 GB/s"
    assert fmt_value("phase", None) == "N/A"
    blocks = job_blocks({"clock_offsets_us": {"0": 0.0, "1": 250.0}})
    assert blocks[0].tables[0].columns == ("rank", "clock offsets")
    assert blocks[0].tables[0].rows == (("0", "0 µs"), ("1", "250 µs"))


def test_nice_ticks() -> None:
    assert nice_ticks(0, 37_662) == [0, 10_000, 20_000, 30_000]
    assert nice_ticks(0, 1.0) == [0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert nice_ticks(5, 5) == [5]


def test_report_without_timeline_still_renders() -> None:
    page = render(report([rank(0)], [rec("host", 3.0)]), "html")
    assert "One step, every rank" not in page and "What to change" in page
    assert report_to_dict(report([rank(0)])).get("timeline") is None


def test_steps_are_numbered_as_the_trace_numbers_them_and_one_step_draws_no_chart() -> None:
    ranks = [rank(r, window_ms=100, steps=3, extra={"step_numbers": [1046, 1047, 1048]}) for r in range(2)]
    page = render(report(ranks, extra={"timeline": _timeline(step=1048)}), "html")
    assert "Step 1048, the median step" in page
    axis = page.split('aria-label="step time per step"')[1]
    assert ">1046</text>" in axis and ">1048</text>" in axis and ">1</text>" not in axis
    assert "step, as the trace numbers them" in page
    one = render(report([rank(r, window_ms=100, steps=1) for r in range(8)]), "html")
    assert "Step time, step by step" not in one  # one step: the timeline is the whole story


def test_html_links_the_annotated_trace_written_beside_it(tmp_path: Path) -> None:
    from clirun import run_cli

    out = tmp_path / "report.html"
    got = run_cli("analyze", str(SAMPLES / "straggler"), "-o", str(out))
    assert got.code == 0, got.stderr
    assert "annotated" not in out.read_text()
    (tmp_path / "report.annotated.json.gz").write_bytes(b"")
    run_cli("analyze", str(SAMPLES / "straggler"), "-o", str(out))
    assert '<a href="report.annotated.json.gz">' in out.read_text()


def test_findings_tables_have_captions_and_count_barriers_from_one() -> None:
    job = {
        "barrier_waits": {
            "barriers": 32, "waited_for_ranks": [0, 1, 6, 7], "wait_us_per_step": {"2": 1000.0, "3": 1200.0},
            "late_comm": [{"name": "embedding-grads-all-reduce", "calls": 128, "outlier_barriers": [0, 1]}],
        },
        "combined_savings_pct": 33.5,
    }  # fmt: skip
    blocks = {b.key: b for b in job_blocks(job)}
    barrier = blocks["barrier_waits"]
    assert barrier.sentences == (
        (
            "32 barriers (ops that start at the same instant on every rank); the other ranks wait at them for "
            "ranks 0-1, 6-7, the last to arrive."
        ),
    )
    assert all(t.caption for t in barrier.tables)
    late = next(t for t in barrier.tables if "outlier barriers" in t.columns)
    assert late.caption == "Communication the late ranks run between their last compute and the barrier"
    assert late.rows[0][late.columns.index("outlier barriers")] == "1, 2"
    assert "summary" not in blocks  # the combined saving is said under the recommendations, not again here
