"""Numbers a reader can trust (issue 21, sections 1 and 2), on every sample and shared trace.

Each report is rendered as text (as in a CI log, unwrapped), Markdown and HTML, and these
hold in all three:

- one step value: every place that states the job's step (the headline, each replayed
  fix's "step X -> Y", the replay's "X measured", the combined line) says the same value;
- the combined line's words follow its numbers (less / more / about the sum of the
  recommendations it names, which are the replayed ones, by their place in the ranking);
- no evidence line, caveat or warning is said twice; "one profiled step" at most once;
- no recommendation id, what-if id or source path in the prose;
- off a terminal no line is wrapped;
- the text bugs of the issue do not occur ("not measurable: not measurable:", "58-58%",
  "ranks 0", "ranks all", "1 call of 36 launches each", "1.1 ms against 1.1 ms", "39 %",
  "-0.0").
"""

from __future__ import annotations

import html as htmllib
import re
from functools import cache
from pathlib import Path

import pytest
from conftest import SHARED_TRACES

from gpuprof.job.whatifs import WHATIFS
from gpuprof.model import figures as fg
from gpuprof.model import sample_figures as sf
from gpuprof.model.report import Report
from gpuprof.model.run_figures import run_view
from gpuprof.render import render
from gpuprof.render.findings import findings_context, job_blocks
from gpuprof.render.text import render_text

ROOT = Path(__file__).resolve().parents[1]


def _folders() -> list[Path]:
    out = [p for p in sorted((ROOT / "sample_traces").iterdir()) if p.is_dir()]
    if SHARED_TRACES.is_dir():
        out += [p for p in sorted(SHARED_TRACES.iterdir()) if p.is_dir() and p.name != "LICENSES"]
    return out


FOLDERS = _folders()
IDS = [f"{p.parent.name}/{p.name}" for p in FOLDERS]


@cache
def _report(folder: str) -> Report:
    from gpuprof.api import analyze

    return analyze(Path(folder))


@cache
def _texts(folder: str) -> dict[str, str]:
    r = _report(folder)
    page = render(r, "html").split('<script type="application/json"')[0]
    visible = htmllib.unescape(re.sub(r"<[^>]+>", "\n", page))
    return {"text": render_text(r, 100, wrap=False), "markdown": render(r, "markdown"), "html": visible}


DURATION = r"[\d.,]+ (?:µs|ms|s)"


@pytest.mark.parametrize("folder", FOLDERS, ids=IDS)
def test_one_step_value(folder: Path) -> None:
    r = _report(str(folder))
    step = fg.job_step_time_us(r)
    job = r.extra.get("job") or {}
    measured = (job.get("whatif") or {}).get("measured_step_us")
    if measured is not None and step is not None:
        # The headline's statistic is the replay's: the same step, to the microsecond.
        assert abs(measured - step) <= 1e-3 * step, (measured, step)
    for fmt, text in _texts(str(folder)).items():
        values = set(re.findall(rf"mean step ({DURATION})", text))
        values |= set(re.findall(rf"\b(?:its step|step|the window|window) ({DURATION}) ->", text))
        values |= set(re.findall(rf"against ({DURATION}) measured", text))
        values |= set(re.findall(rf"gives its measured step, ({DURATION})", text))
        assert len(values) <= 1, (fmt, values)
        if values and step is not None:
            assert values == {fg.fmt_duration(step)}, (fmt, values)


@pytest.mark.parametrize("folder", FOLDERS, ids=IDS)
def test_combined_wording_follows_the_numbers(folder: Path) -> None:
    r = _report(str(folder))
    line = fg.combined_line(r)
    replayed = [i for i, rec in enumerate(r.recommendations, 1) if rec.whatif]
    if line is None:
        return
    m = re.match(r"(All (\d+) recommendations|Recommendations ([\d, and]+)) replayed together: .*?, ([\d.]+)% saved, "
                 r"(less than|more than|about) the ([\d.]+)% they save one by one: ", line)
    assert m, line
    named = list(range(1, int(m.group(2)) + 1)) if m.group(2) else [int(x) for x in re.findall(r"\d+", m.group(3))]
    assert named == replayed, (named, replayed)
    combined, relation, total = float(m.group(4)), m.group(5), float(m.group(6))
    by_whatif: dict[str, float] = {}
    for rec in r.recommendations:
        if rec.whatif:
            by_whatif[rec.whatif] = max(by_whatif.get(rec.whatif, 0.0), rec.estimated_savings_pct)
    assert abs(total - sum(by_whatif.values())) <= 0.051
    if relation == "less than":
        assert combined < total
    elif relation == "more than":
        assert combined > total
    else:
        assert abs(combined - total) <= 0.55
    for text in _texts(str(folder)).values():
        assert line in text or htmllib.escape(line) in text or line.replace("*", "") in text.replace("\\", "")


@pytest.mark.parametrize("folder", FOLDERS, ids=IDS)
def test_each_thing_is_said_once(folder: Path) -> None:
    r = _report(str(folder))
    evidence = [x for rec in r.recommendations for x in rec.evidence]
    assert len(evidence) == len(set(evidence)), [x for x in evidence if evidence.count(x) > 1]
    shown = fg.shown_warnings(r)
    caveats = {c for rec in r.recommendations for c in rec.caveats} | set(fg.report_caveats(r))
    for text in _texts(str(folder)).values():
        assert text.lower().count("one profiled step") <= 1
        assert text.count("act partly on the same idle time") <= 1
    for w in shown:
        assert w not in caveats
    for rec in r.recommendations:
        assert len(rec.caveats) == len(set(rec.caveats))


@pytest.mark.parametrize("folder", FOLDERS, ids=IDS)
def test_no_internal_id_or_source_path_in_prose(folder: Path) -> None:
    r = _report(str(folder))
    ids = {rec.id for rec in r.recommendations} | {h["id"] for h in r.extra.get("held_back") or []}
    for fmt, text in _texts(str(folder)).items():
        assert "gpuprof/" not in text and ".py" not in text.replace("py-spy", ""), fmt
        for name in ids | set(WHATIFS):
            assert not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text), (fmt, name)


@pytest.mark.parametrize("folder", FOLDERS, ids=IDS)
def test_nothing_is_wrapped_off_a_terminal(folder: Path) -> None:
    r = _report(str(folder))
    text = _texts(str(folder))["text"]
    # A wrapped bullet or table cell continues on a line of spaces and then words.
    continued = [ln for ln in text.splitlines() if re.match(r"^ {5,}[A-Za-z(]", ln) and "% of window" not in ln]
    assert continued == []
    bullets = [ln for ln in text.splitlines() if ln.startswith(("   - ", "   > "))]
    shown = r.recommendations[:5]
    expected = sum(len(rec.evidence) + len(rec.actions) for rec in shown)
    cpu = fg.cpu_only_summary(r)
    expected += len(cpu.lines) if cpu else 0
    sentences = [x for b in job_blocks(r.extra.get("job"), findings_context(r)) for x in b.sentences]
    expected += len(sentences) + len(sf.sample_notes(r))
    run = run_view(r)  # a session's whole run: its sentences and phases (its windows go by number)
    expected += len(run.sentences) + len(run.phases) if run is not None and not run.empty else 0
    assert len(bullets) == expected


TEXT_BUGS = {
    "a reason said twice": r"not measurable: not measurable",
    "a range of one value": r"\b(\d+)-\1%",
    "one rank called ranks": r"\branks (?:all|\d+)(?![\d,\-]| and| or)",
    "a count of one with 'each'": r"\b1 call\w* of \d+ launches each",
    "two durations that read the same": rf"({DURATION}) against \1",
    "a space before %": r"\d %",
    "a negative zero": r"-0\.0(?!\d)",
    "all of one": r"\b[Aa]ll 1 ",
}


@pytest.mark.parametrize("folder", FOLDERS, ids=IDS)
def test_the_issues_text_bugs_do_not_occur(folder: Path) -> None:
    for fmt, text in _texts(str(folder)).items():
        for what, pattern in TEXT_BUGS.items():
            found = re.search(pattern, text)
            assert found is None, (fmt, what, text[max(0, found.start() - 80) : found.end() + 40])
