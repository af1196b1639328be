"""One trace given twice, by whatever path, is refused before anything is read twice."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from clirun import run_cli

from gpuprof.errors import BadTraceError
from gpuprof.readers import discover

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "straggler"


@pytest.fixture
def job(tmp_path: Path) -> Path:
    """A copy of a two-rank sample job (traces only)."""
    folder = tmp_path / "job"
    folder.mkdir()
    for f in sorted(SAMPLE.glob("*.json.gz"))[:2]:
        shutil.copy(f, folder / f.name)
    return folder


def _one(folder: Path) -> Path:
    return sorted(folder.glob("*.json.gz"))[0]


def test_the_same_path_twice(job: Path) -> None:
    trace = _one(job)
    with pytest.raises(BadTraceError, match="given twice") as err:
        discover([trace, trace])
    assert err.value.path == str(trace)


def test_a_symlink_to_a_trace_already_given(job: Path, tmp_path: Path) -> None:
    trace = _one(job)
    link = tmp_path / "link.json.gz"
    link.symlink_to(trace)
    with pytest.raises(BadTraceError, match=f"the same file as {trace}") as err:
        discover([trace, link])
    assert err.value.path == str(link)


def test_a_folder_and_a_trace_inside_it(job: Path) -> None:
    with pytest.raises(BadTraceError, match="given twice|the same file as"):
        discover([job, _one(job)])


def test_two_spellings_of_one_path(job: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(job)
    trace = _one(job)
    with pytest.raises(BadTraceError, match="the same file as"):
        discover([trace, Path("..") / job.name / trace.name])


def test_distinct_files_with_equal_content_are_not_refused(job: Path, tmp_path: Path) -> None:
    # A copy is a different file (the user may really have two ranks with equal traces);
    # rank checks, not this one, decide about it.
    trace = _one(job)
    copy = tmp_path / "copy.json.gz"
    shutil.copy(trace, copy)
    assert [s.path for s in discover([trace, copy])] == [trace, copy]


def test_analyze_exits_2_with_one_line_naming_the_file(job: Path, tmp_path: Path) -> None:
    link = tmp_path / "again.json.gz"
    link.symlink_to(_one(job))
    result = run_cli("analyze", str(job), str(link), "--format", "json")
    assert result.traceback is None, result.traceback
    assert result.code == 2
    assert result.stderr_lines == [f"gpuprof: {link}: the same file as {_one(job)}: give each trace once (it would be counted as two ranks)"]
    assert result.stdout == ""
