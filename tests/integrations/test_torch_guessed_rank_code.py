"""Outside torch.distributed the trace handler's report leaves out the "rank guessed"
warning by its code (gpuprof.model.notice.GUESSED_RANK), whatever its words."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import gpuprof.readers
from gpuprof.api import analyze
from gpuprof.integrations.torch import TraceHandler
from gpuprof.model import notice
from gpuprof.readers import ranks

Builder = Callable[..., dict[str, Any]]


@pytest.fixture
def trace(write_trace: Callable[..., Path], kineto: Builder, event: Builder) -> Path:
    # No distributedInfo, no rank in the name: the reader guesses rank 0.
    return write_trace("w.pt.trace.json", kineto([event("kernel", "k", 0, 100, pid=0)]))


def _report(trace: Path) -> Any:
    return TraceHandler(trace.parent, print_report=False, save_report=False)._report(trace)


def test_the_guess_is_in_the_plain_analysis_and_left_out_by_the_handler(trace: Path) -> None:
    assert any(ranks.GUESSED_RANK in w for w in analyze(trace).warnings)
    report = _report(trace)
    assert report is not None and not any(ranks.GUESSED_RANK in w for w in report.warnings)


def test_a_reworded_guess_is_still_left_out(trace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ranks, "GUESSED_RANK", "REWORDED: no rank in the trace")
    assert any("REWORDED" in w for w in analyze(trace).warnings)
    report = _report(trace)
    assert report is not None and not any("REWORDED" in w for w in report.warnings)


def test_a_guess_under_another_code_is_kept(trace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    original = gpuprof.readers.resolve_rank

    def other_code(*args: Any) -> Any:
        rank, warning = original(*args)
        return rank, None if warning is None else replace(warning, code=notice.TEXT)

    monkeypatch.setattr(gpuprof.readers, "resolve_rank", other_code)
    report = _report(trace)
    assert report is not None and any(ranks.GUESSED_RANK in w for w in report.warnings)
