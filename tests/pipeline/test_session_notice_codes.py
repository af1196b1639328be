"""A CPU-only session's report leaves out the runner's "no GPU sampling" warning by its code
(``session.no_sampling``, written beside the warning in events.jsonl), whatever its words."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import NoReturn

import pytest
from repo_paths import SAMPLES

from gpuprof.model import notice
from gpuprof.pipeline.session_report import session_outcome, session_report
from gpuprof.record import runner
from gpuprof.record.backend import BackendUnavailable
from gpuprof.record.runner import RunOptions, run_command
from gpuprof.session import read_session
from gpuprof.session.layout import EVENTS_FILE
from gpuprof.session.notices import session_notices

CPU_TRACE = SAMPLES / "cpu-training" / "worker0.pt.trace.json.gz"


def _no_driver() -> NoReturn:
    raise BackendUnavailable("NVML Shared Library Not Found")


def _run(root: Path, with_trace: bool) -> Path:
    res = run_command(["sh", "-c", "exit 0"], root, RunOptions(hooks=False), backend_factory=_no_driver,
                      warn=lambda _msg: None)
    assert res.exit_code == 0
    if with_trace:
        (root / "traces").mkdir(exist_ok=True)
        shutil.copy(CPU_TRACE, root / "traces" / "rank0.pt.trace.json.gz")
    return root


def _nvml_line(root: Path) -> str:
    (line,) = [w for w in read_session(root).warnings if "NVML Shared Library Not Found" in w]
    return line


@pytest.mark.parametrize("with_trace", [False, True])
def test_a_reworded_nvml_warning_is_left_out_of_a_cpu_only_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, with_trace: bool
) -> None:
    monkeypatch.setattr(runner, "NO_SAMPLING", "SAMPLING OFF")
    root = _run(tmp_path / "s", with_trace)
    line = _nvml_line(root)
    assert line.startswith("SAMPLING OFF")
    (n,) = [n for n in session_notices(read_session(root)) if n.text == line]
    assert n.code == notice.NO_SAMPLING
    made = session_outcome(root)
    assert made.report.extra["run"]["cpu_only"] is True
    assert line not in made.report.warnings
    assert made.report.warnings == notice.words(made.notices)


def test_under_another_code_the_warning_stays(tmp_path: Path) -> None:
    root = _run(tmp_path / "s", with_trace=True)
    line = _nvml_line(root)
    events = root / EVENTS_FILE
    recs = [json.loads(x) for x in events.read_text().splitlines()]
    assert [r.get("code") for r in recs if r.get("message") == line] == [notice.NO_SAMPLING]
    events.write_text("".join(json.dumps({**r, "code": "other.code"} if "code" in r else r) + "\n" for r in recs))
    assert line in session_report(root).warnings


def test_a_session_written_before_codes_is_read_by_its_words(tmp_path: Path) -> None:
    root = _run(tmp_path / "s", with_trace=True)
    line = _nvml_line(root)
    events = root / EVENTS_FILE
    recs = [json.loads(x) for x in events.read_text().splitlines()]
    events.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "code"}) + "\n" for r in recs))
    assert line not in session_report(root).warnings
