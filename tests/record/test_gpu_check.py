"""``benchmarks/gpu_check.sh``, the one command that proves gpuprof on a GPU machine.

Its GPU-side reading (the live line's GPU fields, NVML samples and kernels in a session, the
side-by-side with nvidia-smi, the fix the report leads to) is checked here on made-up but
real-format inputs; the whole command is run as a machine without a GPU runs it.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console
from test_nvml_backend import FakeGpu, StubNvml

from gpuprof.record import probe as probe_mod
from gpuprof.record.backend import GpuSample
from gpuprof.record.live import BottomRow, LiveStatus
from gpuprof.record.nvml import NvmlBackend

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"


def _load() -> Any:
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = mod
    spec.loader.exec_module(mod)
    return mod


gc = _load()


def _check(tmp_path: Path, budget_s: float = 300.0, skip: str = "") -> Any:
    args = argparse.Namespace(cpu=True, steps=None, repeats=1, budget_s=budget_s, skip=set(filter(None, skip.split(","))))
    (tmp_path / "work").mkdir(exist_ok=True)
    return gc.Check(tmp_path, tmp_path / "work", args)


def test_live_lines_read_what_the_live_status_draws(tmp_path: Path) -> None:
    writes: list[str] = []
    live = LiveStatus(tmp_path, (5, 2, 3), Console(file=io.StringIO(), force_terminal=True),
                      BottomRow(writes.append, lambda: (160, 40)))
    sample = GpuSample(gpu=0, uuid="GPU-x", util_gpu_pct=87.0, mem_used_bytes=12 * 2**30,
                       mem_total_bytes=140 * 2**30, power_w=412.0)
    live.started(1, SimpleNamespace(latest={0: sample}))  # type: ignore[arg-type]
    live.finished()
    raw = ("job output line\r\n" + "".join(writes)).encode()
    lines = gc.live_lines(raw)
    assert lines and all("\x1b" not in ln for ln in lines)
    assert re.search(gc.GPU_LIVE_RE, lines[-1]), lines
    assert "GPU0 87% 12.0/140.0 GiB 412 W" in lines[-1]


def _session(root: Path) -> Path:
    s = root / "s"
    (s / "hooks").mkdir(parents=True)
    (s / "traces").mkdir()
    (s / "session.json").write_text(json.dumps({"status": "finished", "exit_code": 3,
                                                "gpus": [{"name": "NVIDIA H200"}], "warnings": []}))
    samples = [{"time_unix_s": 100.0 + 0.5 * i, "gpu": 0, "uuid": "GPU-x", "util_gpu_pct": 40.0 + i,
                "mem_used_bytes": 2**30, "power_w": None, "lost": False} for i in range(11)]  # 2/s for 5 s
    (s / "samples.jsonl").write_text("".join(json.dumps(x) + "\n" for x in samples) + '{"torn line\n')
    steps = [{"kind": "step", "step": k, "allocated_bytes": 10 * k} for k in range(1, 6)]
    (s / "hooks" / "rank0-7.jsonl").write_text("".join(json.dumps(x) + "\n" for x in steps))
    doc = {"traceEvents": [{"cat": "kernel", "name": "ampere_sgemm"}, {"cat": "kernel", "name": "ncclKernel"},
                           {"cat": "cuda_runtime", "name": "cudaLaunchKernel"}],
           "deviceProperties": [{"name": "NVIDIA H200"}]}
    with gzip.open(s / "traces" / "rank0.pt.trace.json.gz", "wt") as gz:
        json.dump(doc, gz)
    return s


def test_session_facts_count_samples_steps_and_kernels(tmp_path: Path) -> None:
    facts = gc.session_facts(_session(tmp_path), 500.0)
    assert facts["samples"] == 11 and facts["samples_per_s"] == 2.0 and facts["samples_per_s_nominal"] == 2.0
    assert facts["sample_columns_measured"]["util_gpu_pct"] == 1.0
    assert facts["sample_columns_measured"]["power_w"] == 0.0
    assert facts["util_gpu_pct_max"] == 50.0
    assert facts["steps_per_hook_log"] == {"rank0-7.jsonl": 5} and facts["cuda_memory_records"] == 5
    tr = facts["traces"]["rank0.pt.trace.json.gz"]
    assert tr["kernels"] == 2 and tr["nccl_events"] == 1 and tr["device_properties"] == ["NVIDIA H200"]
    assert facts["files"]["session.json"] > 0 and facts["total_bytes"] == sum(facts["files"].values())


def test_plan_fix_follows_the_first_recommendation_for_a_planted_cause() -> None:
    from gpuprof.api import analyze

    doc = analyze(ROOT / "sample_traces" / "input-bound").to_dict()
    plan = gc.plan_fix(doc)
    assert plan["category"] == "dataloader" and plan["args"] == ["--num-workers", "4"] and plan["lead"]
    assert plan["predicted_step_us"] == doc["job"]["whatif"]["step_us"]["no_dataloader"]
    assert plan["prediction_from"] == "replay"
    assert plan["predicted_step_us"] < plan["measured_step_us"]
    host_only = dict(doc, recommendations=[dict(doc["recommendations"][0], category="host")])
    assert gc.plan_fix(host_only)["category"] is None


def test_compare_field_flags_what_gpuprof_misses() -> None:
    assert gc.compare_field("same", "NVIDIA H200", "NVIDIA H200") == ("same", True)
    assert gc.compare_field("mib", 143771 * 2**20, "143771")[1]
    assert not gc.compare_field("power", None, "71.30")[1]  # nvidia-smi reads it, gpuprof does not
    assert gc.compare_field("power", None, None) == ("both N/A", True)
    assert not gc.compare_field("power", 71.3 * 1000, "71.30")[1]  # milliwatts taken for watts
    assert gc.compare_field("temp", 33.0, "34")[1]
    assert gc._smi_value(" [N/A]") is None and gc._smi_value("[Not Supported]") is None


FAKE_SMI = """#!/bin/sh
case "$*" in
  *--query-gpu=*) echo "NVIDIA H200, GPU-h200, 580.159.04, 143771, 530, 0, 0, 72.10, 345, 3201, 31, 0x0000000000000001";;
  *-q*) printf 'GPU 00000000:00:05.0\\n    Tx Throughput : 0 KB/s\\n    Rx Throughput : 0 KB/s\\n';;
  *) echo "table";;
esac
"""


def _h200(power: bool = True) -> FakeGpu:
    return FakeGpu(uuid="GPU-h200", name="NVIDIA H200", util=(0, 0), mem=(530 * 2**20, 143771 * 2**20),
                   power_mw=72_100, clocks=(345, 3201), reasons=1, temp_c=31, gpm=True, nvlink_kib=None,
                   not_supported=set() if power else {"power"})


def _nvml_step(tmp_path: Path, gpu: FakeGpu, monkeypatch: pytest.MonkeyPatch) -> Any:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(FAKE_SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    c = _check(tmp_path)
    c.args.cpu = False
    c.env["PATH"] = os.environ["PATH"]
    real_sh = c.sh
    stub = StubNvml([gpu])
    stub.nvmlSystemGetDriverVersion = lambda: "580.159.04"  # type: ignore[method-assign]

    def sh(argv: list[str], timeout_s: float, **kw: Any) -> Any:
        if "gpuprof.record.probe" in argv:  # the probe, on the stubbed NVML of an H200
            doc = probe_mod.probe(NvmlBackend(stub), polls=2, interval_s=0.0, sleep=lambda s: None)
            Path(argv[argv.index("-o") + 1]).write_text(json.dumps(doc))
            return gc.Proc(argv, 0, "", "", 0.1)
        return real_sh(argv, timeout_s, **kw)

    c.sh = sh
    return c.run_step("nvml", lambda rec: gc.step_nvml(c, rec))


def test_nvml_step_puts_the_probe_beside_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rec = _nvml_step(tmp_path, _h200(), monkeypatch)
    assert rec.status == "pass", rec.checks
    table = (tmp_path / "nvml.txt").read_text()
    assert re.search(r"power_w\s*\|\s*72\.1\s*\|\s*measured\s*\|\s*power\.draw", table), table
    assert "GPM supported: True" in table and "nvlink" in rec.figures["unsupported_metrics"]


def test_nvml_step_fails_on_a_field_only_nvidia_smi_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rec = _nvml_step(tmp_path, _h200(power=False), monkeypatch)
    assert rec.status == "fail"
    assert "power_w: gpuprof N/A but nvidia-smi reads it" in json.dumps(rec.checks)


def test_a_failing_or_hanging_step_is_recorded_and_the_others_still_run(tmp_path: Path) -> None:
    c = _check(tmp_path)

    def boom(rec: Any) -> None:
        raise RuntimeError("planted")

    def hang(rec: Any) -> None:
        p = c.sh([sys.executable, "-c", "import time; time.sleep(60)"], timeout_s=1)
        rec.expect("the command ends", not p.timed_out)

    def fine(rec: Any) -> None:
        rec.expect("fine", True)
        rec.figures["x"] = 1

    c.run_step("run", boom)
    assert json.loads((tmp_path / "summary.json").read_text())["steps"][0]["status"] == "error"
    c.run_step("analyze", hang)
    c.run_step("whatif", fine)
    doc = json.loads((tmp_path / "summary.json").read_text())
    assert [(s["name"], s["status"]) for s in doc["steps"]] == [("run", "error"), ("analyze", "fail"),
                                                                  ("whatif", "pass")]
    assert doc["steps"][1]["seconds"] < 30 and "planted" in doc["steps"][0]["reason"]
    assert doc["ok"] is False and doc["failed"] == ["run", "analyze"]
    assert "FAILED: run, analyze" in (tmp_path / "summary.txt").read_text()


def test_steps_past_the_budget_or_asked_off_are_skipped_with_a_reason(tmp_path: Path) -> None:
    c = _check(tmp_path, budget_s=10.0, skip="torchrun")
    ran: list[str] = []
    c.run_step("torchrun", lambda rec: ran.append("torchrun"))
    c.run_step("overhead", lambda rec: ran.append("overhead"))
    assert ran == []
    doc = json.loads((tmp_path / "summary.json").read_text())
    assert doc["skipped"] == {"torchrun": "skipped on request (--skip)", "overhead": "no time left in the 10 s budget"}
    assert doc["ok"] is True


def test_pack_leaves_the_largest_traces_out_past_the_limit(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "s" / "traces").mkdir(parents=True)
    (work / "site").mkdir()
    (work / "summary_part.json").write_text("{}")
    (work / "site" / "big.py").write_text("x" * 5000)
    (work / "s" / "traces" / "small.json.gz").write_bytes(b"\0" * 100)
    (work / "s" / "traces" / "big.json.gz").write_bytes(b"\0" * 5000)
    left = gc.pack(work, tmp_path / "r.tar.gz", limit_bytes=1000)
    assert left == ["s/traces/big.json.gz (5000 bytes)"]
    with tarfile.open(tmp_path / "r.tar.gz") as tar:
        names = tar.getnames()
    assert sorted(names) == ["gpu-check/s/traces/small.json.gz", "gpu-check/summary_part.json"]


def test_window_facts_read_the_windows_of_a_session(tmp_path: Path) -> None:
    s = _session(tmp_path)
    w = s / "windows" / "0001"
    (w / "traces").mkdir(parents=True)
    (w / "request.json").write_text(json.dumps({"window": 1, "reason": "change", "change": {"step": 90}}))
    (w / "diagnosis.json").write_text(json.dumps({"ok": True, "top": [{"cause": "dataloader"}]}))
    shutil.copy(s / "traces" / "rank0.pt.trace.json.gz", w / "traces" / "rank0.pt.trace.json.gz")
    (s / "windows" / "0002").mkdir()
    (s / "windows" / "0002" / "request.json").write_text("{torn")
    facts = gc.window_facts(s)
    one, two = facts["windows"]
    assert one["request"]["reason"] == "change" and one["diagnosis"]["ok"]
    assert one["traces"]["rank0.pt.trace.json.gz"]["kernels"] == 2
    assert two == {"window": "0002", "request": None, "traces": {}, "diagnosis": None}
    assert gc.window_facts(tmp_path / "nowhere") == {"windows": []}


def test_overhead_takes_the_best_of_interleaved_runs(tmp_path: Path) -> None:
    c = _check(tmp_path)
    c.args.repeats = 3
    c.state.update(mode="gpu", steps=300)
    order: list[str] = []
    walls = iter([10.0, 10.6, 9.0, 9.3, 9.5, 9.1])  # bare, gpuprof, bare, gpuprof, ...
    steady = iter([20.0, 20.4, 19.0, 19.5, 19.8, 19.1])

    def sh(argv: list[str], timeout_s: float, **kw: Any) -> Any:
        order.append("gpuprof" if "run" in argv else "bare")
        line = "gpu_check_train: " + json.dumps({"steady_step_ms": next(steady)})
        return gc.Proc(argv, 0, line + "\n", "", next(walls))

    c.sh = sh
    rec = c.run_step("overhead", lambda rec: gc.step_overhead(c, rec))
    assert order == ["bare", "gpuprof"] * 3
    assert rec.figures["overhead_wall_pct"] == pytest.approx(100 * (9.1 / 9.0 - 1), abs=0.01)
    assert rec.figures["overhead_steady_pct"] == pytest.approx(100 * (19.1 / 19.0 - 1), abs=0.01)
    assert rec.status == "pass"  # 0.5 % is under the 5 % of the check, and under issue 31's 1 %
    assert [ch["what"] for ch in rec.checks][-1] == "steady-state step overhead under 1 % (best of each)"


@pytest.mark.slow
@pytest.mark.torch
def test_the_command_runs_without_a_gpu_and_says_what_it_skipped(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "OUT"
    out.mkdir()
    env = dict(os.environ, OUT=str(out), PYTHON=sys.executable)
    # The overhead step is left out here (two more torch processes); test_overhead_... covers it.
    p = subprocess.run(["bash", str(SCRIPT), "--cpu", "--steps", "20", "--skip", "overhead", "--budget-s", "240"],
                       capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path, check=False)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    # What the device machine brings back: at most 8 plain files with plain names.
    files = sorted(x.name for x in out.iterdir())
    assert all(x.is_file() for x in out.iterdir()) and len(files) <= 8, files
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+", f) for f in files)
    assert {"summary.json", "summary.txt", "check.log", "results.tar.gz", "report.txt", "report_window.txt"} <= set(files)
    doc = json.loads((out / "summary.json").read_text())
    status = {s["name"]: s["status"] for s in doc["steps"]}
    assert status == {"install": "pass", "env": "pass", "nvml": "skip", "run": "pass", "analyze": "pass",
                      "whatif": "pass", "torchrun": "pass", "window": "pass", "overhead": "skip"}, doc["failed"]
    assert doc["mode"] == "cpu" and doc["ok"]
    assert doc["skipped"] == {"nvml": "--cpu given", "overhead": "skipped on request (--skip)"}
    steps = {s["name"]: s for s in doc["steps"]}
    assert steps["install"]["figures"]["gpuprof_file"].startswith(str(Path(tempfile_root())))
    assert steps["run"]["figures"]["train"]["steps"] == 20 and steps["run"]["figures"]["live_updates"] > 0
    assert steps["torchrun"]["figures"]["backend"] == "gloo"
    assert any(w["request"]["reason"] == "change" for w in steps["window"]["figures"]["windows"])
    assert "skipped: nvml (--cpu given)" in (out / "summary.txt").read_text()
    whatif = steps["whatif"]["figures"]
    assert whatif["fixing"]["category"] is None and whatif["fixed_steady_step_ms"] > 0  # nothing predicted on a CPU
    with tarfile.open(out / "results.tar.gz") as tar:
        names = set(tar.getnames())
    assert {"gpu-check/s_run/session.json", "gpu-check/report_run.json", "gpu-check/run_pty.txt"} <= names
    assert not any(n.startswith("gpu-check/site/") for n in names)


def tempfile_root() -> str:
    import tempfile

    return tempfile.gettempdir()
