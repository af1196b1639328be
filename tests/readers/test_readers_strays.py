"""JSON files in a trace folder that are not traces (configs, stamp files) are skipped.

Only files found by scanning a folder are skipped, each with a warning; a file the user
names is read and fails, and damaged files that look like traces still fail, naming the file.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuprof.errors import BadTraceError
from gpuprof.readers import discover, load_all
from gpuprof.simulate import generate

Builder = Callable[..., dict[str, Any]]
WriteTrace = Callable[..., Path]


def _job(write_trace: WriteTrace, kineto: Builder, event: Builder) -> Path:
    doc = kineto([event("kernel", "k", 0, 1, pid=0)])
    write_trace("job/rank0.json", doc)
    write_trace("job/rank1.json.gz", doc, gz=True)
    write_trace("job/config.json", {"lr": 0.1, "layers": [1, 2]})
    write_trace("job/stamp.json", [1, 2, 3])
    write_trace("job/done.json.gz", {"finished": True}, gz=True)
    write_trace("job/meta.json", {"traceName": "x", "events": [{"a": 1}]})
    return write_trace("job/rank0.json", doc).parent


def test_folder_scan_skips_json_that_is_not_a_trace(
    write_trace: WriteTrace, kineto: Builder, event: Builder
) -> None:
    job = _job(write_trace, kineto, event)
    skipped: list[str] = []
    sources = discover([job], skipped)
    assert [s.path.name for s in sources] == ["rank0.json", "rank1.json.gz"]
    assert [s.order for s in sources] == [0, 1]  # skipped files take no place in the order
    names = sorted(line.split(": ")[0].removeprefix("skipped ") for line in skipped)
    assert names == sorted(str(job / n) for n in ("config.json", "stamp.json", "done.json.gz", "meta.json"))
    assert all("JSON is not a trace" in line for line in skipped)
    assert [t.rank for t in load_all([job])] == [0, 1]


def test_named_file_that_is_not_a_trace_still_fails(write_trace: WriteTrace) -> None:
    path = write_trace("config.json", {"lr": 0.1})
    (src,) = discover([path])
    with pytest.raises(BadTraceError, match="JSON is not a trace") as info:
        src.load()
    assert info.value.path == str(path)


def test_folder_of_only_non_traces_fails(write_trace: WriteTrace, tmp_path: Path) -> None:
    write_trace("cfg/config.json", {"lr": 0.1})
    write_trace("cfg/stamp.json", {"ok": True})
    with pytest.raises(BadTraceError, match="holds no traces") as info:
        discover([tmp_path / "cfg"])
    assert info.value.path == str(tmp_path / "cfg")
    assert "config.json: JSON is not a trace" in info.value.message


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("rank1.json.gz", b"\x1f\x8b\x08\x00garbage, not deflate data"),  # bad gzip
        ("rank1.json", b'{"schemaVersion": 1, "traceEvents": [{"ph": "X", "na'),  # cut before any event
        ("rank1.json", b"this is not JSON"),
    ],
)
def test_damaged_file_in_a_folder_still_fails_naming_it(
    write_trace: WriteTrace, kineto: Builder, event: Builder, tmp_path: Path, name: str, content: bytes
) -> None:
    write_trace("job/rank0.json", kineto([event("kernel", "k", 0, 1, pid=0)]))
    bad = write_trace(f"job/{name}", content)
    skipped: list[str] = []
    assert bad in [s.path for s in discover([tmp_path / "job"], skipped)] and not skipped
    with pytest.raises(BadTraceError) as info:
        load_all([tmp_path / "job"])
    assert info.value.path == str(bad)


def test_trace_event_file_of_unknown_events_is_not_skipped(
    write_trace: WriteTrace, kineto: Builder, event: Builder, tmp_path: Path
) -> None:
    # Trace-event JSON with no complete events of a known kind (counters only) looks like
    # a trace: it is read, and fails naming the file, rather than being left out unsaid.
    write_trace("job/rank0.json", kineto([event("kernel", "k", 0, 1, pid=0)]))
    other = write_trace("job/counters.json", {"traceEvents": [{"ph": "C", "name": "c", "ts": 1, "pid": 1}]})
    skipped: list[str] = []
    assert [s.path.name for s in discover([tmp_path / "job"], skipped)] == ["counters.json", "rank0.json"]
    assert not skipped
    with pytest.raises(BadTraceError, match="not a trace") as info:
        load_all([tmp_path / "job"])
    assert info.value.path == str(other)


def _analyze(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuprof", "analyze", *args, "--format", "json"],
        capture_output=True,
        text=True,
        check=False,
    )


def test_analyze_reports_the_skipped_file_and_fails_on_a_damaged_one(tmp_path: Path) -> None:
    job = generate("healthy", tmp_path / "job", steps=2, layers=2)
    folder = job if job.is_dir() else job.parent
    (folder / "hparams.json").write_text(json.dumps({"lr": 3e-4}))
    proc = _analyze(str(folder))
    assert proc.returncode == 0, proc.stderr
    warnings = json.loads(proc.stdout)["warnings"]
    assert f"skipped {folder / 'hparams.json'}: JSON is not a trace (no 'traceEvents' list)" in warnings
    named = _analyze(str(folder / "hparams.json"))
    assert named.returncode == 2 and "hparams.json" in named.stderr and "Traceback" not in named.stderr
    bad = folder / "rank1.pt.trace.json.gz"
    bad.write_bytes(gzip.compress(b'{"traceEvents": [')[:-12])
    # A damaged trace of the folder is left out, named on stderr and in the report, and the
    # other ranks analyzed (issue 20, case 22); --strict makes it exit 2, one line.
    damaged = _analyze(str(folder))
    assert damaged.returncode == 0 and str(bad) in damaged.stderr and "Traceback" not in damaged.stderr
    assert any(w.startswith(f"skipped {bad}, which cannot be read") for w in json.loads(damaged.stdout)["warnings"])
    strict = _analyze(str(folder), "--strict")
    assert strict.returncode == 2 and str(bad) in strict.stderr and "Traceback" not in strict.stderr
