"""Shared fixtures: the real traces beside the clone, and writers for constructed traces."""

from __future__ import annotations

import gzip
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# The real traces: ../shared/traces beside the clone, or the folder GPUPROF_SHARED_TRACES
# names (the tests that need them skip when it is absent). Tests import it from here.
from repo_paths import SHARED_TRACES

WriteTrace = Callable[..., Path]


@pytest.fixture(scope="session", autouse=True)
def _shared_reports_stay_unchanged() -> Iterator[None]:
    """The analyses ``analyzed.py`` shares between tests are read-only: fail the session (an
    error at its last test's teardown) if a test changed one."""
    yield
    analyzed = sys.modules.get("analyzed")  # not imported: nothing was shared
    if analyzed is not None:
        assert not analyzed.changed(), f"a test changed a shared report: {analyzed.changed()}"


@pytest.fixture
def shared_traces() -> Path:
    """``../shared/traces`` (real traces from real jobs; ``GPUPROF_SHARED_TRACES`` names
    another folder); skips the test when absent."""
    if not SHARED_TRACES.is_dir():
        pytest.skip(f"real traces not found at {SHARED_TRACES} (beside the clone, or set GPUPROF_SHARED_TRACES)")
    return SHARED_TRACES


@pytest.fixture
def write_trace(tmp_path: Path) -> WriteTrace:
    """``write_trace(name, content, gz=False)`` -> path of a file under ``tmp_path``.

    ``content`` is a JSON-able object (dumped as JSON), ``str`` or ``bytes`` (written as
    is); ``gz=True`` gzips it. Parent folders in ``name`` are created.
    """

    def write(name: str, content: Any, gz: bool = False) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            data = content
        elif isinstance(content, str):
            data = content.encode()
        else:
            data = json.dumps(content).encode()
        path.write_bytes(gzip.compress(data) if gz else data)
        return path

    return write


def kineto_trace(
    events: list[dict[str, Any]],
    rank: int | None = None,
    world_size: int | None = None,
    device_name: str = "Test GPU",
    **top: Any,
) -> dict[str, Any]:
    """A new-schema Kineto trace document around ``events``."""
    doc: dict[str, Any] = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": device_name, "totalGlobalMem": 80 * 2**30}],
    }
    if rank is not None or world_size is not None:
        info: dict[str, Any] = {"backend": "nccl"}
        if rank is not None:
            info["rank"] = rank
        if world_size is not None:
            info["world_size"] = world_size
        doc["distributedInfo"] = info
    doc.update(top)
    doc["traceEvents"] = events
    return doc


def ev(
    cat: str, name: str, ts: float, dur: float, pid: int | str = 100, tid: int | str = 100, **args: Any
) -> dict[str, Any]:
    """One complete (``X``) event; ``args`` keys with spaces are passed via ``**{...}``."""
    e: dict[str, Any] = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args:
        e["args"] = args
    return e


@pytest.fixture
def kineto() -> Callable[..., dict[str, Any]]:
    """The :func:`kineto_trace` builder."""
    return kineto_trace


@pytest.fixture
def event() -> Callable[..., dict[str, Any]]:
    """The :func:`ev` builder of one complete event."""
    return ev
