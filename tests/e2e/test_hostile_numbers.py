"""Hostile numbers and depth in every input kind, not only in traces (issue 33, item 8).

Configuration files, session files, file names, environment variables, a timeline's
``meta-*.yaml`` and the API's arguments: a 5,000-digit integer, 10**5 levels of nesting,
a file that never ends. Each is one line and exit 2 (ValueError for the API), or is read
as far as it can be with a warning -- never a traceback, never the whole of /dev/zero.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from clirun import run_cli

import gpuprof
from gpuprof.session import SESSION_SCHEMA

ROOT = Path(__file__).resolve().parents[2]
HEALTHY = ROOT / "sample_traces" / "healthy"
TIMELINE = ROOT / "sample_traces" / "megatron-timeline"
DEEP = "[" * 100_000 + "]" * 100_000


def _one_line(r: object, code: int = 2) -> None:
    assert r.code == code, r.stderr  # type: ignore[attr-defined]
    assert r.traceback is None, r.traceback  # type: ignore[attr-defined]
    assert len(r.stderr_lines) == 1, r.stderr  # type: ignore[attr-defined]


# -- configuration ---------------------------------------------------------------------------

@pytest.mark.parametrize("body", [
    "min_compute_pct = " + "9" * 5000,  # was: ValueError (4300-digit limit), traceback
    "min_compute_pct = " + "1" + "0" * 400,
    "max_lost_pct = {host = " + "9" * 450 + "}",  # was: OverflowError
    "min_compute_pct = " + DEEP,  # was: RecursionError
    "[" + ".".join(["a"] * 50_000) + "]",
], ids=["5000-digits", "401-digits", "in-max_lost_pct", "deep-array", "deep-table"])
def test_a_config_with_hostile_numbers_or_depth_is_one_line(tmp_path: Path, body: str) -> None:
    cfg = tmp_path / "pyproject.toml"
    cfg.write_text("[tool.gpuprof.check]\n" + body + "\n" if not body.startswith("[") else body + "\n")
    r = run_cli("check", str(HEALTHY), "--config", str(cfg))
    if body.startswith("[a."):
        assert r.traceback is None and r.code in (0, 2), r.traceback  # nothing to check, or the one line
        return
    _one_line(r)
    assert str(cfg) in r.stderr and len(r.stderr) < 400


def test_config_dev_zero_is_refused_without_being_read_whole() -> None:
    r = run_cli("check", str(HEALTHY), "--config", "/dev/zero")  # was: 5.2 GB read, MemoryError
    _one_line(r)
    assert "/dev/zero: is larger than 4 MiB" in r.stderr


# -- session files ---------------------------------------------------------------------------

def _session(root: Path, meta: str | None = None) -> Path:
    (root / "hooks").mkdir(parents=True)
    (root / "session.json").write_text(meta or json.dumps(
        {"schema": SESSION_SCHEMA, "status": "finished", "command": ["x"], "gpus": [], "hooks_enabled": True}))
    return root


def test_deeply_nested_session_lines_are_skipped_and_counted(tmp_path: Path) -> None:
    s = _session(tmp_path / "s")
    deep = '{"time_unix_s": 1, "gpu": 0, "kind": "step", "x": ' + DEEP + "}\n"
    good = '{"time_unix_s": 2, "gpu": 0, "kind": "step", "pid": 1}\n'
    for name in ("samples.jsonl", "processes.jsonl", "events.jsonl", "hooks/rank0-1.jsonl"):
        (s / name).write_text(deep + good)
    session = gpuprof.session.read_session(s)  # was: RecursionError
    for name in ("samples.jsonl", "processes.jsonl", "events.jsonl", "hooks/*.jsonl"):
        assert f"{name}: 1 unreadable line skipped (not a JSON object)" in session.warnings
    r = run_cli("analyze", str(s))
    assert r.code == 0 and r.traceback is None, r.traceback


def test_process_lines_of_the_wrong_types_are_skipped(tmp_path: Path) -> None:
    s = _session(tmp_path / "s")
    (s / "processes.jsonl").write_text('{"pid":"x","time_unix_s":[]}\n{"time_unix_s": 1, "pid": 3, "gpu": null}\n'
                                       '{"time_unix_s": 2, "pid": null, "gpu": 0}\n')
    session = gpuprof.session.read_session(s)  # was: TypeError in session/records.py
    assert session.processes is not None and list(session.processes["pid"]) == [3, -1]


def test_deeply_nested_session_json_is_one_line(tmp_path: Path) -> None:
    s = _session(tmp_path / "s", meta='{"schema": "gpuprof.session/1", "x": ' + DEEP + "}")
    r = run_cli("analyze", str(s))
    _one_line(r)
    assert "nested too deeply" in r.stderr


# -- file names and the environment ---------------------------------------------------------

@pytest.mark.parametrize("name", ["rank" + "9" * 230 + ".json.gz", "worker9223372036854775808.json.gz"])
def test_a_rank_number_no_job_has_in_a_file_name_is_no_rank(tmp_path: Path, name: str) -> None:
    shutil.copy(HEALTHY / "rank0.pt.trace.json.gz", tmp_path / name)
    r = run_cli("analyze", str(tmp_path), "--format", "json")
    assert r.code == 0 and r.traceback is None, r.traceback  # was: OverflowError
    assert [rank["rank"] for rank in json.loads(r.stdout)["ranks"]] == [0]


@pytest.mark.parametrize("value", ["inf", "1e400", "9" * 400, "1e-9", "0", "-5", "nan", "lots"])
def test_a_max_event_mb_that_is_no_size_is_one_line(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPROF_MAX_EVENT_MB", value)
    r = run_cli("analyze", str(HEALTHY))
    _one_line(r)  # was: OverflowError (inf, 1e400), a refused trace with advice to set =0 (1e-9), or silence
    assert "GPUPROF_MAX_EVENT_MB=" in r.stderr and "from 1 to 1,000,000" in r.stderr


def test_a_meta_yaml_that_is_huge_or_holds_a_huge_size_is_read_in_part(tmp_path: Path) -> None:
    for f in TIMELINE.iterdir():
        if f.is_file():
            shutil.copy(f, tmp_path / f.name)
    meta = tmp_path / "meta-sim.yaml"
    text = meta.read_text().replace("pp_size: 4", "pp_size: " + "9" * 5000)
    meta.write_text(text)
    with open(meta, "r+b") as fh:  # 8 GB, sparse: reading it whole would take minutes and memory
        fh.truncate(8 << 30)
    r = run_cli("analyze", str(tmp_path), "--format", "json")
    assert r.code == 0 and r.traceback is None, r.traceback or r.stderr


# -- the API ---------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs", [{"max_input_gb": 1e300}, {"max_input_gb": float("inf")},
                                    {"max_input_gb": 10**400}])
def test_the_api_refuses_sizes_beyond_any_with_value_error(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="max_input_gb"):  # was: OverflowError
        gpuprof.analyze(HEALTHY, **kwargs)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def healthy_report() -> gpuprof.Report:
    return gpuprof.analyze(HEALTHY)


@pytest.mark.parametrize("value", [10**400, -(10**400), 1e300], ids=["10**400", "-10**400", "1e300"])
def test_the_api_refuses_percentages_beyond_any_with_value_error(value: object,
                                                                 healthy_report: gpuprof.Report) -> None:
    with pytest.raises(ValueError, match="min_compute_pct"):  # was: OverflowError
        gpuprof.check(healthy_report, min_compute_pct=value)  # type: ignore[arg-type]


def test_the_command_line_refuses_an_input_limit_beyond_any() -> None:
    r = run_cli("analyze", str(HEALTHY), "--max-input-gb", "1e300")
    _one_line(r)  # was: OverflowError
    assert "--max-input-gb" in r.stderr


@pytest.fixture(autouse=True)
def _no_event_limit_from_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    if "GPUPROF_MAX_EVENT_MB" in os.environ:
        monkeypatch.delenv("GPUPROF_MAX_EVENT_MB")
