"""Line wrapping (issue 21, section 4): off a terminal nothing wraps (a CI log keeps each
finding, FAIL line and table row whole); on a terminal gpuprof's own lines wrap on word
boundaries with a hanging indent; ``--help`` shows every default whole."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from clirun import run_cli
from reportfactory import rank, report

from gpuprof.cli.console import say, wrap_line
from gpuprof.model.report import report_to_dict
from gpuprof.render import render

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
LONG_NAME = "a_very_long_kernel_name_" * 3


class _Terminal(io.StringIO):
    """A stream that says it is a terminal (of unknown size: 100 columns)."""

    def isatty(self) -> bool:
        return True


def test_check_fail_lines_stay_whole_off_a_terminal(tmp_path: Path) -> None:
    base, worse = tmp_path / "base.json", tmp_path / "worse.json"
    base.write_text(json.dumps(report_to_dict(report([rank(0, lost_ms={"host": 1})]))))
    worse.write_text(json.dumps(report_to_dict(report([rank(0, lost_ms={"dataloader": 40, "sync": 30})]))))
    got = run_cli("check", str(worse), "--baseline", str(base), "--tolerance-pct", "5")  # the share checks
    assert got.code == 1, got.stderr
    fails = [ln for ln in got.stdout.splitlines() if ln.lstrip().startswith("FAIL ")]
    assert len(fails) >= 2
    for line in fails:
        # Each FAIL line carries its measured and allowed value and the baseline's on one line.
        assert re.search(r"\d+\.\d% [<>] \w+ \d+\.\d% \(baseline \d+\.\d%, [+-]\d+\.\d pp\)$", line), line
    assert max(len(ln) for ln in fails) > 100  # nothing was folded at 100 columns


def test_the_per_rank_table_is_not_folded_off_a_terminal() -> None:
    r = report([rank(i, lost_ms={"pipeline_bubble": 30, "straggler": 10, "communication": 5}) for i in range(3)])
    text = render(r, "text", 100)
    rows = [ln for ln in text.splitlines() if re.match(r"\s+\d\s+\d+\s+[\d,.]+\s+[\d,.]+\s+[\d.]+%", ln)]
    assert len(rows) == 3
    # The largest causes of a rank stay on its row, never on an indented line of their own.
    assert all("communication" in ln for ln in rows), rows


def test_gpuprofs_own_lines_wrap_on_words_with_a_hanging_indent_on_a_terminal() -> None:
    text = ("session saved in gpuprof-sessions/20260101-120000-train (report in gpuprof-sessions/20260101-120000-train/"
            "report.html; gpuprof analyze gpuprof-sessions/20260101-120000-train) " + "and more words " * 8)
    term = _Terminal()
    say(text, term)
    lines = term.getvalue().rstrip("\n").splitlines()
    assert len(lines) > 1 and all(len(ln) <= 100 or " " not in ln.strip() for ln in lines)
    assert lines[0].startswith("gpuprof: ") and all(ln.startswith(" " * 9) for ln in lines[1:])
    assert " ".join(ln.strip() for ln in lines) == "gpuprof: " + " ".join(text.split())  # no word broken
    plain = io.StringIO()
    say(text, plain)
    assert plain.getvalue() == "gpuprof: " + text + "\n"  # a pipe or a log: one line
    assert wrap_line("x " * 5, 20) == "gpuprof: x x x x x"


@pytest.mark.parametrize("command", ["run", "analyze", "check", "diff", "annotate", "simulate", "schema"])
def test_help_shows_every_default_whole_at_80_columns(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    got = run_cli(command, "--help")
    assert got.code == 0, got.stderr
    assert "…" not in got.stdout, [ln for ln in got.stdout.splitlines() if "…" in ln]
    if command == "run":
        flat = " ".join(got.stdout.replace("│", " ").split())
        assert "[default: a new DATE-TIME-COMMAND folder in ./gpuprof-sessions]" in flat


def test_simulate_list_gives_each_description_whole() -> None:
    from gpuprof.cli.simulate import _list_text, _summary
    from gpuprof.simulate import KNOB_HELP, SCENARIOS, knobs_of

    text = _list_text()
    for name, fn in SCENARIOS.items():
        line = next(ln for ln in text.splitlines() if ln.startswith(f"{name}: "))
        assert line == f"{name}: {_summary(fn)}"
        assert line.rstrip().endswith((".", ")")), line  # a whole sentence, not cut at the docstring's line end
        for knob in knobs_of(name):
            assert KNOB_HELP.get(knob), f"{name}: knob {knob} has no description"
    wrapped = _list_text(80)
    assert max(len(ln) for ln in wrapped.splitlines()) <= 80
    assert " ".join(wrapped.split()) == " ".join(text.split())  # the same words, only folded
