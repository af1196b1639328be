"""``gpuprof analyze --scheduler``: per-rank work on a Dask cluster gives the local report.

A real local Dask cluster is started on loopback (worker processes, no dashboard); the
command runs in a subprocess exactly as a user would run it. Skips when the ``dask`` extra
is not installed or when the shared real traces are absent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import SHARED_TRACES

from gpuprof.errors import GpuprofError

TRACES = SHARED_TRACES
DLRM = TRACES / "dlrm-8rank"
REPO = Path(__file__).resolve().parents[2]


def _has_dask() -> bool:
    try:
        import dask.distributed  # noqa: F401
    except ImportError:
        return False
    return True


needs_dask = pytest.mark.skipif(
    not _has_dask(), reason="dask[distributed] not installed (pip install -e '.[dask]')"
)


def _analyze(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "gpuprof", "analyze", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=cwd,
        env=env,
    )


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    if not _has_dask():
        pytest.skip("dask[distributed] not installed (pip install -e '.[dask]')")
    from dask.distributed import LocalCluster

    cluster = LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
        # the workers must import this checkout's gpuprof, as a real cluster's would
        env={"PYTHONPATH": str(REPO)},
    )
    try:
        yield str(cluster.scheduler_address)
    finally:
        cluster.close()


@needs_dask
@pytest.mark.slow
def test_cluster_report_equals_local_report(scheduler: str) -> None:
    if not DLRM.is_dir():
        pytest.skip(f"real traces not found at {DLRM}")
    local = _analyze(str(DLRM), "--format", "json")
    assert local.returncode == 0, local.stderr
    remote = _analyze(str(DLRM), "--format", "json", "--scheduler", scheduler)
    assert remote.returncode == 0, remote.stderr
    local_report: dict[str, Any] = json.loads(local.stdout)
    remote_report: dict[str, Any] = json.loads(remote.stdout)
    assert len(remote_report["ranks"]) == 8
    assert [r["rank"] for r in remote_report["ranks"]] == list(range(8))
    assert remote_report == local_report


@needs_dask
@pytest.mark.slow
def test_relative_paths_reach_workers_and_keep_their_names(scheduler: str) -> None:
    """Workers run in another folder: a relative path must still be found, and the report
    must name the file as the user typed it, as a local run does."""
    if not DLRM.is_dir():
        pytest.skip(f"real traces not found at {DLRM}")
    one = min(DLRM.glob("worker3_*"))
    rel = os.path.relpath(one, DLRM.parent)
    local = _analyze(rel, "--format", "json", cwd=DLRM.parent)
    remote = _analyze(rel, "--format", "json", "--scheduler", scheduler, cwd=DLRM.parent)
    assert local.returncode == 0, local.stderr
    assert remote.returncode == 0, remote.stderr
    assert json.loads(remote.stdout) == json.loads(local.stdout)


@needs_dask
@pytest.mark.slow
def test_bad_trace_on_worker_is_one_line_exit_2(scheduler: str, tmp_path: Path) -> None:
    bad = tmp_path / "rank0.json"
    bad.write_text("this is not json")
    result = _analyze(str(bad), "--scheduler", scheduler)
    assert result.returncode == 2
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("gpuprof: ")
    assert str(bad) in lines[0]
    assert "Traceback" not in result.stderr


def test_unreachable_scheduler_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """No cluster at the address: a GpuprofError naming it, not a hang or a traceback."""
    if not _has_dask():
        pytest.skip("dask[distributed] not installed (pip install -e '.[dask]')")
    import gpuprof.pipeline.dask as dist

    monkeypatch.setattr(dist, "CONNECT_TIMEOUT_S", 1.0)
    from gpuprof.accounting.window import StepSelection
    from gpuprof.readers import TraceSource

    src = TraceSource(path=Path("/nonexistent/rank0.json"), rank_hint=0, order=0)
    with pytest.raises(GpuprofError, match="127.0.0.1:9"):
        dist.summarize_on_cluster([src], StepSelection(), "tcp://127.0.0.1:9")


def test_missing_dask_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without dask installed, --scheduler says which extra to install (no traceback)."""
    import builtins

    import gpuprof.pipeline.dask as dist

    real_import = builtins.__import__

    def no_dask(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "dask" or name.startswith("dask.") or name == "distributed":
            raise ModuleNotFoundError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_dask)
    from gpuprof.accounting.window import StepSelection

    with pytest.raises(GpuprofError, match=r"gpuprof\[dask\]"):
        dist.summarize_on_cluster([], StepSelection(), "tcp://127.0.0.1:9")


@needs_dask
@pytest.mark.slow
def test_file_the_workers_cannot_see_is_named(scheduler: str, tmp_path: Path) -> None:
    """A cluster without the shared file system: the error says so and names the file."""
    from gpuprof.accounting.window import StepSelection
    from gpuprof.pipeline.dask import summarize_on_cluster
    from gpuprof.readers import TraceSource

    gone = tmp_path / "rank0.pt.trace.json"  # never created: no worker can see it
    src = TraceSource(path=gone, rank_hint=0, order=0)
    with pytest.raises(GpuprofError, match="not found on Dask worker") as info:
        summarize_on_cluster([src], StepSelection(), scheduler)
    assert str(gone) in str(info.value)
