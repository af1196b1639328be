"""Session folder: atomic metadata, append-only samples, tolerant reading."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from gpuprof.errors import GpuprofError
from gpuprof.record.backend import GpuSample
from gpuprof.session import SESSION_SCHEMA, is_session, read_session
from gpuprof.session.layout import META_FILE, SAMPLE_COLUMNS, SAMPLES_FILE
from gpuprof.session.writer import JsonlAppender, SessionWriter


def _meta(**kw: object) -> dict[str, object]:
    m: dict[str, object] = {"schema": SESSION_SCHEMA, "status": "finished", "command": ["python", "x.py"], "gpus": []}
    m.update(kw)
    return m


def test_roundtrip_samples_with_units_and_unknowns(tmp_path: Path) -> None:
    w = SessionWriter(tmp_path / "s")
    w.write_meta(_meta())
    w.samples.append(GpuSample(gpu=0, uuid="GPU-a", util_gpu_pct=50.0, power_w=None).to_record(10.0))
    w.samples.append(GpuSample(gpu=1, uuid="GPU-b", util_gpu_pct=0.0, power_w=300.0).to_record(10.0))
    w.close()
    s = read_session(tmp_path / "s")
    assert is_session(tmp_path / "s")
    assert s.samples is not None
    assert list(s.samples.columns[: len(SAMPLE_COLUMNS)]) == list(SAMPLE_COLUMNS)
    # Unknown is NaN, a real zero stays zero.
    assert pd.isna(s.samples.loc[0, "power_w"]) and s.samples.loc[1, "power_w"] == 300.0
    assert s.samples.loc[1, "util_gpu_pct"] == 0.0
    assert not s.interrupted


def test_jsonl_files_are_readable_with_pandas_directly(tmp_path: Path) -> None:
    w = SessionWriter(tmp_path)
    w.write_meta(_meta())
    for i in range(3):
        w.samples.append(GpuSample(gpu=0, uuid="GPU-a", util_gpu_pct=float(i)).to_record(float(i)))
    w.close()
    df = pd.read_json(tmp_path / SAMPLES_FILE, lines=True)
    assert list(df["util_gpu_pct"]) == [0.0, 1.0, 2.0]


def test_torn_last_line_is_dropped(tmp_path: Path) -> None:
    w = SessionWriter(tmp_path)
    w.write_meta(_meta(status="running"))
    w.samples.append(GpuSample(gpu=0, uuid="GPU-a", util_gpu_pct=10.0).to_record(1.0))
    w.close()
    with open(tmp_path / SAMPLES_FILE, "a") as fh:
        fh.write('{"time_unix_s": 2.0, "gpu": 0, "util_gp')  # killed mid-write
    s = read_session(tmp_path)
    assert s.samples is not None and len(s.samples) == 1
    assert s.interrupted
    assert any("did not finish" in w for w in s.warnings)


def test_flush_cadence_follows_the_clock(tmp_path: Path) -> None:
    t = [0.0]
    f = JsonlAppender(tmp_path / "x.jsonl", flush_interval_s=1.0, clock=lambda: t[0])
    f.append({"a": 1})
    assert (tmp_path / "x.jsonl").read_text() == ""  # buffered, less than a second old
    t[0] = 0.6
    f.append({"a": 2})
    assert (tmp_path / "x.jsonl").read_text() == ""
    t[0] = 1.0
    assert f.maybe_flush()
    assert (tmp_path / "x.jsonl").read_text().count("\n") == 2
    f.close()


def test_nan_is_written_as_null(tmp_path: Path) -> None:
    f = JsonlAppender(tmp_path / "x.jsonl")
    f.append({"v": float("nan")})
    f.close()
    assert json.loads((tmp_path / "x.jsonl").read_text()) == {"v": None}


def test_not_a_session(tmp_path: Path) -> None:
    assert not is_session(tmp_path)
    with pytest.raises(GpuprofError, match="not a gpuprof session"):
        read_session(tmp_path)
    with pytest.raises(GpuprofError, match="not a gpuprof session"):
        read_session(tmp_path / "missing")


def test_bad_metadata_names_the_file(tmp_path: Path) -> None:
    (tmp_path / META_FILE).write_text("{not json")
    with pytest.raises(GpuprofError) as exc:
        read_session(tmp_path)
    assert META_FILE in str(exc.value)


def test_other_schema_is_refused(tmp_path: Path) -> None:
    (tmp_path / META_FILE).write_text(json.dumps(_meta(schema="gpuprof.session/9")))
    with pytest.raises(GpuprofError, match="gpuprof.session/9"):
        read_session(tmp_path)


def test_metadata_write_is_atomic(tmp_path: Path) -> None:
    w = SessionWriter(tmp_path)
    w.write_meta(_meta(status="running"))
    w.write_meta(_meta(status="finished", exit_code=3))
    assert json.loads((tmp_path / META_FILE).read_text())["exit_code"] == 3
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp file left


def test_traces_and_hook_records_are_found(tmp_path: Path) -> None:
    w = SessionWriter(tmp_path)
    w.write_meta(_meta())
    w.close()
    (tmp_path / "traces" / "rank0.pt.trace.json.gz").write_bytes(b"")
    (tmp_path / "traces" / ".123.tmp.pt.trace.json.gz").write_bytes(b"")  # an unfinished export
    (tmp_path / "hooks" / "rank0-1.jsonl").write_text(
        '{"time_unix_s": 1, "kind": "step", "step": 1}\n{"time_unix_s": 2, "kind": "error", "message": "boom"}\n'
    )
    s = read_session(tmp_path)
    assert [p.name for p in s.trace_paths] == ["rank0.pt.trace.json.gz"]
    assert s.hook_errors == ("boom",)
    assert s.samples is None
    assert [w for w in s.warnings if "unfinished trace" in w] == [
        "an unfinished trace was skipped: traces/.123.tmp.pt.trace.json.gz (its process stopped while writing it)"
    ]


def test_no_unfinished_trace_warning_without_a_tmp_file(tmp_path: Path) -> None:
    w = SessionWriter(tmp_path)
    w.write_meta(_meta())
    w.close()
    (tmp_path / "traces" / ".hidden.json").write_bytes(b"")  # hidden, but not an export in progress
    assert not [x for x in read_session(tmp_path).warnings if "unfinished" in x]


@pytest.mark.parametrize(
    "key, value, says",
    [
        ("warnings", 5, "'warnings' should be a list of strings, not the number 5"),
        ("warnings", ["ok", 3], "'warnings' should be a list of strings"),
        ("gpus", {"index": 0}, "'gpus' should be a list of objects, not an object"),
        ("exit_code", "0", "'exit_code' should be an integer, not a string"),
        ("exit_code", True, "'exit_code' should be an integer, not a boolean"),
        ("profile_schedule", {"wait": "5"}, "'profile_schedule' should be an object of integer"),
        ("hooks_enabled", "yes", "'hooks_enabled' should be true or false"),
        ("status", None, "'status' should be a string, not null"),
    ],
)
def test_metadata_of_the_wrong_type_is_one_clear_error(tmp_path: Path, key: str, value: object, says: str) -> None:
    (tmp_path / META_FILE).write_text(json.dumps(_meta(**{key: value})))
    with pytest.raises(GpuprofError) as exc:
        read_session(tmp_path)
    assert says in str(exc.value) and META_FILE in str(exc.value)


def test_metadata_nulls_where_unknown_is_allowed(tmp_path: Path) -> None:
    (tmp_path / META_FILE).write_text(json.dumps(_meta(exit_code=None, signal=None, pid=None, end_time_unix_s=None,
                                                       profile_schedule=None)))
    assert read_session(tmp_path).meta["exit_code"] is None


def test_analyze_a_session_with_wrong_metadata_types_exits_2_with_one_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    (tmp_path / META_FILE).write_text(json.dumps(_meta(warnings=5)))
    p = subprocess.run([sys.executable, "-m", "gpuprof", "analyze", str(tmp_path)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and "'warnings' should be a list of strings" in p.stderr
    assert "Traceback" not in p.stderr


def test_analyze_reports_an_unfinished_trace_instead_of_ignoring_it(tmp_path: Path) -> None:
    import shutil

    from gpuprof.cli.run import session_report

    samples = Path(__file__).resolve().parents[2] / "sample_traces" / "healthy"
    w = SessionWriter(tmp_path)
    w.write_meta(_meta())
    w.close()
    shutil.copy(samples / "rank0.pt.trace.json.gz", tmp_path / "traces" / "rank0.pt.trace.json.gz")
    (tmp_path / "traces" / ".4242.tmp.pt.trace.json.gz").write_bytes(b"\x1f\x8b")  # cut off mid-export
    report = session_report(tmp_path)
    assert [r.rank for r in report.ranks] == [0]
    assert any("an unfinished trace was skipped: traces/.4242.tmp.pt.trace.json.gz" in x for x in report.warnings)
