"""Saved reports are untrusted input: recognized by content, read with one clear error."""

from __future__ import annotations

import gzip
import json
import random
import sys
from pathlib import Path
from typing import Any

import pytest
from reportfactory import rank, rec, report

from gpuprof.cli import main
from gpuprof.errors import GpuprofError
from gpuprof.readers.saved import is_report_file, read_report

BASE = report([rank(0, lost_ms={"dataloader": 20}), rank(1, lost_ms={"dataloader": 10})], [rec("dataloader", 15.0)])


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


def _big_doc() -> dict[str, Any]:
    """A valid report whose keys, sorted, put "schema" far past the first 64 KB."""
    doc = BASE.to_dict()
    doc["inputs"] = [f"/data/run/traces/rank{i:05d}.pt.trace.json.gz" for i in range(4000)]
    doc["job"] = {"per_step": [{"step": i, "critical_rank": i % 7} for i in range(3000)]}
    return doc


def _one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_a_report_with_sorted_keys_is_recognized(tmp_path: Path) -> None:
    doc = _big_doc()
    text = json.dumps(doc, sort_keys=True, indent=2)  # as `jq -S` writes it
    assert text.index('"schema"') > 200_000
    plain = tmp_path / "sorted.json"
    plain.write_text(text)
    gz = tmp_path / "sorted.json.gz"
    gz.write_bytes(gzip.compress(text.encode()))
    assert is_report_file(plain) and is_report_file(gz)
    assert read_report(gz).to_dict()["inputs"] == doc["inputs"]


def test_traces_and_other_json_are_not_reports(tmp_path: Path, kineto, event) -> None:
    trace = kineto([event("kernel", "k", 0, 5)])
    cases: dict[str, Any] = {
        "trace.json": trace,
        # "schema" only inside the events, after the traceEvents key: still a trace.
        "trace2.json": {"traceEvents": [{"args": {"schema": "gpuprof.report/1"}}], "schema": "gpuprof.report/1"},
        "list.json": [{"ph": "X", "name": "forward-compute", "schema": "gpuprof.report/1"}],
        "nested.json": {"meta": {"schema": "gpuprof.report/1"}},
        "other.json": {"schema": "something/1"},
        "number.json": 5,
    }
    for name, content in cases.items():
        path = tmp_path / name
        path.write_text(json.dumps(content))
        assert not is_report_file(path), name
    for name, raw in {"empty.json": b"", "cut.json": b'{"schema": "gpuprof.rep', "bin.json": bytes(range(256)),
                      "deep.json": b'{"a": ' + b"[" * 100_000}.items():
        (tmp_path / name).write_bytes(raw)
        assert not is_report_file(tmp_path / name), name
    assert not is_report_file(tmp_path)  # a folder


def test_a_report_with_a_newer_schema_is_recognized_and_refused(tmp_path: Path) -> None:
    path = tmp_path / "new.json"
    path.write_text(json.dumps({**BASE.to_dict(), "schema": "gpuprof.report/2"}))
    assert is_report_file(path)
    with pytest.raises(GpuprofError, match="gpuprof.report/2"):
        read_report(path)


def test_diff_and_rerender_take_a_sorted_report(cli, tmp_path: Path) -> None:
    (tmp_path / "base.json").write_text(json.dumps(BASE.to_dict()))
    (tmp_path / "sorted.json").write_text(json.dumps(_big_doc(), sort_keys=True))
    code, out, err = cli("diff", "base.json", "sorted.json")
    assert code == 0, err
    assert "step time" in out
    code, _out, err = cli("analyze", "sorted.json", "-o", "again.html")
    assert code == 0, err
    assert "<html" in (tmp_path / "again.html").read_text().lower()


def _corrupt_gzip_trace(path: Path) -> Path:
    rng = random.Random(3)
    events = [
        {"ph": "X", "cat": "kernel", "name": f"k{rng.randrange(50)}", "pid": 0, "tid": 7,
         "ts": i * 10.0, "dur": rng.uniform(1, 9)}
        for i in range(3000)
    ]
    data = bytearray(gzip.compress(json.dumps({"schemaVersion": 1, "traceEvents": events}).encode()))
    data[40] ^= 0xFF
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("command", ["analyze", "diff", "check", "baseline"])
def test_corrupt_gzip_is_one_line_exit_2(cli, tmp_path: Path, command: str) -> None:
    bad = _corrupt_gzip_trace(tmp_path / "trace.json.gz")
    (tmp_path / "base.json").write_text(json.dumps(BASE.to_dict()))
    argv = {
        "analyze": ("analyze", "trace.json.gz"),
        "diff": ("diff", "base.json", "trace.json.gz"),
        "check": ("check", "trace.json.gz", "--max-step-ms", "100"),
        "baseline": ("check", "base.json", "--baseline", "trace.json.gz"),
    }[command]
    code, _out, err = cli(*argv)
    assert code == 2
    assert bad.name in _one_error_line(err)


@pytest.mark.parametrize(
    "edit, says",
    [
        (lambda d: d["ranks"][0].update(lost_us=[1, 2]), "$.ranks[0].lost_us: expected an object, got an array"),
        (lambda d: d.update(inputs=3), "$.inputs: expected an array, got an integer"),
        (lambda d: d["recommendations"][0].pop("actions"), "$.recommendations[0]: missing key 'actions'"),
        (lambda d: d["ranks"][1]["lost_us"].update(dataloader="10"), "$.ranks[1].lost_us.dataloader: expected a number"),
    ],
)
def test_malformed_baseline_is_one_line_exit_2(cli, tmp_path: Path, edit: Any, says: str) -> None:
    (tmp_path / "cur.json").write_text(json.dumps(BASE.to_dict()))
    doc = BASE.to_dict()
    edit(doc)
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    code, _out, err = cli("check", "cur.json", "--baseline", "bad.json", "--junit", "j.xml")
    assert code == 2
    line = _one_error_line(err)
    assert line.startswith("gpuprof: bad.json: malformed gpuprof report: ") and says in line
    assert not (tmp_path / "j.xml").exists()
    code, _out, err = cli("diff", "bad.json", "cur.json")
    assert code == 2 and says in _one_error_line(err)


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_nan_or_infinity_in_a_saved_report_is_bad_input(cli, tmp_path: Path, token: str) -> None:
    (tmp_path / "cur.json").write_text(json.dumps(BASE.to_dict()))
    text = json.dumps(BASE.to_dict())
    assert '"dataloader": 20000.0' in text
    (tmp_path / "bad.json").write_text(text.replace('"dataloader": 20000.0', f'"dataloader": {token}', 1))
    code, out, err = cli("check", "cur.json", "--baseline", "bad.json")
    assert code == 2 and out == ""
    assert "$.ranks[0].lost_us.dataloader" in _one_error_line(err)
    code, _out, err = cli("analyze", "bad.json", "-o", "out.html")
    assert code == 2 and "bad.json" in _one_error_line(err)
    assert not (tmp_path / "out.html").exists()


@pytest.mark.parametrize(
    "raw, says",
    [
        (b'{"schema": "gpuprof.report/1", "ranks": [' + b"[" * 50_000 + b"]" * 50_000 + b"]}", "not a JSON report"),
        (b'{"schema": "gpuprof.report/1", "inputs": [], "ranks": [{"rank": ' + b"9" * 5000 + b"}]}", "not a JSON report"),
        (b'{"schema": "gpuprof.report/1", "inputs": [', "not a JSON report"),
        (b"\xff\xfe{}", "not a JSON report"),
    ],
)
def test_unparseable_reports_are_one_error(tmp_path: Path, raw: bytes, says: str) -> None:
    path = tmp_path / "r.json"
    path.write_bytes(raw)
    with pytest.raises(GpuprofError, match=says) as info:
        read_report(path)
    assert str(info.value).startswith(str(path)) and "\n" not in str(info.value)
