"""Session files are untrusted input like traces: bad rows skipped and counted, one warning
per kind, never a traceback; cost per number, not per dict (issue 20, case 15)."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

from clirun import run_cli

from gpuprof.record.backend import GpuSample
from gpuprof.session import SESSION_SCHEMA, read_session
from gpuprof.session.layout import HOOKS_DIR, META_FILE, SAMPLES_FILE


def _session(root: Path, samples: list[Any] | None = None, hooks: list[Any] | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    meta = {"schema": SESSION_SCHEMA, "status": "finished", "command": ["python", "x.py"], "gpus": [],
            "hooks_enabled": True}
    (root / META_FILE).write_text(json.dumps(meta))
    if samples is not None:
        (root / SAMPLES_FILE).write_text("".join(json.dumps(r) + "\n" for r in samples))
    if hooks is not None:
        (root / HOOKS_DIR).mkdir(exist_ok=True)
        (root / HOOKS_DIR / "rank0-1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in hooks))
    return root


def _sample(t: float, gpu: Any = 0, **kw: Any) -> dict[str, Any]:
    rec = GpuSample(gpu=0, uuid="GPU-a", util_gpu_pct=50.0, mem_used_bytes=1e9, mem_total_bytes=8e10).to_record(t)
    rec.update(gpu=gpu, **kw)
    return rec


def test_hook_records_with_a_time_that_is_not_a_number_are_skipped(tmp_path: Path) -> None:
    hooks = [
        {"time_unix_s": 1.0, "kind": "start", "rank": 0, "pid": 1},
        {"time_unix_s": 1.5, "kind": "step", "rank": 0, "pid": 1, "step": 1},
        {"time_unix_s": "x", "kind": "step", "rank": 0, "pid": 1, "step": 2},
        {"time_unix_s": 2.5, "kind": "step", "rank": 0, "pid": 1, "step": 3},
        {"time_unix_s": 3.0, "kind": "step", "rank": "zero", "pid": 1, "step": 4},
    ]
    s = read_session(_session(tmp_path / "s", hooks=hooks))
    assert s.hook_events is not None
    assert list(s.hook_events["step"].dropna()) == [1, 3, 4]
    assert "hooks/*.jsonl: 1 line skipped ('time_unix_s' is not a number within ±1e18)" in s.warnings
    assert "hooks/*.jsonl: 1 value of 'rank' read as unknown (not an integer from 0)" in s.warnings
    r = run_cli("analyze", str(tmp_path / "s"), "--format", "json")
    assert r.code == 0 and r.traceback is None, r.traceback or r.stderr


def test_samples_with_a_gpu_index_that_is_not_one_are_skipped(tmp_path: Path) -> None:
    samples = [_sample(1.0), _sample(1.0, gpu=1e20), _sample(2.0), _sample(2.0, gpu="1"), _sample(3.0, power_w="hot")]
    s = read_session(_session(tmp_path / "s", samples=samples))
    assert s.samples is not None and list(s.samples["time_unix_s"]) == [1.0, 2.0, 3.0]
    assert s.samples["power_w"].isna().all()
    assert "samples.jsonl: 2 lines skipped ('gpu' is not an integer from 0)" in s.warnings
    assert "samples.jsonl: 1 value of 'power_w' read as unknown (not a number within ±1e18)" in s.warnings
    r = run_cli("analyze", str(tmp_path / "s"), "--format", "json")
    assert r.code == 0 and r.traceback is None, r.traceback or r.stderr
    assert json.loads(r.stdout)["samples"]["gpus"][0]["samples"] == 3


def test_lines_that_are_not_objects_are_counted_once_per_kind(tmp_path: Path) -> None:
    root = _session(tmp_path / "s", samples=[_sample(1.0), _sample(2.0)])
    with open(root / SAMPLES_FILE, "a") as fh:
        fh.write("5\n[1, 2]\nnot json\n" + json.dumps(_sample(3.0)) + "\n" + '{"time_unix_s": 4')  # torn last line
    s = read_session(root)
    assert s.samples is not None and len(s.samples) == 3
    assert [w for w in s.warnings if w.startswith("samples.jsonl")] == [
        "samples.jsonl: 3 unreadable lines skipped (not a JSON object)"
    ]


def test_samples_cost_their_numbers_not_a_dict_per_line(tmp_path: Path) -> None:
    # 100,000 polls: as a dict per line they held ~270 MB (2 million lines: 1.65 GB, 44 s).
    root = _session(tmp_path / "s")
    line = json.dumps(_sample(0.0))
    with open(root / SAMPLES_FILE, "w") as fh:
        fh.writelines(line.replace('"time_unix_s": 0.0', f'"time_unix_s": {i * 0.1:.1f}', 1) + "\n" for i in range(100_000))
    tracemalloc.start()
    try:
        s = read_session(root)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert s.samples is not None and len(s.samples) == 100_000
    assert peak < 100 * 2**20, f"peak {peak / 2**20:.0f} MiB"


def test_a_number_no_measurement_comes_near_is_unknown(tmp_path: Path) -> None:
    # Found by the fuzz campaign (seed 11, session case 264): "mem_used_bytes": 1e308 made the
    # samples' sums infinite and the JSON report a traceback.
    samples = [_sample(1.0), _sample(2.0, mem_used_bytes=1e308), _sample(3.0)]
    s = read_session(_session(tmp_path / "s", samples=samples))
    assert "samples.jsonl: 1 value of 'mem_used_bytes' read as unknown (not a number within ±1e18)" in s.warnings
    r = run_cli("analyze", str(tmp_path / "s"), "--format", "json")
    assert r.code == 0 and r.traceback is None, r.traceback or r.stderr
