"""The HTML report in a real browser (headless Chromium): it renders, logs nothing to the
console, and a trace string full of markup shows as text and never runs. A multi-rank, a
pipeline and a ``gpuprof run`` session report are opened at 700 and 1280 px: every chart
has a size, nothing makes the page scroll sideways, and a screenshot is taken of each
(kept in ``$GPUPROF_SCREENSHOTS`` when set, e.g. as CI artifacts).

Skips where Chromium is not installed (``apt-get install chromium``; CI's .ci/run installs it).
A control page with the same payload left unescaped proves the detectors would notice.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from analyzed import analysis_of, report_of
from reportfactory import rank, rec, report

from gpuprof.model.report import Cause, Recommendation
from gpuprof.render import render

CHROMIUM = Path("/usr/bin/chromium")

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason=f"{CHROMIUM} not found: install Debian's chromium package to run the browser test"
)

# If any of this ran, the title would change or an element would appear in the DOM.
PAYLOAD = (
    "<script>document.title='PWNED';document.body.setAttribute('data-pwned','1')</script>"
    "<img src=x id=injected onerror=\"document.title='PWNED'\">"
)


class _Dom(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.title = ""
        self.text: list[str] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self._stack: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        while self._stack and self._stack.pop() != tag:
            pass

    def handle_data(self, data: str) -> None:
        current = self._stack[-1] if self._stack else ""
        if current == "title" and "head" in self._stack:  # not the tooltips of SVG shapes
            self.title += data
        elif current != "script":
            self.text.append(data)


def _chromium(page: Path, profile: Path) -> tuple[_Dom, list[str]]:
    """The DOM after load (scripts had their chance to run) and the console lines."""
    cmd = [
        str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
        f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", "--virtual-time-budget=2000",
        "--dump-dom", page.resolve().as_uri(),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = _Dom()
    dom.feed(proc.stdout)
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    return dom, console


@pytest.fixture
def browse(tmp_path: Path) -> Callable[[str], tuple[_Dom, list[str]]]:
    counter = iter(range(100))

    def run(html: str) -> tuple[_Dom, list[str]]:
        n = next(counter)
        page = tmp_path / f"page{n}.html"
        page.write_text(html, encoding="utf-8")
        return _chromium(page, tmp_path / f"profile{n}")

    return run


def _attack_report(shared: Path | None) -> Any:
    """A report whose kernel names, devices, findings and warnings all carry the payload."""
    evidence = (f"kernel {PAYLOAD} took 40% of the step", "</script>" + PAYLOAD)
    attack = Recommendation(
        id="xss", category=Cause.HOST, title="Fuse " + PAYLOAD, estimated_savings_pct=99.0,
        ranks=(0,), evidence=evidence, actions=(PAYLOAD,),
    )  # fmt: skip
    base = report(
        [rank(0, lost_ms={"dataloader": 30, "host": 10}, device=PAYLOAD), rank(1, lost_ms={"communication": 12})],
        [rec("dataloader", 25.0)],
        warnings=(PAYLOAD,),
        extra={"job": {"note": PAYLOAD}, "samples": {"timeline": [{"t_s": 0.0, "gpu": PAYLOAD, "gpu_util_pct": 10.0},
                                                                   {"t_s": 1.0, "gpu": PAYLOAD, "gpu_util_pct": 90.0}]}},
    )  # fmt: skip
    return dataclasses.replace(base, recommendations=(attack, *base.recommendations))


def test_control_page_proves_the_detectors_work(browse: Callable[[str], tuple[_Dom, list[str]]]) -> None:
    unsafe = f"<!DOCTYPE html><html><head><title>gpuprof report</title></head><body>{PAYLOAD}" \
             "<script>throw new Error('boom')</script></body></html>"  # fmt: skip
    dom, console = browse(unsafe)
    assert dom.title == "PWNED"
    assert any(t == "img" and a.get("id") == "injected" for t, a in dom.tags)
    assert any("boom" in line for line in console)


def test_report_renders_without_console_errors_and_payload_stays_text(
    browse: Callable[[str], tuple[_Dom, list[str]]],
) -> None:
    dom, console = browse(render(_attack_report(None), "html"))
    assert console == []  # not even a CSP refusal: nothing tried to run
    assert dom.title == "gpuprof report"
    assert not any(t == "img" for t, _ in dom.tags)
    assert not any("data-pwned" in a for _, a in dom.tags)
    assert [a for t, a in dom.tags if t == "script"] == [{"type": "application/json", "id": "gpuprof-report"}]
    text = "".join(dom.text)
    assert f"kernel {PAYLOAD} took 40% of the step" in text  # shown, as text, exactly
    assert "Fuse " + PAYLOAD in text
    # The page really rendered: headings, the per-rank chart and both ranks' rows.
    assert "What to change" in text and "Where each rank" in text
    assert sum(1 for t, _ in dom.tags if t == "rect") >= 5
    assert sum(1 for t, _ in dom.tags if t == "polyline") == 1


def test_real_trace_report_in_browser(browse: Callable[[str], tuple[_Dom, list[str]]], shared_traces: Path) -> None:
    rep = analysis_of(shared_traces / "resnet50-nw0").report  # analyze_paths, once per session
    dom, console = browse(render(rep, "html"))
    assert console == []
    assert dom.title == "gpuprof report"
    text = "".join(dom.text)
    assert "lost: dataloader" in text
    for r in rep.recommendations:
        assert r.title in text


# --- the three kinds of report, at two window widths -----------------------------------------

WIDTHS = (700, 1280)
SHOT_HEIGHT = 8000  # tall enough for the whole page; layout does not depend on the height
NONCE = "gpuprof-measure"
# Runs after load in a copy of the page whose CSP admits this one script: what a person at
# this width would see, measured by the browser's own layout.
MEASURE = """addEventListener('load', () => {
  const hidden = el => !!el.closest('details:not([open])');
  const charts = [...document.querySelectorAll('svg')].filter(s => !hidden(s)).map(s => {
    const r = s.getBoundingClientRect();
    return {label: s.getAttribute('aria-label') || s.getAttribute('class') || '', w: r.width, h: r.height};
  });
  // Boxes past the window's edge, and boxes whose content spills out of them (text wider
  // than its card): both end in sideways scrolling or text over its neighbours.
  const wide = [...document.body.querySelectorAll('*')]
    .filter(el => !hidden(el) && !el.closest('.scroll') && !el.closest('svg'))
    .filter(el => el.getBoundingClientRect().right > innerWidth + 0.5
                  || (el.scrollWidth > el.clientWidth + 1 && el.clientWidth > 0 && getComputedStyle(el).overflowX === 'visible'))
    .map(el => el.tagName.toLowerCase() + '.' + (el.getAttribute('class') || '') + ': ' + (el.textContent || '').slice(0, 40));
  document.body.setAttribute('data-measure', JSON.stringify({
    innerWidth, scrollWidth: document.documentElement.scrollWidth, charts, wide: wide.slice(0, 10)}));
});"""


def _measure_copy(page: str) -> str:
    """The page with one measuring script admitted by a nonce; any other script stays blocked
    (and would be logged as a console error)."""
    assert "script-src 'none'" in page
    page = page.replace("script-src 'none'", f"script-src 'nonce-{NONCE}'")
    return page.replace("</body>", f'<script nonce="{NONCE}">{MEASURE}</script></body>')


def _open_at(page: Path, width: int, shot: Path, profile: Path) -> subprocess.Popen[str]:
    cmd = [
        str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions", "--hide-scrollbars",
        f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", "--virtual-time-budget=3000",
        f"--window-size={width},{SHOT_HEIGHT}", f"--screenshot={shot}", "--dump-dom", page.resolve().as_uri(),
    ]  # fmt: skip
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


class _Body(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.measure: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "body":
            self.measure = dict(attrs).get("data-measure")


def _simulated_reports(tmp: Path) -> dict[str, Any]:
    """A multi-rank job, a pipeline and a ``gpuprof run`` session, as their users would
    render them: simulated, analyzed, then the HTML report."""
    from gpuprof.cli.run import session_report
    from gpuprof.pipeline import analyze_paths
    from gpuprof.simulate import generate

    out: dict[str, Any] = {}
    for name, scenario, knobs in (
        ("multi-rank", "straggler", {}),
        ("pipeline", "pipeline", {"stages": 4, "microbatches": 8}),
        ("session", "rl_post_training", {}),
    ):
        path = generate(scenario, tmp / name, seed=0, whatifs=False, **knobs)
        out[name] = session_report(path) if name == "session" else analyze_paths([path])
    return out


def test_three_kinds_of_report_at_two_widths(tmp_path: Path) -> None:
    reports = _simulated_reports(tmp_path / "sim")
    keep = os.environ.get("GPUPROF_SCREENSHOTS")  # a folder to keep the screenshots in (CI artifacts)
    for name, rep in reports.items():
        page = render(rep, "html")
        if name == "session":
            assert "GPUs over the run" in page and rep.extra.get("samples")
        if name == "pipeline":
            assert "stage 3 · rank 3" in page
        path = tmp_path / f"{name}.html"
        path.write_text(_measure_copy(page), encoding="utf-8")
        runs = {
            w: (_open_at(path, w, tmp_path / f"{name}-{w}.png", tmp_path / f"profile-{name}-{w}"), tmp_path / f"{name}-{w}.png")
            for w in WIDTHS
        }
        for width, (proc, shot) in runs.items():
            stdout, stderr = proc.communicate(timeout=120)
            assert proc.returncode == 0, stderr[-2000:]
            console = [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
            assert console == [], (name, width, console)
            body = _Body()
            body.feed(stdout)
            assert body.measure is not None, f"{name} at {width} px: the measuring script did not run"
            m = json.loads(body.measure)
            assert m["innerWidth"] == width
            assert m["scrollWidth"] <= width, (name, width, m["wide"])  # no sideways scrolling
            assert m["wide"] == [], (name, width)
            assert len(m["charts"]) >= 10, (name, width)  # timeline, steps, bars, axes...
            empty = [c for c in m["charts"] if c["w"] < 1 or c["h"] < 1]
            assert empty == [], (name, width, empty)
            assert shot.stat().st_size > 10_000  # a real picture, not a blank page
            if keep:
                Path(keep).mkdir(parents=True, exist_ok=True)
                shutil.copy(shot, Path(keep) / shot.name)


# --- the timeline answers "what is this?", and "slowest" means one rank -----------------------

TIMELINE_PROBE = """addEventListener('load', () => {
  const lanes = [...document.querySelectorAll('#timeline .rows svg[role=img]')];
  const segments = lanes.flatMap(svg => [...svg.querySelectorAll(':scope > rect')]);
  const untitled = segments.filter(r => !(r.querySelector('title') && r.querySelector('title').textContent.trim()));
  const tagged = [...document.querySelectorAll('#timeline .tag')].filter(t => t.textContent === 'longest step')
    .map(t => t.parentElement.textContent.replace('longest step', '').trim());
  const cards = [...document.querySelectorAll('.card .k')].map(k => k.textContent).filter(t => t.includes('longest of any rank'));
  document.body.setAttribute('data-probe', JSON.stringify({
    segments: segments.length, untitled: untitled.length,
    titles: segments.slice(0, 3).map(r => r.querySelector('title').textContent),
    tagged, cards, crit: document.querySelectorAll('#timeline g.crit').length}));
});"""


class _Probe(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.data: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "body":
            self.data = dict(attrs).get("data-probe")


@pytest.mark.parametrize("trace", ["dlrm-8rank", "megatron-pp4-timeline", "resnet50-nw0"])
def test_every_timeline_segment_has_a_title_and_one_rank_has_the_longest_step(
    trace: str, shared_traces: Path, tmp_path: Path
) -> None:
    from gpuprof.render.figures import slowest_rank

    rep = report_of(shared_traces / trace)  # gpuprof.analyze, once per session
    page = render(rep, "html").replace("script-src 'none'", f"script-src 'nonce-{NONCE}'")
    page = page.replace("</body>", f'<script nonce="{NONCE}">{TIMELINE_PROBE}</script></body>')
    path = tmp_path / "page.html"
    path.write_text(page, encoding="utf-8")
    proc = _open_at(path, 1280, tmp_path / "shot.png", tmp_path / "profile")
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr[-2000:]
    probe = _Probe()
    probe.feed(stdout)
    assert probe.data is not None, "the probe did not run"
    got = json.loads(probe.data)
    assert got["segments"] > 10 and got["untitled"] == 0, got
    # Each title says what the segment is and how long it lasts.
    assert all(re.match(r"^[a-z_]+ · [\d.,]+ (µs|ms|s)( · .+)? · rank \d+, from ", t) for t in got["titles"]), got["titles"]
    slow = slowest_rank(rep)
    if len([r for r in rep.ranks if r.window_us > 0]) > 1:
        # One rank has the longest step: the timeline's tag and the step-time card name the same one.
        assert len(got["tagged"]) == 1 and got["tagged"][0].endswith(f"rank {slow}"), got
        assert got["cards"] == [f"mean step of rank {slow}, the longest of any rank"], got
    else:
        assert got["tagged"] == [] and got["cards"] == [], got
