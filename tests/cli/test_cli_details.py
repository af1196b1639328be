"""The command line's details (issue 29, item 6): one name per option with its alias kept,
usage and version, exit codes under --debug, the same options on the commands that analyze,
durations in diff, and what `run` does with a command it cannot start or an option it does
not have."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from clirun import run_cli

from gpuprof.model.report import CAUSES, RankReport, Report

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_traces"
GPUPROF = [sys.executable, "-m", "gpuprof"]
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _gpuprof(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))}
    return subprocess.run([*GPUPROF, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout, check=False)


def _help(*command: str) -> str:
    from typer.testing import CliRunner

    from gpuprof.cli import app

    res = CliRunner().invoke(app, [*command, "--help"], terminal_width=200)
    assert res.exit_code == 0, res.output
    return res.output


# -- the root: bare, -V, --debug -------------------------------------------------------------


def test_bare_gpuprof_prints_usage_and_where_to_start() -> None:
    got = run_cli()
    assert got.code == 2 and got.traceback is None
    assert "Usage: gpuprof [OPTIONS] COMMAND" in got.stdout + got.stderr
    (line,) = [x for x in got.stderr_lines if x.startswith("gpuprof:")]
    assert "gpuprof analyze TRACE_OR_FOLDER" in line and "(see 'gpuprof --help')" in line
    assert not line.startswith("gpuprof:  ")  # it printed an empty message


@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_version_short_and_long(flag: str, tmp_path: Path) -> None:
    got = _gpuprof(flag, cwd=tmp_path)
    assert got.returncode == 0 and re.fullmatch(r"gpuprof \S+\n", got.stdout), got
    assert run_cli(flag).stdout == got.stdout  # the typer path says the same


def test_debug_shows_the_traceback_and_keeps_exit_2(tmp_path: Path) -> None:
    got = _gpuprof("--debug", "analyze", str(tmp_path / "missing"), cwd=tmp_path)
    assert got.returncode == 2, got.stderr  # 1 would read as "check failed"
    assert "Traceback (most recent call last)" in got.stderr
    assert got.stderr.rstrip().splitlines()[-1] == f"gpuprof: {tmp_path / 'missing'}: no such file or folder"
    assert _gpuprof("analyze", str(tmp_path / "missing"), cwd=tmp_path).returncode == 2


# -- the same options on the commands that analyze; metavars --------------------------------


def test_check_and_diff_take_jobs_and_check_takes_color(tmp_path: Path) -> None:
    job = str(SAMPLES / "straggler")
    got = run_cli("check", job, "--no-config", "--min-compute-pct", "99", "--jobs", "2", "--color", "always")
    assert got.code == 1, got.stderr
    assert ANSI.search(got.stdout) and "FAIL" in ANSI.sub("", got.stdout)
    got = run_cli("check", job, "--no-config", "--min-compute-pct", "99", "-j", "2", "--color", "never")
    assert got.code == 1 and not ANSI.search(got.stdout)
    got = run_cli("diff", job, str(SAMPLES / "healthy"), "--jobs", "2", "--force")
    assert got.code == 0, got.stderr


@pytest.mark.parametrize(
    "command,expected",
    [
        (("check",), [re.escape("Usage: gpuprof check [OPTIONS] PATH..."), r"--junit\s+FILE", r"--config\s+FILE", r"--baseline\s+PATH",
                      r"--jobs\s+-j\s+N", r"--color\s+\[auto\|always\|never\]", r"--force"]),
        (("diff",), [r"--jobs\s+-j\s+N", r"--color", r"--force"]),
        (("run",), [r"--format\s+-f\s+FORMAT", r"--output\s+-o\s+FILE"]),
        (("annotate",), [r"--output\s+-o\s+FILE\|DIR", r"--job\s+DIR", r"--force"]),
    ],
)
def test_metavars_say_what_the_text_says(command: tuple[str, ...], expected: list[str]) -> None:
    text = _help(*command)
    for pattern in expected:
        assert re.search(pattern, text), (command, pattern)
    assert "PATHS" not in text and "REPORT_FORMAT" not in text


def test_run_documents_o_and_keeps_save_report_as_an_alias(tmp_path: Path) -> None:
    text = _help("run")
    assert not re.search(r"│\s+--save-report\s", text)  # not an option row of its own
    assert "--save-report FILE is the same" in text
    both = run_cli("run", "-o", str(tmp_path / "a.json"), "--save-report", str(tmp_path / "b.json"), "--", "true")
    assert both.code == 2 and "the same option" in both.stderr


# -- diff writes durations as every report does ---------------------------------------------


def _report(step_us: float) -> Report:
    lost = {c: 0.0 for c in CAUSES}
    rank = RankReport(rank=0, device=None, steps=2, window_us=2 * step_us, compute_us=2 * step_us, lost_us=lost,
                      step_times_us=(step_us, step_us))
    return Report(inputs=("x",), ranks=(rank,), recommendations=(), warnings=(), extra={})


@pytest.mark.parametrize("fmt", ["text", "markdown", "html"])
def test_diff_writes_seconds_as_seconds(fmt: str) -> None:
    """The Megatron dp4pp4 job and its ideal timeline: 46.61 s against 23.48 s (it said
    "46,612.9 ms")."""
    from gpuprof.ci.diff import diff_reports
    from gpuprof.ci.diff_output import diff_html, diff_markdown, diff_text

    d = diff_reports(_report(46_612_900.0), _report(23_484_700.0))
    text = {"text": lambda: diff_text(d, 100, wrap=False), "markdown": lambda: diff_markdown(d),
            "html": lambda: diff_html(d, ("a",), ("b",))}[fmt]()
    assert re.search(r"46\.61 s (->|-&gt;|\\->) 23\.48 s", text) or fmt == "html", text
    assert "46.61 s" in text and "23.48 s" in text
    assert "46,612.9" not in text and "step ms" not in text


# -- run: a command it cannot start, an option it does not have, no torch and no samples ----


@pytest.mark.parametrize("cmd,code", [("no-such-command-gpuprof-test", 127), ("./missing.sh", 127)])
def test_a_missing_command_leaves_no_session_folder(cmd: str, code: int, tmp_path: Path) -> None:
    got = _gpuprof("run", "--no-live", "--", cmd, cwd=tmp_path)
    assert got.returncode == code, got.stderr
    assert f"gpuprof: cannot run {cmd!r}" in got.stderr
    assert list(tmp_path.iterdir()) == []  # no gpuprof-sessions/<...> left behind


def test_a_file_that_is_not_executable_is_126(tmp_path: Path) -> None:
    script = tmp_path / "train.sh"
    script.write_text("echo hi\n")
    got = _gpuprof("run", "--no-live", "--", "./train.sh", cwd=tmp_path)
    assert got.returncode == 126 and "Permission denied" in got.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.sh"]


@pytest.mark.parametrize(
    "option,hint",
    [("--no-such-option", ""), ("--no-hook", " (did you mean --no-hooks?)"), ("--profile-wiat", " (did you mean --profile-wait?)")],
)
def test_an_unknown_option_before_the_command_is_a_usage_error(option: str, hint: str, tmp_path: Path) -> None:
    got = _gpuprof("run", option, "--", sys.executable, "-c", "print('ran')", cwd=tmp_path)
    assert got.returncode == 2 and "ran" not in got.stdout, got
    line = (
        f"gpuprof: run: no such option: {option}{hint}; gpuprof's options go before --, the command after it: "
        "gpuprof run [OPTIONS] -- CMD [ARGS...]"
    )
    assert got.stderr.strip().splitlines() == [line]
    assert list(tmp_path.iterdir()) == []


def _session(root: Path, samples: bool) -> Path:
    from gpuprof.record.backend import GpuSample
    from gpuprof.session import SESSION_SCHEMA
    from gpuprof.session.writer import SessionWriter

    w = SessionWriter(root)
    w.write_meta({"schema": SESSION_SCHEMA, "status": "finished", "command": ["python", "x.py"], "exit_code": 0,
                  "gpus": [], "hooks_enabled": True, "warnings": []})
    if samples:
        for t in range(3):
            w.samples.append(GpuSample(gpu=0, uuid="GPU-a", util_gpu_pct=50.0).to_record(float(t)))
    w.close()
    return root


def test_no_torch_and_no_samples_is_not_a_report_from_samples(tmp_path: Path) -> None:
    from gpuprof.pipeline.session_report import no_trace_note

    bare = no_trace_note(_session(tmp_path / "bare", samples=False))
    assert bare.startswith("no trace: no Python process of the job imported torch")
    assert "NVML samples only" not in bare and "nothing was measured" in bare
    sampled = no_trace_note(_session(tmp_path / "sampled", samples=True))
    assert sampled.endswith("report from NVML samples only")
