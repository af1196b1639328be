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
