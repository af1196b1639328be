"""``gpuprof annotate``: the original trace, unchanged, plus one lost-time slice per interval."""

from __future__ import annotations

import gzip
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpuprof.accounting.attribution import Attribution
from gpuprof.cli import main
from gpuprof.model.report import CAUSES, Cause
from gpuprof.pipeline import run_analysis
from gpuprof.render.annotate import TRACK_PREFIX, annotate_file, lost_time_events, unused_pids

Builder = Callable[..., dict[str, Any]]
CPU = 4321
GPU = 0
KERNELS = [(100.0, 300.0), (500.0, 900.0), (1100.0, 1500.0), (1600.0, 1950.0)]  # (start, end) µs


def _trace(kineto: Builder, event: Builder) -> dict[str, Any]:
    events = [
        event("user_annotation", "ProfilerStep#1", 0, 1000, pid=CPU, tid=CPU),
        event("user_annotation", "ProfilerStep#2", 1000, 1000, pid=CPU, tid=CPU),
        event("cuda_runtime", "cudaStreamSynchronize", 300, 190, pid=CPU, tid=CPU, correlation=99),
    ]
    for i, (s, e) in enumerate(KERNELS, 1):
        events.append(event("cuda_runtime", "cudaLaunchKernel", s - 20, 5, pid=CPU, tid=CPU, correlation=i))
        events.append(event("kernel", f"gemm_{i}", s, e - s, pid=GPU, tid=7, stream=7, correlation=i))
    # Things a converter must keep exactly: an integer no C long holds, unicode, extra keys.
    events.append({"ph": "i", "name": "marker ü", "pid": CPU, "tid": CPU, "ts": 5, "s": "t", "args": {"big": 2**80}})
    return kineto(events, rank=0, world_size=1, custom_top_level={"keep": [1, 2.50, "x"]})


@pytest.fixture
def trace_path(write_trace: Callable[..., Path], kineto: Builder, event: Builder) -> Path:
    return write_trace("rank0.pt.trace.json", _trace(kineto, event))


def _slices(doc: Any) -> list[dict[str, Any]]:
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    return [e for e in events if e.get("cat") == "gpuprof.lost"]


def test_original_kept_and_slices_partition_lost_time(trace_path: Path, tmp_path: Path) -> None:
    analysis = run_analysis([trace_path])
    out = tmp_path / "out.json"
    done = annotate_file(trace_path, out, analysis.attributions)
    original = json.loads(trace_path.read_text())
    doc = json.loads(out.read_text())
    n = len(original["traceEvents"])
    assert doc["traceEvents"][:n] == original["traceEvents"]  # every original event, in order
    assert {k: v for k, v in doc.items() if k != "traceEvents"} == {k: v for k, v in original.items() if k != "traceEvents"}
    assert doc["traceEvents"][n - 1]["args"]["big"] == 2**80
    pid = done.pids[0]
    assert pid not in {e.get("pid") for e in original["traceEvents"]}
    meta = [e for e in doc["traceEvents"][n:] if e["ph"] == "M"]
    assert {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": f"{TRACK_PREFIX} (rank 0)"}} in meta
    threads = {e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert threads == {i: c.value for i, c in enumerate(CAUSES, 1)}
    slices = _slices(doc)
    assert slices and len(slices) == done.slices
    rep = analysis.report.ranks[0]
    for cause in CAUSES:
        got = sum(s["dur"] for s in slices if s["name"] == cause.value)
        assert got == pytest.approx(rep.lost_us[cause], abs=0.01)
        assert all(threads[s["tid"]] == cause.value for s in slices if s["name"] == cause.value)
    # Lost time never overlaps a kernel, and with the kernels it covers the window exactly.
    for s in slices:
        for ks, ke in KERNELS:
            assert s["ts"] + s["dur"] <= ks + 1e-6 or s["ts"] >= ke - 1e-6, (s, ks, ke)
    assert sum(s["dur"] for s in slices) + rep.compute_us == pytest.approx(rep.window_us, abs=0.01)


def test_gzip_in_and_out_and_array_format(tmp_path: Path, kineto: Builder, event: Builder) -> None:
    events = _trace(kineto, event)["traceEvents"]
    src = tmp_path / "arr.json.gz"
    src.write_bytes(gzip.compress(json.dumps(events).encode()))  # the bare-array trace format
    out = tmp_path / "arr.out.json.gz"
    analysis = run_analysis([src])
    annotate_file(src, out, analysis.attributions)
    doc = json.loads(gzip.decompress(out.read_bytes()))
    assert isinstance(doc, list) and doc[: len(events)] == events and _slices(doc)


def test_events_for_known_intervals() -> None:
    att = Attribution(
        lost_us={c: 0.0 for c in CAUSES} | {Cause.DATALOADER: 30.0, Cause.HOST: 5.0},
        intervals={c: (np.empty(0), np.empty(0)) for c in CAUSES}
        | {Cause.DATALOADER: (np.array([10.0, 50.0]), np.array([30.0, 60.0])), Cause.HOST: (np.array([0.5]), np.array([5.5]))},
    )
    ev = lost_time_events(3, 77, att)
    xs = [(e["name"], e["tid"], e["ts"], e["dur"]) for e in ev if e["ph"] == "X"]
    dl, host = CAUSES.index(Cause.DATALOADER) + 1, CAUSES.index(Cause.HOST) + 1
    assert xs == [("dataloader", dl, 10.0, 20.0), ("dataloader", dl, 50.0, 10.0), ("host", host, 0.5, 5.0)]
    assert all(e["pid"] == 77 for e in ev)


def test_unused_pids() -> None:
    assert unused_pids([0, 1, 4321, "4400", "GPU", None, True], 2) == [4401, 4402]
    assert unused_pids([], 1) == [1]


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path):
    monkeypatch.chdir(tmp_path)

    def run(*args: str) -> tuple[int, str]:
        monkeypatch.setattr(sys, "argv", ["gpuprof", *args])
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        return code, capsys.readouterr().err

    return run


def test_cli(cli, trace_path: Path, tmp_path: Path, write_trace: Callable[..., Path]) -> None:
    code, err = cli("annotate", str(trace_path), "-o", "a.json")
    assert code == 0 and "lost-time slices" in err and _slices(json.loads((tmp_path / "a.json").read_text()))
    code, err = cli("annotate", str(trace_path), "-o", "a.txt")
    assert code == 2 and ".json or .json.gz" in err
    bad = write_trace("bad.json", '{"traceEvents": [')
    code, err = cli("annotate", str(bad), "-o", "b.json")
    assert code == 2 and "bad.json" in err and "Traceback" not in err
    assert not (tmp_path / "b.json").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".b.json")]  # no temp file left
    code, err = cli("annotate", str(trace_path), "-o", str(trace_path))
    assert code == 2 and "overwrite the input" in err


def test_real_trace(shared_traces: Path, tmp_path: Path) -> None:
    src = next((shared_traces / "edge-large-integer").glob("*.json*"))
    analysis = run_analysis([src])
    out = tmp_path / "big.json.gz"
    annotate_file(src, out, analysis.attributions)
    opener = gzip.open if src.name.endswith(".gz") else open
    with opener(src, "rt") as fh:  # type: ignore[operator]
        original = json.load(fh)
    doc = json.loads(gzip.decompress(out.read_bytes()))
    events = original["traceEvents"] if isinstance(original, dict) else original
    new = doc["traceEvents"] if isinstance(doc, dict) else doc
    assert new[: len(events)] == events  # integers too large for a C long survive exactly
    total = sum(s["dur"] for s in _slices(doc))
    assert total == pytest.approx(sum(r.lost_total_us for r in analysis.report.ranks), rel=1e-6, abs=0.01)


def test_folder_gets_one_annotated_trace_per_rank(cli, tmp_path: Path, write_trace: Callable[..., Path],
                                                  kineto: Builder, event: Builder) -> None:  # fmt: skip
    for r in (0, 1):
        doc = _trace(kineto, event)
        doc["distributedInfo"] = {"backend": "nccl", "rank": r, "world_size": 2}
        write_trace(f"job/rank{r}.pt.trace.json.gz", doc, gz=True)
    job = tmp_path / "job"
    code, err = cli("annotate", str(job), "-o", "out")
    assert code == 0, err
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]
    lost_by_rank = {r.rank: r.lost_total_us for r in run_analysis([job]).report.ranks}
    for r in (0, 1):
        doc = json.loads(gzip.decompress((tmp_path / "out" / f"rank{r}.pt.trace.json.gz").read_bytes()))
        tracks = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name" and "gpuprof" in str(e["args"])}
        assert tracks == {f"{TRACK_PREFIX} (rank {r})"}
        assert sum(s["dur"] for s in _slices(doc)) == pytest.approx(lost_by_rank[r], abs=0.01)
    # One rank's file analyzed with its job: only that rank's track, same figures as the job's.
    code, err = cli("annotate", str(job / "rank1.pt.trace.json.gz"), "--job", str(job), "-o", "r1.json")
    assert code == 0, err
    doc = json.loads((tmp_path / "r1.json").read_text())
    assert {s["args"]["rank"] for s in _slices(doc)} == {1}
    assert sum(s["dur"] for s in _slices(doc)) == pytest.approx(lost_by_rank[1], abs=0.01)
    code, err = cli("annotate", str(job), "-o", "x.json")
    assert code == 2 and "output folder" in err


def test_folder_with_stray_json_says_what_it_skipped(cli, tmp_path: Path, write_trace: Callable[..., Path],
                                                     kineto: Builder, event: Builder) -> None:  # fmt: skip
    write_trace("job/rank0.pt.trace.json", _trace(kineto, event))
    write_trace("job/config.json", {"lr": 0.1, "batch": 8})
    write_trace("job/stamp.json", [1, 2, 3])
    code, err = cli("annotate", str(tmp_path / "job"), "-o", "out.json")
    assert code == 0, err
    skipped = [line for line in err.splitlines() if line.startswith("gpuprof: skipped")]
    assert len(skipped) == 2
    assert any("config.json" in line for line in skipped) and any("stamp.json" in line for line in skipped)
    assert _slices(json.loads((tmp_path / "out.json").read_text()))
    assert not (tmp_path / "out").exists()
