"""``gpuprof check --history``: change points on constructed series, the history file
(append-only, concurrent writers, damaged lines), the baseline it gives, end to end."""

from __future__ import annotations

import json
import multiprocessing
import sys
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from reportfactory import report, stepped_rank

from gpuprof.ci.changepoints import change_points, segments
from gpuprof.ci.history import HISTORY_SCHEMA, History, HistoryRun, baseline_runs, line_for, read_history
from gpuprof.ci.samples import RunSteps, run_steps
from gpuprof.ci.schemas import check_schema, history_schema
from gpuprof.cli import main
from gpuprof.errors import GpuprofError
from gpuprof.model.report import Report, report_to_dict
from gpuprof.util.appendlog import append_line, read_lines


def _series(levels: list[tuple[float, int]], cv: float = 0.01, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    return [ms * float(np.exp(rng.normal(0.0, cv))) for ms, n in levels for _ in range(n)]


def test_a_step_that_rose_and_stayed_is_found_where_it_rose() -> None:
    (cp,) = change_points(_series([(100.0, 40), (107.0, 20)]))
    assert cp.index == 40 and cp.change_pct == pytest.approx(7.0, abs=1.0) and cp.p_value <= 0.01
    assert segments(60, [cp]) == [(0, 40), (40, 60)]


def test_a_flat_history_has_no_change_point() -> None:
    for seed in range(5):
        assert change_points(_series([(100.0, 60)], cv=0.03, seed=seed)) == []


def test_a_level_that_rises_and_falls_back_gives_both_points() -> None:
    got = change_points(_series([(100.0, 20), (110.0, 20), (100.0, 20)], seed=1))
    assert [c.index for c in got] == [20, 40]
    assert got[0].change_pct > 5 and got[1].change_pct < -5


def test_a_change_under_the_floor_is_not_a_change_point() -> None:
    series = _series([(100.0, 20), (102.0, 20)], cv=0.005, seed=2)
    assert change_points(series) == []  # 2 % < the 5 % floor
    (cp,) = change_points(series, min_effect_pct=1.0)
    assert cp.index == 20


def test_too_few_runs_on_a_side_is_not_a_change_point() -> None:
    assert change_points(_series([(100.0, 20), (150.0, 2)])) == []
    assert [c.index for c in change_points(_series([(100.0, 20), (150.0, 3)]))] == [20]


def _run(ms: float, n: int = 12, seed: int = 0, device: str = "NVIDIA H100 80GB HBM3") -> Report:
    steps = list(ms * np.exp(np.random.default_rng(seed).normal(0.0, 0.01, n)))
    return report([stepped_rank(0, steps, {"host": [1.0] * n}, device=device)])


def test_history_lines_round_trip_and_follow_their_schema(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    run = run_steps(_run(100.0), "x")
    line = line_for(run, commit="abc123", verdict="no significant change", inputs=["a"])
    jsonschema.validate(json.loads(line), history_schema())
    append_line(path, line)
    append_line(path, line_for(run, commit=None, verdict=None, inputs=[]))
    h = read_history(path)
    assert [r.number for r in h.runs] == [1, 2] and h.skipped == 0
    assert h.runs[0].commit == "abc123" and h.runs[0].name == "run 1 (commit abc123)"
    assert np.allclose(h.runs[0].run.step_ms, run.step_ms, atol=1e-3)
    assert h.runs[0].run.parts_ms is not None and h.runs[0].run.fingerprint == run.fingerprint


def test_damaged_lines_are_left_out_and_a_torn_last_line_is_ended(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    good = line_for(run_steps(_run(100.0)), commit="c1", verdict=None, inputs=[])
    path.write_text(good + "\n" + "{not json\n" + json.dumps({"schema": HISTORY_SCHEMA, "step_ms": [1, -2]}) + "\n"
                    + '{"schema": "gpuprof.history/1", "step_ms": [NaN]}\n' + good[: len(good) // 2])  # fmt: skip
    h = read_history(path)
    assert len(h.runs) == 1 and h.skipped == 3  # the torn last line is not counted: it has no end yet
    append_line(path, good)  # ends the torn line first, so the new one stays whole
    lines = read_lines(path)
    assert lines[-1] == good and lines[-2] == good[: len(good) // 2]
    assert len(read_history(path).runs) == 2


def test_a_file_that_is_not_a_history_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "report.json"
    other.write_text(json.dumps(report_to_dict(_run(100.0))))  # one line, but a report
    with pytest.raises(GpuprofError, match="not a gpuprof history"):
        read_history(other)
    binary = tmp_path / "b.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage\n")
    with pytest.raises(GpuprofError, match="not UTF-8"):
        read_history(binary)
    assert read_history(tmp_path / "absent.jsonl").runs == ()  # not there yet: the first run


def _append_many(path: str, writer: int, count: int, size: int) -> None:
    for i in range(count):
        doc = {"schema": HISTORY_SCHEMA, "writer": writer, "i": i, "pad": "x" * size}
        append_line(Path(path), json.dumps(doc))


def test_concurrent_appends_never_interleave(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    writers, count, size = 6, 40, 70_000  # lines far larger than a pipe's atomic write
    ctx = multiprocessing.get_context("spawn" if sys.platform == "win32" else "fork")
    procs = [ctx.Process(target=_append_many, args=(str(path), w, count, size)) for w in range(writers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    lines = read_lines(path)
    docs = [json.loads(line) for line in lines]  # every line whole: parses
    assert len(docs) == writers * count
    assert sorted((d["writer"], d["i"]) for d in docs) == [(w, i) for w in range(writers) for i in range(count)]
    for w in range(writers):  # each writer's lines in its own order
        assert [d["i"] for d in docs if d["writer"] == w] == list(range(count))


def _history(*runs: tuple[Report, str | None]) -> History:
    return History(
        Path("h"),
        tuple(HistoryRun(i + 1, run_steps(r, f"run {i + 1}"), None, f"c{i + 1}", v) for i, (r, v) in enumerate(runs)),
        0,
    )


def test_the_baseline_is_the_last_stable_segment() -> None:
    runs = [(_run(100.0, seed=i), None) for i in range(12)] + [(_run(108.0, seed=20 + i), None) for i in range(4)]
    hb = baseline_runs(_history(*runs), run_steps(_run(108.0, seed=99)), 0.99, 5.0)
    (cp,) = hb.changes
    assert hb.comparable[cp.index].number == 13 and cp.change_pct == pytest.approx(8.0, abs=1.0)
    assert [h.number for h in hb.runs] == [13, 14, 15, 16] and hb.segment == (13, 16)


def test_runs_called_regressions_stay_out_of_the_baseline_until_they_are_the_new_level() -> None:
    runs = [(_run(100.0, seed=i), None) for i in range(12)] + [(_run(150.0, seed=20), "regression")]
    hb = baseline_runs(_history(*runs), run_steps(_run(100.0, seed=99)), 0.99, 5.0)
    assert [h.number for h in hb.runs] == list(range(1, 13))  # the one-off slow run is left out
    more = runs + [(_run(150.0, seed=21 + i), "regression") for i in range(2)]
    hb = baseline_runs(_history(*more), run_steps(_run(150.0, seed=99)), 0.99, 5.0)
    assert [h.number for h in hb.runs] == [13, 14, 15]  # three runs at the new level: the last segment


def test_runs_that_are_not_comparable_are_left_out() -> None:
    runs = [(_run(100.0, seed=i, device="NVIDIA A100-SXM4-80GB"), None) for i in range(3)]
    runs += [(_run(100.0, seed=5 + i), None) for i in range(2)]
    hb = baseline_runs(_history(*runs), run_steps(_run(100.0, seed=99)), 0.99, 5.0)
    assert hb.left_out == 3 and [h.number for h in hb.runs] == [4, 5]
    none = baseline_runs(_history(*runs[:3]), run_steps(_run(100.0, seed=99)), 0.99, 5.0)
    assert none.runs == () and none.segment is None


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path):
    monkeypatch.chdir(tmp_path)
    for name in ("GITHUB_STEP_SUMMARY", "GITHUB_SHA", "CI_COMMIT_SHA", "BUILDKITE_COMMIT", "CIRCLE_SHA1",
                 "GIT_COMMIT", "BUILD_SOURCEVERSION"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)

    def run(*args: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["gpuprof", *args])
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        out, err = capsys.readouterr()
        return code, out, err

    return run


def test_check_with_a_history_end_to_end(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hist = tmp_path / "ci"
    hist.mkdir()

    def check(ms: float, seed: int, commit: str, *more: str) -> tuple[int, str]:
        path = tmp_path / f"run{seed}.json"
        path.write_text(json.dumps(report_to_dict(_run(ms, seed=seed))))
        code, out, err = cli("check", str(path), "--history", str(hist), "--commit", commit, "--json", "c.json", *more)
        assert code in (0, 1), err
        return code, out

    code, out = check(100.0, 0, "c0")
    assert code == 0 and "inconclusive: the history has no earlier run comparable with this one" in out
    for i in range(1, 12):
        assert check(100.0, i, f"c{i}")[0] == 0
    code, out = check(108.0, 12, "c12")  # the first slow run: a regression against runs 1-12
    assert code == 1 and "FAIL baseline.step: regression: step +" in out
    assert "baseline: 12 run(s) of the history's last stable segment (runs 1-12)" in out
    for i in (13, 14):
        assert check(108.0, i, f"c{i}")[0] == 1  # not yet a level of its own: still against runs 1-12
    # Three slow runs make a level: the history says when the step rose, and compares with it.
    code, out = check(108.0, 15, "c15")
    assert "history: the step rose " in out and "at run 13 (commit c12)" in out
    assert code == 0 and "baseline: 3 run(s) of the history's last stable segment (runs 13-15)" in out
    doc = json.loads((tmp_path / "c.json").read_text())
    jsonschema.validate(doc, check_schema())
    assert doc["history"]["change_points"][0]["run"] == 13 and doc["history"]["runs"] == 15
    lines = read_lines(hist / "gpuprof-history.jsonl")
    assert len(lines) == 16 and json.loads(lines[12])["verdict"] == "regression"
    assert [json.loads(ln)["commit"] for ln in lines] == [f"c{i}" for i in range(16)]
    # A commit from the CI's environment when none is given.
    monkeypatch.setenv("GITHUB_SHA", "f00dfeed" * 5)
    check(108.0, 16, "")
    assert json.loads(read_lines(hist / "gpuprof-history.jsonl")[-1])["commit"] == "f00dfeed" * 5


def test_a_history_that_is_not_one_is_exit_2_and_untouched(cli, tmp_path: Path) -> None:
    rep = tmp_path / "r.json"
    rep.write_text(json.dumps(report_to_dict(_run(100.0))))
    before = rep.read_bytes()
    code, _, err = cli("check", str(rep), "--history", str(rep))
    assert code == 2 and "not a gpuprof history" in err and len(err.strip().splitlines()) == 1
    assert rep.read_bytes() == before


def test_runsteps_from_a_history_line_keep_what_the_gate_needs() -> None:
    run = run_steps(_run(100.0))
    assert isinstance(run, RunSteps) and run.step_ms.size == 12
