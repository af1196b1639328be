"""The HTML report: self-contained, escaped, with charts computed from the report."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest
from reportfactory import XSS, rank, rec, report

from gpuprof.model.report import report_to_dict
from gpuprof.render import render


class _Collect(HTMLParser):
    """Tags, attributes and script bodies of a page, as a browser's tokenizer sees them."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts.append(data)


def _nasty_report():
    return report(
        [rank(0, lost_ms={"dataloader": 30, "host": 10}, device=XSS), rank(1, lost_ms={"communication": 12})],
        [rec("dataloader", 25.0, title=XSS, evidence=(f"kernel {XSS}", "</script><script>x()</script>"), actions=(XSS,))],
        warnings=(XSS,),
        extra={"job": {"finding": XSS}, "samples": {"timeline": [{"t_s": 0.0, "gpu": XSS, "gpu_util_pct": 50.0}]}},
    )


def _parse(page: str) -> _Collect:
    p = _Collect()
    p.feed(page)
    return p


def test_no_markup_from_data_and_one_inert_script() -> None:
    page = render(_nasty_report(), "html")
    p = _parse(page)
    scripts = [a for t, a in p.tags if t == "script"]
    assert scripts == [{"type": "application/json", "id": "gpuprof-report"}]
    assert not [t for t, a in p.tags if t == "img"]
    assert not [a for t, a in p.tags if any(k.startswith("on") for k in a)]
    assert "&lt;script&gt;document.title=" in page


def test_embedded_json_is_the_report() -> None:
    rep = _nasty_report()
    p = _parse(render(rep, "html"))
    assert len(p.scripts) == 1 and "</" not in p.scripts[0]
    assert json.loads(p.scripts[0]) == json.loads(json.dumps(report_to_dict(rep)))


def test_self_contained() -> None:
    page = render(_nasty_report(), "html")
    p = _parse(page)
    for tag, attrs in p.tags:
        for key in ("src", "href"):
            assert key not in attrs, (tag, attrs)
        assert tag not in ("link", "iframe", "object", "embed")
    assert "script-src 'none'" in page  # CSP: a second line of defence


def _rects(svg: str) -> list[tuple[float, float, str]]:
    """(x %, width %, title) of every bar segment."""
    found = re.findall(r'<rect x="([\d.]+)%" width="([\d.]+)%" y="[\d.]+" height="[\d.]+" fill="#[0-9A-Fa-f]{6}"><title>([^<]*)</title>', svg)
    return [(float(x), float(w), t) for x, w, t in found]


def test_share_bars_are_shares_of_the_window() -> None:
    from gpuprof.render.charts import rank_bars

    svg = rank_bars([rank(0, lost_ms={"dataloader": 30, "host": 10})], absolute=False)
    widths = {t.split(" · ")[1].split(":")[0]: w for _, w, t in _rects(svg)}
    assert widths == {"compute": 60.0, "dataloader": 30.0, "host": 10.0}


def test_absolute_bars_share_one_scale_in_ms_per_step() -> None:
    from gpuprof.render.charts import rank_bars

    # Rank 1's steps take half as long as rank 0's: its bar is half as long.
    svg = rank_bars([rank(0, window_ms=100, steps=4), rank(1, window_ms=50, steps=4, lost_ms={"sync": 5})], absolute=True)
    rects = _rects(svg)
    ends = {}
    for x, w, t in rects:
        r = int(t.split(" · ")[0].split()[1])
        ends[r] = max(ends.get(r, 0.0), x + w)
    assert ends[0] == pytest.approx(100.0, abs=0.01) and ends[1] == pytest.approx(50.0, abs=0.01)
    assert any("rank 1 · sync: 1.2 ms per step (10.0%)" in t for _, _, t in rects)
    assert "25 ms" in svg  # rank 0: 100 ms over 4 steps


def test_utilization_chart_breaks_at_missing_samples() -> None:
    pts = [{"t_s": float(t), "gpu": 0, "gpu_util_pct": u} for t, u in enumerate([10.0, 20.0, None, 30.0, 40.0])]
    page = render(report([rank(0)], extra={"samples": {"timeline": pts}}), "html")
    assert page.count("<polyline") == 2  # two runs around the N/A sample
    assert "1 sample(s) had no utilization value (N/A)" in page


def test_short_run_draws_its_one_bin_as_a_line_over_its_time() -> None:
    # One bin of 0.5 s per GPU: a level line from 0 to 500 ms, not a dot on a "0.0 s" axis.
    pts = [{"t_s": 0.0, "end_s": 0.5, "gpu": g, "gpu_util_pct": 68.0} for g in (0, 1)]
    page = render(report([rank(0)], extra={"samples": {"timeline": pts}}), "html")
    lines = re.findall(r'points="([^"]+)"', page)
    assert len(lines) == 2 and all(pl.split() == ["0.00,32.00", "1000.00,32.00"] for pl in lines)
    assert "<circle" not in page.split("GPUs over the run")[1]
    assert "500 ms" in page


def test_one_instant_is_a_sentence_not_a_chart() -> None:
    pts = [{"t_s": 0.0, "gpu": 0, "gpu_util_pct": 42.0}]
    page = render(report([rank(0)], extra={"samples": {"timeline": pts}}), "html")
    assert "One utilization sample per GPU" in page and "GPU 0: 42%" in page
    assert "<polyline" not in page


def test_no_utilization_section_without_samples() -> None:
    assert "GPU utilization" not in render(report([rank(0)]), "html")


def test_many_ranks_all_in_table() -> None:
    page = render(report([rank(i) for i in range(128)]), "html")
    assert page.count("<tr><td>") >= 128 + 10
    assert "All 128 ranks" in page


def test_cpu_only() -> None:
    page = render(report([rank(0, window_ms=0, steps=0, extra={"note": "CPU-only trace"})]), "html")
    assert "nothing to analyze: CPU-only trace" in page
    assert "<svg" not in page
