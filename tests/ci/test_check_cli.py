"""``gpuprof check`` and ``gpuprof diff`` end to end, through the real entry point."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from reportfactory import report, stepped_rank

from gpuprof.cli import main
from gpuprof.model.report import Report, report_to_dict

# Twelve steps of about 25 ms on two ranks (a fixed jitter, mean just under 25 ms).
JITTER = [0.99, 1.01, 1.0, 0.98, 1.02, 1.0, 0.995, 1.005, 0.985, 1.015, 1.0, 0.99]


def _job(scale: float = 1.0, dataloader_ms: float = 3.75, host_ms: float = 1.25) -> Report:
    steps = [25.0 * scale * j for j in JITTER]
    lost = {"dataloader": [dataloader_ms] * len(steps), "host": [host_ms] * len(steps)}
    return report([stepped_rank(0, steps, lost), stepped_rank(1, steps, {"dataloader": lost["dataloader"]})])


# Dataloader 15 % of the window; the "worse" run has dataloader 30 % in steps just as long;
# the "slower" one's steps are 20 % longer, the DataLoader's extra 5 ms per step the cause.
BASE = _job()
WORSE = _job(dataloader_ms=7.5)
SLOWER = _job(scale=1.2, dataloader_ms=8.75)


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
    assert "the 1 check passed" in out and "baseline.step: no significant change: step 0.0%" in out
    # The fixed rules of earlier versions, asked for: every share and the mean step too.
    code, out, err = cli("check", str(base), "--baseline", str(base), "--tolerance-pct", "5", "--step-tolerance-pct", "5")
    assert code == 0, err
    assert "all 11 checks passed" in out
    assert "baseline.lost_pct.dataloader" in out and "baseline.step_ms" in out  # every check is listed


def test_slower_run_fails_naming_the_cause_that_grew(cli, tmp_path: Path) -> None:
    base = _save(tmp_path / "base.json", BASE)
    cur = _save(tmp_path / "cur.json", SLOWER)
    code, out, err = cli("check", str(cur), "--baseline", str(base), "--junit", "j.xml", "--json", "c.json")
    assert code == 1, err
    fails = [line.strip() for line in out.splitlines() if line.strip().startswith("FAIL ")]
    assert len(fails) == 1 and fails[0].startswith("FAIL baseline.step: regression: step +20.0% [")
    assert "grew: dataloader +5.00 ms/step [" in fails[0] and "host" not in fails[0]
    suite = ET.parse(tmp_path / "j.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("failures") == "1"
    (case,) = suite.findall("testcase")
    failure = case.find("failure")
    assert failure is not None and "regression: step +20.0% [" in (failure.get("message") or "")
    assert "dataloader +5.00 ms/step" in (failure.get("message") or "")
    doc = json.loads((tmp_path / "c.json").read_text())
    assert doc["schema"] == "gpuprof.check/1" and doc["passed"] is False
    assert doc["verdict"]["verdict"] == "regression" and doc["verdict"]["causes"] == ["dataloader"]
    assert doc["verdict"]["step"]["low_pct"] > 0 and doc["verdict"]["steps"] == {"current": 12, "base": 12, "min_per_side": 5}


def test_shares_are_checked_only_when_asked(cli, tmp_path: Path) -> None:
    # The dataloader's share doubled in steps just as long: the step did not change.
    base = _save(tmp_path / "base.json", BASE)
    cur = _save(tmp_path / "cur.json", WORSE)
    code, out, err = cli("check", str(cur), "--baseline", str(base))
    assert code == 0 and "no significant change" in out, out + err
    code, out, err = cli("check", str(cur), "--baseline", str(base), "--tolerance-pct", "5", "--junit", "j.xml")
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


def test_too_few_steps_is_inconclusive_and_passes_unless_strict(cli, tmp_path: Path) -> None:
    short = report([stepped_rank(r, [25.0, 26.0, 25.5]) for r in range(2)])
    base = _save(tmp_path / "base.json", BASE)
    cur = _save(tmp_path / "cur.json", short)
    code, out, err = cli("check", str(cur), "--baseline", str(base), "--junit", "j.xml")
    assert code == 0, err
    assert "inconclusive: needs >= 5 steps on each side at 99% (has 3 vs 12)" in out
    suite = ET.parse(tmp_path / "j.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("skipped") == "1" and suite.get("failures") == "0"
    code, out, _ = cli("check", str(cur), "--baseline", str(base), "--strict")
    assert code == 1 and "FAIL baseline.step: inconclusive" in out


def test_not_comparable_fails_and_says_why(cli, tmp_path: Path) -> None:
    base = _save(tmp_path / "base.json", BASE)
    steps = [25.0 * j for j in JITTER]
    other = _save(tmp_path / "cur.json", report([stepped_rank(0, steps, device="NVIDIA A100-SXM4-80GB"),
                                                 stepped_rank(1, steps, device="NVIDIA A100-SXM4-80GB")]))  # fmt: skip
    code, out, _ = cli("check", str(other), "--baseline", str(base))
    assert code == 1
    assert "FAIL baseline.step: not comparable: the baseline ran on NVIDIA H100 80GB HBM3, this run on NVIDIA A100-SXM4-80GB" in out


def test_a_folder_of_baselines_is_pooled(cli, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    for i, scale in enumerate((0.995, 1.0, 1.005)):
        _save(runs / f"run{i}.json", _job(scale=scale))
    (runs / "notes.txt").write_text("not a report")
    cur = _save(tmp_path / "cur.json", SLOWER)
    code, out, _ = cli("check", str(cur), "--baseline", str(runs), "--json", "c.json")
    assert code == 1 and "(99% interval, 12 vs 36 steps, 3 baseline runs)" in out
    doc = json.loads((tmp_path / "c.json").read_text())
    assert [Path(b).name for b in doc["baselines"]] == ["run0.json", "run1.json", "run2.json"]
    assert doc["verdict"]["baseline_runs"] == 3


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
        ("not json at all", "not JSON"),  # not a report: read as a trace, and not one either
        ('{"traceEvents": []}', "holds no events"),
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
    assert data["shares"]["dataloader"]["delta_pp"] == pytest.approx(15.0, abs=0.05)
    assert data["shares"]["dataloader"]["verdict"] == "worse"
    code, out, _ = cli("diff", str(base), str(cur))
    # Same step times, so not worse overall; what moved follows the verdict.
    first = out.splitlines()[0]
    assert code == 0 and first.startswith("gpuprof diff: about the same overall (step 0.0% [")
    assert first.endswith("99% interval); worse: compute -15.0 pp, dataloader +15.0 pp")
    assert "verdict: no significant change: step 0.0% [" in out
    code, _, _ = cli("diff", str(base), str(cur), "-f", "markdown", "-o", "d.md")
    assert code == 0 and "**worse**" in (tmp_path / "d.md").read_text()
    assert cli("diff", str(base), str(cur), "-f", "yaml")[0] == 2


def test_real_traces_nw4_baseline_vs_nw0(cli, tmp_path: Path, shared_traces: Path) -> None:
    code, _, err = cli("analyze", str(shared_traces / "resnet50-nw4"), "--format", "json", "-o", "nw4.json")
    assert code == 0, err
    code, out, err = cli("check", str(shared_traces / "resnet50-nw4"), "--baseline", "nw4.json")
    assert code == 0 and "no significant change" in out, out + err
    code, out, err = cli("check", str(shared_traces / "resnet50-nw0"), "--baseline", "nw4.json", "--junit", "j.xml")
    assert code == 1, out + err
    assert any(line.strip().startswith("FAIL baseline.step: regression") for line in out.splitlines())
    ET.parse(tmp_path / "j.xml")
    # diff takes a saved report on one side and traces on the other
    code, out, err = cli("diff", "nw4.json", str(shared_traces / "resnet50-nw0"), "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    assert d["shares"]["dataloader"]["verdict"] == "worse" and d["step_ms"]["verdict"] == "worse"
    assert d["verdict"]["verdict"] == "regression" and d["verdict"]["causes"][0] == "dataloader"


def test_real_pair_improvement_and_regression_with_the_dataloader_named(cli, shared_traces: Path) -> None:
    """The issue's pair: num_workers=4 against 0 is an improvement, the DataLoader's time per
    step the largest drop; the other way round a regression naming it, with intervals."""
    nw0, nw4 = str(shared_traces / "resnet50-nw0"), str(shared_traces / "resnet50-nw4")
    code, out, err = cli("check", nw4, "--baseline", nw0)
    assert code == 0, out + err
    line = next(ln for ln in out.splitlines() if ln.startswith("baseline.step: "))
    assert line.startswith("baseline.step: improvement: step -4") and "(99% interval, 6 vs 6 steps)" in line
    dropped = out.split("dropped (time per step, 99% interval):\n", 1)[1].splitlines()
    assert dropped[0].strip().startswith("dataloader -46.9 ms/step [")
    code, out, err = cli("check", nw0, "--baseline", nw4)
    assert code == 1, out + err
    (fail,) = [ln.strip() for ln in out.splitlines() if ln.strip().startswith("FAIL ")]
    assert fail.startswith("FAIL baseline.step: regression: step +") and "grew: dataloader +46.9 ms/step [+" in fail


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


def test_job_summary_has_the_verdict_and_each_cause_per_step(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    base = _save(tmp_path / "base.json", BASE)
    cur = _save(tmp_path / "cur.json", SLOWER)
    code, _, _ = cli("check", str(cur), "--baseline", str(base))
    assert code == 1
    text = summary.read_text()
    assert "| baseline.step | +20.0% \\[" in text and "**FAIL**: regression: step +20.0%" in text
    assert "**regression**: step +20.0% \\[" in text
    row = next(line for line in text.splitlines() if line.startswith("| **dataloader** |"))
    assert row.startswith("| **dataloader** | 3.75 ms | 8.75 ms | +5.00 ms | [")


def test_outputs_never_land_on_the_history(cli, tmp_path: Path) -> None:
    cur = _save(tmp_path / "cur.json", BASE)
    hist = tmp_path / "h.jsonl"
    assert cli("check", str(cur), "--history", str(hist))[0] == 0
    before = hist.read_bytes()
    code, _, err = cli("check", str(cur), "--history", str(hist), "--junit", str(hist))
    assert code == 2 and "--junit would overwrite the history" in err
    assert hist.read_bytes() == before
