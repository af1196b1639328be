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

And (issue 29, item 4), also on simulated jobs and in the JSON:

- a fix saves no more than the idle time it acts on: a fix that keeps the compute leaves
  the job's step no shorter than any rank's compute per step;
- one number per what-if: a recommendation carrying a what-if states its number (or has it
  as an end of its range, said so), the prose states no other number for it, and no line
  says "no recommendation acts on" a cause a recommendation acts on;
- one name per rank role, with its meaning said in the same format ("slowest" is no role);
- no section without content: a report of one rank has no cross-rank findings;
- an upper bound is written with ``≤``, never as ``~X% (between Y% and X%)``.
"""

from __future__ import annotations

import html as htmllib
import re
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from analyzed import report_of
from conftest import SHARED_TRACES

from gpuprof.job.floor import CHANGES_COMPUTE
from gpuprof.job.whatifs import WHATIFS
from gpuprof.model.report import Report
from gpuprof.render import figures as fg
from gpuprof.render import render
from gpuprof.render import sample_figures as sf
from gpuprof.render.findings import findings_context, job_blocks
from gpuprof.render.run_figures import run_view
from gpuprof.render.text import render_text
from gpuprof.simulate import generate
from gpuprof.simulate.scenarios import SCENARIOS

ROOT = Path(__file__).resolve().parents[2]


# Simulated jobs beside the samples: every scenario at its defaults, and the two other ways
# the simulator writes a job (ROCm names, a Megatron timer timeline). Generated on first use.
SIMULATED: dict[str, dict[str, Any]] = {name: {} for name in SCENARIOS} | {
    "pipeline-rocm": {"scenario": "pipeline", "platform": "rocm"},
    "pipeline-megatron": {"scenario": "pipeline", "layout": "megatron"},
}
_SIM_ROOT = tempfile.TemporaryDirectory(prefix="gpuprof-invariants-")


def _folders() -> list[Path]:
    out = [p for p in sorted((ROOT / "sample_traces").iterdir()) if p.is_dir()]
    if SHARED_TRACES.is_dir():
        out += [p for p in sorted(SHARED_TRACES.iterdir()) if p.is_dir() and p.name != "LICENSES"]
    return out + [Path("simulated") / name for name in SIMULATED]


FOLDERS = _folders()
IDS = [f"{p.parent.name}/{p.name}" for p in FOLDERS]


@cache
def _report(folder: str) -> Report:
    path = Path(folder)
    if path.parent == Path("simulated"):
        knobs = dict(SIMULATED[path.name])
        scenario = knobs.pop("scenario", path.name)
        path = generate(scenario, Path(_SIM_ROOT.name) / path.name, whatifs=False, **knobs)
    return report_of(path)  # the samples' and shared traces' reports: once per session


@cache
def _texts(folder: str) -> dict[str, str]:
    r = _report(folder)
    page = render(r, "html").split('<script type="application/json"')[0]
    visible = htmllib.unescape(re.sub(r"<[^>]+>", "\n", page))
    return {"text": render_text(r, 100, wrap=False), "markdown": render(r, "markdown"), "html": visible}


@cache
def _all_texts(folder: str) -> dict[str, str]:
    """The three prose formats and the JSON document."""
    return {**_texts(folder), "json": render(_report(folder), "json")}


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
        # The report names its inputs, and a clone's folder is called "gpuprof": a path the
        # user gave is no source path. Anything else under a gpuprof/ folder, or any .py, is.
        for name in sorted(r.inputs, key=len, reverse=True):
            text = text.replace(name, "<input>")
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


# -- issue 29, item 4 ----------------------------------------------------------------------

# Causes whose fixes keep the compute (the straggler and pipeline fixes move or even it out).
KEEPS_COMPUTE = {"memory", "dataloader", "sync", "host", "communication", "other"}


def _headroom_pct(r: Report) -> float | None:
    """The most a fix that keeps the compute can save: the job's step down to the largest
    compute per step of any rank, percent of the step."""
    step = fg.job_step_time_us(r)
    ranks = [x for x in r.ranks if fg.has_data(x)]
    if step is None or step <= 0 or not ranks:
        return None
    busy = max(x.compute_us / max(x.steps, 1) for x in ranks)
    return max(0.0, 100.0 * (step - busy) / step)


@pytest.mark.parametrize("folder", FOLDERS, ids=IDS)
def test_a_fix_saves_no_more_than_the_idle_time_it_acts_on(folder: Path) -> None:
    r = _report(str(folder))
    room = _headroom_pct(r)
    if room is None:
        return
    for i, rec in enumerate(r.recommendations, 1):
        if rec.category.value in KEEPS_COMPUTE and (rec.whatif or "") not in CHANGES_COMPUTE:
            assert rec.estimated_savings_pct <= room + 0.1, (i, rec.id, rec.estimated_savings_pct, room)
    savings = ((r.extra.get("job") or {}).get("whatif") or {}).get("savings_pct") or {}
    for name, pct in savings.items():
        if name not in CHANGES_COMPUTE:
            assert pct <= room + 0.1, (name, pct, room)
    combined = (r.extra.get("job") or {}).get("combined_savings_pct")
    if combined is not None and not any(rec.whatif in CHANGES_COMPUTE or rec.category.value not in KEEPS_COMPUTE
                                        for rec in r.recommendations):
        assert combined <= room + 0.1, (combined, room)


@pytest.mark.parametrize("folder", FOLDERS, ids=IDS)
def test_one_number_per_whatif(folder: Path) -> None:
    from gpuprof.render.jsontables import humanize

    r = _report(str(folder))
    savings = ((r.extra.get("job") or {}).get("whatif") or {}).get("savings_pct") or {}
    for i, rec in enumerate(r.recommendations, 1):
        if rec.whatif and rec.whatif in savings:
            mine = f"{savings[rec.whatif]:.1f}"
            ends = {f"{x:.1f}" for x in (rec.savings_low_pct, rec.savings_high_pct) if x is not None}
            # A range over what one trace cannot show (the DataLoader fix over the host's free
            # cores) holds the what-if's replay inside it, and says it.
            inside = (
                rec.savings_low_pct is not None
                and rec.savings_high_pct is not None
                and rec.savings_low_pct <= savings[rec.whatif] <= rec.savings_high_pct
                and any(f"{mine}% saved" in line for line in rec.evidence)
            )
            assert f"{rec.estimated_savings_pct:.1f}" == mine or mine in ends or inside, (i, rec.id, rec.whatif, mine)
    acting = {rec.category.value for rec in r.recommendations if rec.estimated_savings_pct > 0}
    for fmt, text in _texts(str(folder)).items():
        for name, pct in savings.items():
            said = set(re.findall(rf"(?<![\w-]){re.escape(humanize(name))} (\d+\.\d)%", text))
            assert said <= {f"{pct:.1f}"}, (fmt, name, said, pct)
        for cause in acting:
            assert f"no recommendation acts on it: {cause} holds" not in text, (fmt, cause)


@pytest.mark.parametrize("folder", FOLDERS, ids=IDS)
def test_one_name_per_rank_role_defined_where_it_is_used(folder: Path) -> None:
    for fmt, text in _texts(str(folder)).items():
        assert not re.search(r"of rank \d+, the slowest|\bslowest: |the slowest,", text), fmt
        for role, meaning in fg.ROLES.items():
            named = re.search(rf"\bthe {re.escape(role)}\b|\bThe {re.escape(role)}\b|\({re.escape(role)}\)", text)
            if named:
                assert meaning in text, (fmt, role)


CROSS_RANK_WORDS = ("Across ranks", "last to arrive", "lock offset", "collectives were matched", "the pace-setter")


@pytest.mark.parametrize("folder", FOLDERS, ids=IDS)
def test_one_rank_reports_have_no_cross_rank_sections(folder: Path) -> None:
    r = _report(str(folder))
    if sum(1 for x in r.ranks if fg.has_data(x)) > 1:
        return
    for fmt, text in _texts(str(folder)).items():
        for words in CROSS_RANK_WORDS:
            assert words not in text, (fmt, words)


@pytest.mark.parametrize("folder", FOLDERS, ids=IDS)
def test_an_upper_bound_is_written_with_le(folder: Path) -> None:
    r = _report(str(folder))
    for rec in r.recommendations:
        low, high = rec.savings_low_pct, rec.savings_high_pct
        if low is not None and high is not None and f"{rec.estimated_savings_pct:.1f}" == f"{high:.1f}" != f"{low:.1f}":
            assert rec.savings_bound == "upper", rec.id
    for fmt, text in _texts(str(folder)).items():
        for est, low, high in re.findall(r"~([\d.]+)%[^·\n]*?between ([\d.]+)% and ([\d.]+)%", text):
            assert est not in (low, high), (fmt, est, low, high)
        for est, end in re.findall(r"[≤≥]([\d.]+)%[^·\n]*?at (?:least|most) ([\d.]+)%", text):
            assert est != end, (fmt, est, end)
