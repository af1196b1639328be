"""``gpuprof check`` and ``gpuprof diff`` end to end, through the real entry point."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from reportfactory import rank, report

from gpuprof.cli import main
from gpuprof.model.report import Report, report_to_dict

# Dataloader 15 % of the window, host 5 %; the "worse" run has dataloader 30 %.
BASE = report([rank(0, lost_ms={"dataloader": 20, "host": 10}), rank(1, lost_ms={"dataloader": 10})])
WORSE = report([rank(0, lost_ms={"dataloader": 40, "host": 10}), rank(1, lost_ms={"dataloader": 20})])


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path):
    """Run ``gpuprof ARGS`` in ``tmp_path``; returns (exit code, stdout, stderr)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)

    def run(*args: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["gpuprof", *args])
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        out, err = capsys.readouterr()
        return code, out, err

    return run


def _save(path: Path, rep: Report) -> Path:
    path.write_text(json.dumps(report_to_dict(rep)))
    return path


def test_baseline_against_itself_passes(cli, tmp_path: Path) -> None:
    base = _save(tmp_path / "base.json", BASE)
    code, out, err = cli("check", str(base), "--baseline", str(base))
    assert code == 0, err
    assert "all 10 checks passed" in out
    assert "baseline.lost_pct.dataloader" in out  # every check is listed


def test_worse_bottleneck_fails_naming_the_cause(cli, tmp_path: Path) -> None:
    base = _save(tmp_path / "base.json", BASE)
    cur = _save(tmp_path / "cur.json", WORSE)
    code, out, err = cli("check", str(cur), "--baseline", str(base), "--junit", "j.xml")
    assert code == 1, err
    fails = [line.strip() for line in out.splitlines() if line.strip().startswith("FAIL ")]
    assert any(line.startswith("FAIL baseline.lost_pct.dataloader") for line in fails)
    assert not any("host" in line for line in fails)
    suite = ET.parse(tmp_path / "j.xml").getroot().find("testsuite")
    assert suite is not None
    cases = suite.findall("testcase")
    assert len(cases) == 10 and suite.get("failures") == str(sum(1 for c in cases if c.find("failure") is not None))
    failing = {c.get("name"): c.find("failure") for c in cases if c.find("failure") is not None}
    assert "dataloader" in (failing["baseline.lost_pct.dataloader"].get("message") or "")  # type: ignore[union-attr]


def test_thresholds_from_options(cli, tmp_path: Path) -> None:
    cur = _save(tmp_path / "cur.json", WORSE)
    code, out, _ = cli("check", str(cur), "--min-compute-pct", "60", "--max-lost-pct", "dataloader=25", "--max-lost-pct", "host=10")
    assert code == 1
    assert "FAIL max_lost_pct.dataloader" in out and "FAIL max_lost_pct.host" not in out
    code, out, _ = cli("check", str(cur), "--max-lost-pct", "dataloader=31%", "--max-step-ms", "25")
    assert code == 0 and "all 2 checks passed" in out


def test_pyproject_config_found_upwards_and_options_override(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ci").mkdir()
    _save(tmp_path / "ci" / "base.json", BASE)
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.gpuprof.check]\nmin_compute_pct = 50\nbaseline = "ci/base.json"\n'
        "tolerance_pct = 20\n\n[tool.gpuprof.check.max_lost_pct]\ndataloader = 10\n"
    )
    sub = tmp_path / "deep" / "er"
    sub.mkdir(parents=True)
    cur = _save(sub / "cur.json", WORSE)
    monkeypatch.chdir(sub)
    code, out, _ = cli("check", str(cur))
    assert code == 1
    assert "FAIL max_lost_pct.dataloader" in out  # 30 % > 10 % from the file
    assert "baseline.lost_pct.dataloader" in out and "FAIL baseline.lost_pct.dataloader" not in out  # 20 pp tolerance
    code, out, _ = cli("check", str(cur), "--max-lost-pct", "dataloader=40", "--tolerance-pct", "20")
    assert code == 0, out
    code, out, err = cli("check", str(cur), "--no-config")
    assert code == 2 and "nothing to check" in err


def test_bad_config_is_one_line_exit_2(cli, tmp_path: Path) -> None:
    cur = _save(tmp_path / "cur.json", WORSE)
    (tmp_path / "pyproject.toml").write_text("[tool.gpuprof.check]\nmax_lost_pc = { host = 3 }\n")
    code, _out, err = cli("check", str(cur))
    assert code == 2 and "pyproject.toml" in err and "max_lost_pc" in err and len(err.strip().splitlines()) == 1
    (tmp_path / "pyproject.toml").write_text("[tool.gpuprof.check]\nmax_lost_pct = { hots = 3 }\n")
    code, _, err = cli("check", str(cur))
    assert code == 2 and "unknown cause 'hots'" in err


@pytest.mark.parametrize(
    "content, says",
    [
        ('{"schema": "gpuprof.report/2", "ranks": []}', "gpuprof.report/2"),
        ("not json at all", "not a JSON report"),
        ('{"traceEvents": []}', "gpuprof analyze TRACE --format json"),
    ],
)
def test_bad_baseline_exit_2_and_no_junit(cli, tmp_path: Path, content: str, says: str) -> None:
    cur = _save(tmp_path / "cur.json", WORSE)
    (tmp_path / "b.json").write_text(content)
    code, _out, err = cli("check", str(cur), "--baseline", "b.json", "--junit", "j.xml")
    assert code == 2
    assert err.startswith("gpuprof: b.json:") and says in err and "Traceback" not in err
    assert not (tmp_path / "j.xml").exists()


def test_bad_usage_exit_2(cli, tmp_path: Path) -> None:
    cur = _save(tmp_path / "cur.json", WORSE)
    assert cli("check", str(cur), "--no-config")[0] == 2
    code, _, err = cli("check", str(cur), "--max-lost-pct", "dataloader")
    assert code == 2 and "CAUSE=PCT" in err
    code, _, err = cli("check", str(cur), "--max-lost-pct", "dataloader=200")
    assert code == 2 and "between 0 and 100" in err
    code, _, err = cli("check", str(cur), str(cur), "--max-step-ms", "1")
    assert code == 2 and "cannot be combined" in err


def test_step_summary_and_saved_report(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    cur = _save(tmp_path / "cur.json", WORSE)
    code, _, _ = cli("check", str(cur), "--max-lost-pct", "dataloader=10", "--save-report", "report.html")
    assert code == 1
    text = summary.read_text()
    assert text.startswith("earlier step\n") and "### gpuprof check: the 1 check failed" in text
    assert "| max\\_lost\\_pct.dataloader | 30.0% | 10.0% | **FAIL**" in text  # Markdown-escaped name
    assert (tmp_path / "report.html").read_text().startswith("<!DOCTYPE html>")


def test_diff_command(cli, tmp_path: Path) -> None:
    base = _save(tmp_path / "base.json", BASE)
    cur = _save(tmp_path / "cur.json", WORSE)
    code, out, _ = cli("diff", str(base), str(cur), "--format", "json")
    assert code == 0
    data = json.loads(out)
    assert data["shares"]["dataloader"]["delta_pp"] == pytest.approx(15.0)
    assert data["shares"]["dataloader"]["verdict"] == "worse"
    code, out, _ = cli("diff", str(base), str(cur))
    # Same step time, so not worse overall; what moved follows the verdict.
    assert code == 0 and out.startswith(
        "gpuprof diff: about the same overall (step time 0.0%); worse: compute -15.0 pp, dataloader +15.0 pp"
    )
    code, _, _ = cli("diff", str(base), str(cur), "-f", "markdown", "-o", "d.md")
    assert code == 0 and "**worse**" in (tmp_path / "d.md").read_text()
    assert cli("diff", str(base), str(cur), "-f", "yaml")[0] == 2


def test_real_traces_nw4_baseline_vs_nw0(cli, tmp_path: Path, shared_traces: Path) -> None:
    code, _, err = cli("analyze", str(shared_traces / "resnet50-nw4"), "--format", "json", "-o", "nw4.json")
    assert code == 0, err
    code, out, err = cli("check", str(shared_traces / "resnet50-nw4"), "--baseline", "nw4.json")
    assert code == 0, out + err
    code, out, err = cli("check", str(shared_traces / "resnet50-nw0"), "--baseline", "nw4.json", "--junit", "j.xml")
    assert code == 1, out + err
    assert any(line.strip().startswith("FAIL baseline.lost_pct.dataloader") for line in out.splitlines())
    ET.parse(tmp_path / "j.xml")
    # diff takes a saved report on one side and traces on the other
    code, out, err = cli("diff", "nw4.json", str(shared_traces / "resnet50-nw0"), "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    assert d["shares"]["dataloader"]["verdict"] == "worse" and d["step_ms"]["verdict"] == "worse"


def test_usage_errors_are_one_message_exit_2(cli) -> None:
    code, _, err = cli("check")
    assert code == 2 and "Missing argument" in err and "Traceback" not in err
    code, _, err = cli("check", "x.json", "--bogus")
    assert code == 2 and "No such option" in err


def test_junit_escapes_and_drops_characters_xml_cannot_hold() -> None:
    from gpuprof.ci.gate import CheckResult
    from gpuprof.ci.gate_output import checks_junit

    nasty = 'a <b> & "c" ]]> \x00\x07 \ud7ff'
    xml = checks_junit(
        [CheckResult(nasty, 1.0, 2.0, "%", False, nasty), CheckResult("ok", None, 2.0, "ms", True, "fine")],
        subject=nasty,
    )
    root = ET.fromstring(xml.split("\n", 1)[1])
    suite = root.find("testsuite")
    assert suite is not None and suite.get("tests") == "2" and suite.get("failures") == "1"
    case = suite.findall("testcase")[0]
    assert (case.get("name") or "").startswith('a <b> & "c" ]]>')
    fail = case.find("failure")
    assert fail is not None and "measured: 1.0%" in (fail.text or "") and "allowed: 2.0%" in (fail.text or "")
    assert suite.findall("testcase")[1].find("failure") is None


@pytest.mark.parametrize(
    "argv",
    [
        ("analyze", "--bogus"),
        ("check",),
        ("analyze", "x.json", "--jobs", "0"),
        ("check", "x.json", "--min-compute-pct", "abc"),
        ("no-such-command",),
        ("diff", "a.json"),
    ],
)
def test_every_usage_error_is_one_line_without_click(cli, argv: tuple[str, ...]) -> None:
    """Usage errors never need the click package (typer >= 0.20 bundles its own copy and the
    README's install does not bring click): one line naming the command, exit 2."""
    code, out, err = cli(*argv)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("gpuprof") and "Traceback" not in err, err
    assert out == ""
