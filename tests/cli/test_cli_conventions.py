"""Command-line conventions: colour, wrapping, one duration style, diff formats, "did you
mean", help without type placeholders, shell completion, progress."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from clirun import run_cli
from reportfactory import rank, rec, report

from gpuprof.cli.console import ColorMode, ReadProgress, use_color
from gpuprof.model.report import report_to_dict
from gpuprof.render.text import render_text

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
COMMANDS = ("analyze", "run", "check", "diff", "annotate", "simulate")
LONG = "the other ranks waited " + "and waited " * 30 + "at every all-reduce"

ANSI = re.compile(r"\x1b\[[0-9;]*m")


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _saved(tmp_path: Path, name: str = "r.json", **kw: object) -> Path:
    rep = report([rank(0, lost_ms={"dataloader": 30})], [rec("dataloader", 25.0, evidence=(LONG,))], **kw)  # type: ignore[arg-type]
    path = tmp_path / name
    path.write_text(json.dumps(report_to_dict(rep)))
    return path


# --- colour ----------------------------------------------------------------------------------


def test_color_auto_follows_the_terminal_and_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    assert use_color(ColorMode.auto, _Tty()) is True
    assert use_color(ColorMode.auto, io.StringIO()) is False  # a pipe or a file
    monkeypatch.setenv("NO_COLOR", "1")
    assert use_color(ColorMode.auto, _Tty()) is False
    assert use_color(ColorMode.always, io.StringIO()) is True  # an explicit option wins
    monkeypatch.delenv("NO_COLOR")
    monkeypatch.setenv("TERM", "dumb")
    assert use_color(ColorMode.auto, _Tty()) is False
    assert use_color(ColorMode.never, _Tty()) is False


def test_color_option_on_the_command_line(tmp_path: Path) -> None:
    saved = str(_saved(tmp_path))
    assert ANSI.search(run_cli("analyze", saved, "--color", "always").stdout)
    assert not ANSI.search(run_cli("analyze", saved, "--color", "never").stdout)
    assert not ANSI.search(run_cli("analyze", saved).stdout)  # auto, and stdout is not a terminal
    bad = run_cli("analyze", saved, "--color", "sometimes")
    assert bad.code == 2 and len(bad.stderr_lines) == 1 and "--color" in bad.stderr


# --- wrapping and units ----------------------------------------------------------------------


def test_no_hard_wrap_inside_a_finding_when_not_a_terminal(tmp_path: Path) -> None:
    out = run_cli("analyze", str(_saved(tmp_path))).stdout
    assert any(line.strip() == f"- {LONG}" for line in out.splitlines())
    # On a terminal the same finding wraps under its bullet, to the width.
    wrapped = render_text(report([rank(0)], [rec("host", 3.0, evidence=(LONG,))]), 80, wrap=True)
    assert max(len(line) for line in wrapped.splitlines()) <= 80
    assert LONG not in wrapped


def test_one_duration_style_in_every_text_report() -> None:
    from gpuprof.pipeline import analyze_paths
    from gpuprof.render import render

    rep = analyze_paths([SAMPLES / "straggler"])
    for fmt in ("text", "markdown", "html"):
        text = render(rep, fmt)
        assert not re.search(r"\d us\b", text), fmt
    evidence = [e for r in rep.recommendations for e in r.evidence]
    assert evidence and not any(re.search(r"\d us\b", e) for e in evidence)


def test_text_on_a_legacy_terminal_writes_us_instead_of_failing() -> None:
    from gpuprof.cli.streams import printable

    class Latin(io.StringIO):
        encoding = "ascii"

    assert printable("waited 850 µs · 1.50× longer", Latin()) == "waited 850 us - 1.50x longer"
    assert printable("850 µs", _Tty()) == "850 µs"


# --- diff ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "starts"),
    [("d.json", '{\n  "schema": "gpuprof.ci.diff/1"'), ("d.md", "### gpuprof diff:"), ("d.html", "<!DOCTYPE html>"),
     ("d.txt", "gpuprof diff:")],
)  # fmt: skip
def test_diff_output_format_from_the_extension(tmp_path: Path, name: str, starts: str) -> None:
    base = _saved(tmp_path, "base.json")
    res = run_cli("diff", str(base), str(base), "-o", str(tmp_path / name))
    assert res.code == 0, res.stderr
    assert (tmp_path / name).read_text().startswith(starts)
    assert res.stderr.strip() == f"gpuprof: diff written to {tmp_path / name}"


def test_diff_needs_a_format_it_can_tell(tmp_path: Path) -> None:
    base = str(_saved(tmp_path, "base.json"))
    res = run_cli("diff", base, base, "-o", str(tmp_path / "d.yaml"))
    assert res.code == 2 and "cannot tell the report format" in res.stderr and not (tmp_path / "d.yaml").exists()


# --- names -----------------------------------------------------------------------------------


def test_did_you_mean_for_a_cause_a_scenario_a_knob_and_a_format(tmp_path: Path) -> None:
    saved = str(_saved(tmp_path))
    res = run_cli("check", saved, "--max-lost-pct", "stragler=5")
    assert res.code == 2 and "unknown cause 'stragler' (did you mean 'straggler'?)" in res.stderr
    res = run_cli("simulate", "stragler", "-o", str(tmp_path / "s"))
    assert res.code == 2 and "(did you mean 'straggler'?)" in res.stderr
    res = run_cli("simulate", "pipeline", "stage=3", "-o", str(tmp_path / "s"))
    assert res.code == 2 and "unknown knob 'stage' (did you mean 'stages'?)" in res.stderr
    res = run_cli("analyze", saved, "-f", "htm1")
    assert res.code == 2 and "(did you mean 'html'?)" in res.stderr
    assert all(len(r.stderr_lines) == 1 for r in (res,))
    assert not (tmp_path / "s").exists()


def test_names_take_dashes_and_capitals(tmp_path: Path) -> None:
    from gpuprof.cli.simulate import _resolve

    assert _resolve("dp-exposed", {"Ranks": "2"}) == ("dp_exposed", {"ranks": "2"})
    res = run_cli("check", str(_saved(tmp_path)), "--max-lost-pct", "Pipeline-Bubble=5")
    assert res.code == 0, res.stderr
    assert run_cli("analyze", str(_saved(tmp_path)), "-f", "md").stdout.startswith("### gpuprof:")


# --- help and completion ---------------------------------------------------------------------


@pytest.mark.parametrize("command", COMMANDS)
def test_help_shows_metavars_not_type_placeholders(command: str) -> None:
    res = run_cli(command, "--help")
    assert res.code == 0
    lines = [line for line in res.stdout.splitlines() if not line.strip().startswith("max_lost_pct = {")]
    text = "\n".join(lines)
    assert not re.search(r"<(list\[|str|int|bool|path|float)", text)
    assert not re.search(r"\{\w+\}", text)  # typer's {paths} usage
    usage = next(line for line in lines if "Usage:" in line)
    assert f"gpuprof {command} [OPTIONS]" in usage


def test_analyze_help_reads_like_a_unix_tool() -> None:
    text = run_cli("analyze", "--help").stdout
    assert "Usage: gpuprof analyze [OPTIONS] PATH..." in text
    assert re.search(r"--output\s+-o\s+FILE", text) and re.search(r"--color\s+\[auto\|always\|never\]", text)


def test_shell_completion(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from gpuprof.cli import main

    def complete(words: str) -> list[str]:
        monkeypatch.setenv("_GPUPROF_COMPLETE", "complete_bash")
        monkeypatch.setenv("COMP_WORDS", words)
        monkeypatch.setenv("COMP_CWORD", str(len(words.split()) - (0 if words.endswith(" ") else 1)))
        monkeypatch.setattr("sys.argv", ["gpuprof"])
        with pytest.raises(SystemExit):
            main()
        return capsys.readouterr().out.split()

    assert complete("gpuprof an") == ["analyze", "annotate"]
    assert complete("gpuprof analyze --form") == ["--format"]
    assert complete("gpuprof analyze --format ") == ["html", "json", "markdown", "text"]
    assert complete("gpuprof simulate pipe") == ["pipeline"]
    monkeypatch.delenv("_GPUPROF_COMPLETE")
    assert "--install-completion" in run_cli("--help").stdout


# --- progress --------------------------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_progress_on_a_pipe_is_a_line_now_and_then() -> None:
    out, clock = io.StringIO(), _Clock()
    with ReadProgress(stream=out, clock=clock, live=False) as progress:
        for i in range(100):
            clock.now = i * 0.5  # 0.5 s per file: 50 s in all
            progress(f"reading rank{i}.json", done=i, total=100, ranks=i)
        clock.now = 50.0
        progress("read 100 file(s)", done=100, total=100, ranks=100)
        progress("analyzing 100 rank(s)")
    lines = out.getvalue().splitlines()
    assert 4 <= len(lines) <= 7  # one at most every 10 s after the first 5 s, not one per file
    assert lines[0].startswith("gpuprof: read 10/100 files, 10 ranks, about 45 s left")
    assert lines[-1] == "gpuprof: analyzing 100 rank(s)"


def test_quick_work_on_a_pipe_prints_nothing() -> None:
    out, clock = io.StringIO(), _Clock()
    with ReadProgress(stream=out, clock=clock, live=False) as progress:
        progress("reading a.json", done=0, total=1, ranks=0)
        clock.now = 1.0
        progress("analyzing 1 rank(s)")
    assert out.getvalue() == ""


def test_progress_bar_on_a_terminal_counts_files_and_ranks() -> None:
    out = _Tty()
    with ReadProgress(stream=out, live=True) as progress:
        progress("reading a.json", done=0, total=2, ranks=0)
        progress("read 2 file(s)", done=2, total=2, ranks=8)
        assert progress._bar is not None
        task = progress._bar.tasks[0]
        assert (task.completed, task.total, task.fields["ranks"]) == (2, 2, 8)
        progress("analyzing 8 rank(s)")
        assert progress._bar.tasks[0].description == "Analyzing 8 rank(s)"
    assert progress._bar is None  # stopped, and transient: nothing left on the screen


def test_the_pipeline_reports_files_and_ranks_as_it_reads() -> None:
    from gpuprof.pipeline import analyze_paths

    calls: list[tuple[str, int | None, int | None, int | None]] = []

    def record(message: str, done: int | None = None, total: int | None = None, ranks: int | None = None) -> None:
        calls.append((message, done, total, ranks))

    analyze_paths([SAMPLES / "straggler"], progress=record)
    counted = [c for c in calls if c[2] is not None]
    assert [c[1] for c in counted] == [0, 1, 2, 3, 4] and {c[2] for c in counted} == {4}
    assert counted[-1][3] == 4
    assert calls[-1] == ("analyzing 4 rank(s)", None, None, None)
