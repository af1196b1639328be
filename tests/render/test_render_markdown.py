"""The Markdown report: compact, escaped, with evidence folded into <details>."""

from __future__ import annotations

import re

from reportfactory import XSS, rank, rec, report

from gpuprof.model.report import CAUSES
from gpuprof.render import format_for_path, render
from gpuprof.render.markdown import md_escape


def _report():
    return report(
        [rank(0, lost_ms={"dataloader": 30, "host": 5}), rank(1, lost_ms={"communication": 12})],
        [rec(c, s, title=f"fix {c}", evidence=(f"evidence {c}",)) for c, s in
         (("dataloader", 25.0), ("communication", 6.0), ("host", 2.5), ("memory", 1.0))],
    )


def test_top_three_recommendations_have_details_the_rest_one_line() -> None:
    md = render(_report(), "markdown")
    assert md.count("<details><summary>Evidence and what to try</summary>") == 3
    assert md.count("<details>") == md.count("</details>")
    assert "fix memory" in md and "evidence memory" not in md
    assert md.index("fix dataloader") < md.index("fix communication") < md.index("Where the time went")


def test_totals_table_has_every_cause() -> None:
    md = render(_report(), "markdown")
    header = next(line for line in md.splitlines() if line.startswith("| | compute"))
    assert [h.strip() for h in header.strip("|").split("|")][2:] == [c.value for c in CAUSES]
    pct_row = next(line for line in md.splitlines() if line.startswith("| % |"))
    cells = [x.strip() for x in pct_row.strip("|").split("|")]
    assert cells[1] == "76.5%" and cells[2 + list(CAUSES).index(CAUSES[4])] == "15.0%"  # dataloader


def test_trace_strings_cannot_inject_markup_or_break_tables() -> None:
    nasty = XSS + " | col"
    samples = {"timeline": [{"t_s": 0.0, "gpu": nasty, "gpu_util_pct": 5.0}]}
    md = render(
        report([rank(0)], [rec("host", 3.0, title=nasty, evidence=(nasty,))], warnings=(nasty,), extra={"samples": samples}),
        "markdown",
    )
    assert not re.search(r"(?<!\\)\| col", md) and "\\| col" in md
    assert "<script" not in md and "<img" not in md
    assert "&lt;script&gt;" in md
    # Every row of a table has its header's column count: no unescaped pipe from data.
    tables: list[list[int]] = [[]]
    for line in md.splitlines():
        if line.startswith("|"):
            tables[-1].append(len(re.findall(r"(?<!\\)\|", line)))
        elif tables[-1]:
            tables.append([])
    assert any(tables)
    for counts in tables:
        assert len(set(counts)) <= 1, counts


def test_md_escape() -> None:
    assert md_escape("a|b") == "a\\|b"
    assert md_escape("<b>") == "&lt;b&gt;"
    assert md_escape("x\ny") == "x y"


def test_many_ranks_are_summarized() -> None:
    md = render(report([rank(i, lost_ms={"host": float(i % 10)}) for i in range(128)]), "markdown")
    rank_rows = [line for line in md.splitlines() if re.match(r"\| \d+ \| 4 \|", line)]
    assert 4 <= len(rank_rows) <= 16
    assert "of 128 ranks" in md


def test_cpu_only() -> None:
    md = render(report([rank(0, window_ms=0, steps=0, extra={"note": "CPU-only trace"})]), "markdown")
    assert md.startswith("### gpuprof: nothing to analyze")


def test_extension() -> None:
    assert format_for_path("report.md") == "markdown"
    assert format_for_path("r.html") == "html"


def test_cross_rank_findings_as_folded_sentences() -> None:
    job = {"critical_rank_per_step": [{"step": 1, "rank": 3}, {"step": 2, "rank": 3}], "stragglers": []}
    md = render(report([rank(0), rank(3)], extra={"job": job}), "markdown")
    block = md.split("<details><summary>Across ranks</summary>")[1].split("</details>")[0]
    assert "- Rank 3 was the pace-setter in 2 of 2 steps." in block
    assert "- Rank roles: pace-setter: in a step, the rank that waited least, the one the others waited for." in block
    assert "- No rank is consistently the last to arrive at collectives." in block
