"""Issue 32: one input router (gpuprof.pipeline.inputs) for `analyze`, `check`, `diff` and the
API: the same input gives the same report whichever asks, a session folder is read once per
analysis, and one rule says that a rank is claimed once."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from clirun import run_cli

import gpuprof
from gpuprof.errors import BadTraceError
from gpuprof.model.report import report_to_dict
from gpuprof.pipeline import inputs
from gpuprof.readers.ranks import check_ranks
from gpuprof.record.backend import GpuSample
from gpuprof.session import SESSION_SCHEMA
from gpuprof.session import reader as session_reader
from gpuprof.session.writer import SessionWriter

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


def _session(root: Path, trace: bool, samples: bool = True) -> Path:
    w = SessionWriter(root)
    w.write_meta({"schema": SESSION_SCHEMA, "status": "finished", "command": ["python", "train.py"], "exit_code": 0,
                  "gpus": [], "hooks_enabled": True, "profile_schedule": {"wait": 1, "warmup": 1, "active": 3},
                  "warnings": []})
    if samples:
        for t in range(5):
            w.samples.append(GpuSample(gpu=0, uuid="GPU-a", util_gpu_pct=40.0 + t).to_record(100.0 + t))
    w.close()
    if trace:
        shutil.copy(SAMPLES / "healthy" / "rank0.pt.trace.json.gz", root / "traces" / "rank0.pt.trace.json.gz")
    return root


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Path]]:
    """Every read of a session folder (``read_session``, cache or not), by path."""
    got: list[Path] = []
    real = session_reader.read_session

    def counted(path: str | Path) -> Any:
        got.append(Path(path))
        return real(path)

    session_reader._CACHE.clear()
    monkeypatch.setattr(session_reader, "read_session", counted)
    yield got
    session_reader._CACHE.clear()


def _analyze_json(path: Path) -> dict[str, Any]:
    got = run_cli("analyze", str(path), "--format", "json")
    assert got.code == 0, got.stderr
    return json.loads(got.stdout)


def _check_json(path: Path, tmp_path: Path) -> dict[str, Any]:
    out = tmp_path / "check-report.json"
    got = run_cli("check", str(path), "--no-config", "--min-compute-pct", "0", "-o", str(out))
    assert got.code in (0, 1), got.stderr  # a verdict, never an input error
    return json.loads(out.read_text())


def _api_json(path: Path) -> dict[str, Any]:
    return json.loads(json.dumps(report_to_dict(gpuprof.analyze(path))))


@pytest.mark.parametrize("trace", [True, False], ids=["traces-and-samples", "samples-only"])
def test_a_session_gives_one_report_whichever_command_asks(tmp_path: Path, trace: bool) -> None:
    root = _session(tmp_path / "s", trace=trace)
    a = _analyze_json(root)
    assert bool(a["ranks"]) is trace and "samples" in a
    assert _check_json(root, tmp_path) == a
    assert _api_json(root) == a
    d = run_cli("diff", str(root), str(root), "--format", "json")
    assert d.code == 0 and "no trace files" not in d.stderr, d.stderr


ENTRIES: dict[str, Callable[[Path, Path], Any]] = {
    "analyze": lambda root, tmp: _analyze_json(root),
    "check": lambda root, tmp: _check_json(root, tmp),
    "api": lambda root, tmp: _api_json(root),
    "route+report_of": lambda root, tmp: inputs.report_of(inputs.route([root])),
}


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("trace", [True, False], ids=["traces-and-samples", "samples-only"])
def test_a_session_is_read_once_per_analysis(tmp_path: Path, reads: list[Path], entry: str, trace: bool) -> None:
    root = _session(tmp_path / "s", trace=trace)
    ENTRIES[entry](root, tmp_path)
    assert reads == [root]


def test_diff_reads_each_side_once(tmp_path: Path, reads: list[Path]) -> None:
    a, b = _session(tmp_path / "a", trace=True), _session(tmp_path / "b", trace=False)
    assert run_cli("diff", str(a), str(b), "--format", "json").code == 0
    assert sorted(reads) == [a, b]


def test_route_says_what_an_input_is(tmp_path: Path) -> None:
    root = _session(tmp_path / "s", trace=False)
    saved = tmp_path / "r.json"
    saved.write_text(json.dumps(_analyze_json(SAMPLES / "healthy")))
    assert inputs.route([root]).kind == "session"
    assert inputs.route([saved]).kind == "saved"
    assert inputs.route([SAMPLES / "healthy"]).kind == "traces"
    assert inputs.route([root, SAMPLES / "healthy"]).kind == "traces"  # several sessions and folders: traces
    with pytest.raises(gpuprof.GpuprofError, match="cannot be combined"):
        inputs.route([saved, SAMPLES / "healthy"])


class _R:
    def __init__(self, rank: int, source: str) -> None:
        self.rank, self.source = rank, source


def test_one_rule_for_ranks_claimed_twice() -> None:
    check_ranks([_R(0, "a.json"), _R(1, "a.json"), _R(2, "b.json")])
    with pytest.raises(BadTraceError, match="claimed by two files: a.json and b.json"):
        check_ranks([_R(0, "a.json"), _R(0, "b.json")])
    with pytest.raises(BadTraceError, match="appears twice in the same file"):
        check_ranks([_R(3, "a.json"), _R(3, "a.json")])


def test_the_pipeline_holds_the_summaries_to_the_same_rule(tmp_path: Path) -> None:
    # Two copies of one rank's trace in a folder: two files claim rank 0, as the readers say.
    for name in ("rank0.pt.trace.json.gz", "copy-rank0.pt.trace.json.gz"):
        shutil.copy(SAMPLES / "healthy" / "rank0.pt.trace.json.gz", tmp_path / name)
    got = run_cli("analyze", str(tmp_path), "--force")  # --force: past the check that they are one job
    assert got.code == 2 and "rank 0 is claimed by two files" in got.stderr
