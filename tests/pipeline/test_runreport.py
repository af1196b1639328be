"""The whole run in `gpuprof analyze SESSION` (gpuprof/pipeline/runreport.py and the
renderers): the changes named with their step and cause, the windows, the step clock, the
JSON schema -- on session folders written here, damaged ones included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuprof.model.report import CAUSES, Cause, RankReport, Report
from gpuprof.model.validate import first_problem
from gpuprof.pipeline.session_report import session_report
from gpuprof.pipeline.windowdiag import breakdown, diagnose
from gpuprof.render import render
from gpuprof.session.windows import WindowRequest, window_dir, write_request

T0 = 1_700_000_000.0


def session(root: Path, steps: int = 120, change_at: int = 60, slow_rank: int | None = None) -> Path:
    """Two ranks, 10 ms steps, 25 ms from ``change_at`` on (rank ``slow_rank`` reaching
    backward late from then on)."""
    (root / "hooks").mkdir(parents=True)
    meta = {"schema": "gpuprof.session/1", "revision": 2, "status": "finished", "command": ["python", "train.py"],
            "hooks_enabled": True, "gpus": [], "versions": {}, "warnings": [], "start_time_unix_s": T0 - 1.0,
            "end_time_unix_s": T0 + 5.0, "profile_schedule": {"wait": 5, "warmup": 2, "active": 3},
            "windows": {"keep": 3}}
    (root / "session.json").write_text(json.dumps(meta))
    for rank in (0, 1):
        t = T0
        lines = []
        for s in range(1, steps + 1):
            dt = 0.010 if s < change_at else 0.025
            back = t + (0.001 if rank != slow_rank or s < change_at else 0.016)
            t += dt
            lines.append(f'{{"time_unix_s":{t:.6f},"kind":"step","rank":{rank},"pid":{100 + rank},"step":{s},'
                         f'"backward_unix_s":{back:.6f}}}')
        (root / "hooks" / f"rank{rank}-{100 + rank}.jsonl").write_text("\n".join(lines) + "\n")
    return root


def add_window(root: Path, n: int, start: int, parts: dict[str, float], critical: int = 0,
               waiting: list[int] | None = None, reason: str = "every", traces: bool = False) -> None:
    write_request(root, WindowRequest(window=n, start_step=start, warmup=2, active=3, reason=reason,
                                      detail=f"{reason} {n}", requested_unix_s=T0, requested_at_step=start - 10))
    step = sum(parts.values())
    diag = {"schema": "gpuprof.window/1", "window": n, "ok": True, "cpu_only": True, "step_us": step,
            "critical_rank": critical, "waiting_ranks": waiting or [], "profiled_steps": 3,
            "breakdown_us_per_step": parts,
            "top": [{"cause": max((k for k in parts if k != "compute"), key=parts.__getitem__),
                     "us_per_step": max(v for k, v in parts.items() if k != "compute"), "pct_of_step": 50.0}]}
    (window_dir(root, n) / "diagnosis.json").write_text(json.dumps(diag))
    if traces:
        (window_dir(root, n) / "traces").mkdir()
        (window_dir(root, n) / "traces" / "rank0.pt.trace.json.gz").write_bytes(b"")


def test_a_change_is_named_with_its_step_and_the_cause_that_moved(tmp_path: Path) -> None:
    root = session(tmp_path / "s")
    add_window(root, 1, 30, {"compute": 4000.0, "dataloader": 5000.0, "host": 1000.0})
    add_window(root, 2, 90, {"compute": 4000.0, "dataloader": 20000.0, "host": 1100.0}, reason="change")
    report = session_report(root)
    [change] = report.extra["changes"]
    assert change["step"] == 60 and change["detected_step"] <= 63
    assert change["window_before"] == 1 and change["window_after"] == 2
    assert change["causes"] == [{"cause": "dataloader", "delta_us_per_step": 15000.0, "rank": 0}]  # host moved too little
    assert change["text"] == "from step 60 the step rose 150 % (10.0 ms to 25.0 ms): dataloader +15.0 ms/step"
    assert change["change_pct"] == pytest.approx(150.0, abs=0.5)
    clock = report.extra["step_clock"]
    assert clock["steps"] == 119 and clock["processes"] == 2 and clock["slowest_rank"] is None
    assert clock["series"]["binned"] is False and len(clock["series"]["step"]) == 119
    assert [w["window"] for w in report.extra["windows"]] == [1, 2]
    assert all(w["status"] == "recorded" and not w["traces_kept"] for w in report.extra["windows"])  # pruned
    doc = json.loads(report.to_json())
    assert first_problem(doc) is None  # the schema holds the new keys
    for fmt in ("text", "markdown", "html"):
        out = render(report, fmt)
        assert "from step 60 the step rose 150 %" in out, fmt
        assert "Over the run" in out
    html = render(report, "html")
    assert 'aria-label="step time over the run"' in html and "change at step 60" in html


def test_a_straggler_change_names_the_rank_the_others_wait_for(tmp_path: Path) -> None:
    root = session(tmp_path / "s", slow_rank=1)
    add_window(root, 1, 30, {"compute": 4000.0, "host": 1000.0, "straggler": 0.0})
    add_window(root, 2, 90, {"compute": 4000.0, "host": 16000.0, "straggler": 0.0}, critical=1, waiting=[0])
    report = session_report(root)
    [change] = report.extra["changes"]
    assert change["text"].endswith("host +15.0 ms/step on rank 1, which rank 0 waits for (straggler)")
    slow = report.extra["step_clock"]["slowest_rank"]
    assert slow["rank"] == 1 and slow["first_step"] >= 60 and slow["excess_us"] == pytest.approx(15000.0, abs=50)
    assert "rank 1 is consistently the slowest" in str(report)


def test_a_change_without_a_diagnosed_window_after_it_says_so(tmp_path: Path) -> None:
    root = session(tmp_path / "s")
    add_window(root, 1, 30, {"compute": 4000.0, "dataloader": 5000.0})
    [change] = session_report(root).extra["changes"]
    assert change["window_after"] is None and change["causes"] == []
    assert change["text"].endswith("; no diagnosed window after it to say why")


def test_damaged_window_files_are_reported_not_fatal(tmp_path: Path) -> None:
    root = session(tmp_path / "s")
    add_window(root, 1, 30, {"compute": 4000.0, "dataloader": 5000.0})
    (window_dir(root, 1) / "diagnosis.json").write_text('{"ok": true, "top": "x", "breakdown_us_per_step": 3}')
    bad = root / "windows" / "0002"
    bad.mkdir()
    (bad / "request.json").write_text("{not json")
    report = session_report(root)
    ws = {w["window"]: w for w in report.extra["windows"]}
    assert ws[2]["problems"] == ["windows/0002/request.json is missing or not a window request"]
    assert ws[2]["start_step"] is None and ws[2]["status"] == "unfinished"
    for fmt in ("text", "markdown", "html", "json"):
        render(report, fmt)  # every format reads the damaged diagnosis defensively
    assert first_problem(json.loads(report.to_json())) is None


def test_a_window_past_the_end_of_the_run_was_not_reached(tmp_path: Path) -> None:
    root = session(tmp_path / "s", steps=100)
    write_request(root, WindowRequest(window=1, start_step=150, warmup=2, active=3, reason="demand", detail="asked",
                                      requested_unix_s=T0, requested_at_step=99))
    [w] = session_report(root).extra["windows"]
    assert w["status"] == "not reached" and w["diagnosis"] is None


def test_many_steps_are_binned_without_leaving_one_out(tmp_path: Path) -> None:
    root = session(tmp_path / "s", steps=5000, change_at=10**9)
    series = session_report(root).extra["step_clock"]["series"]
    assert series["binned"] is True and len(series["step"]) == 2000
    assert series["step"][0] == 2 and series["last_step"][-1] == 5000
    assert all(b == a + 1 for a, b in zip(series["last_step"], series["step"][1:]))  # bins cover every step


def _rank(rank: int, host: dict[str, float]) -> RankReport:
    return RankReport(rank=rank, device=None, steps=0, window_us=0.0, compute_us=0.0, lost_us={c: 0.0 for c in CAUSES},
                      extra={"host_steps": {"profiled_steps": 3, **host}})


def test_a_cpu_window_splits_the_step_and_names_the_rank_the_others_wait_for() -> None:
    fast = _rank(0, {"step_us": 76000.0, "dataloader_us": 10000.0, "collective_us": 63000.0, "outside_us": 2000.0})
    slow = _rank(1, {"step_us": 76000.0, "dataloader_us": 10000.0, "collective_us": 3000.0, "outside_us": 62000.0})
    b = breakdown(Report(inputs=(), ranks=(fast, slow), recommendations=()))
    assert b["cpu_only"] and b["critical_rank"] == 1 and b["waiting_ranks"] == [0]
    assert b["breakdown_us_per_step"] == {"compute": 1000.0, "dataloader": 10000.0, "host": 62000.0, "straggler": 0.0,
                                          "communication": 3000.0}
    assert b["per_rank"][0]["breakdown_us_per_step"]["straggler"] == 60000.0
    d = diagnose(Report(inputs=(), ranks=(fast, slow), recommendations=()), 4)
    assert d["window"] == 4 and d["profiled_steps"] == 3 and d["top"][0] == {"cause": "host", "us_per_step": 62000.0,
                                                                             "pct_of_step": 81.58}


def test_a_gpu_window_uses_the_ranks_causes_per_step() -> None:
    lost = {c: 0.0 for c in CAUSES}
    r0 = RankReport(rank=0, device="H100", steps=4, window_us=400.0, compute_us=200.0,
                    lost_us={**lost, Cause.STRAGGLER: 200.0})
    r1 = RankReport(rank=1, device="H100", steps=4, window_us=400.0, compute_us=240.0,
                    lost_us={**lost, Cause.DATALOADER: 160.0})
    b = breakdown(Report(inputs=(), ranks=(r0, r1), recommendations=()))
    assert not b["cpu_only"] and b["critical_rank"] == 1 and b["waiting_ranks"] == [0] and b["step_us"] == 100.0
    assert b["breakdown_us_per_step"]["dataloader"] == 40.0 and b["breakdown_us_per_step"]["compute"] == 60.0


