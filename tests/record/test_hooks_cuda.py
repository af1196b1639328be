"""``gpuprof run`` on a real GPU: NVML samples, CUDA memory records, a trace with kernels.

Skips without CUDA (this project's CI has no GPU); run it on a GPU machine with
``pytest tests/record/test_hooks_cuda.py``. Nothing here is timed.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuprof.session import read_session

if not (Path("/dev/nvidiactl").exists() or shutil.which("nvidia-smi")):
    # Checked before importing torch, so that collecting the suite on a CPU machine stays cheap.
    pytest.skip("needs an NVIDIA GPU and driver (none here)", allow_module_level=True)
torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.torch,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none visible here)"),
]

TINY = Path(__file__).resolve().parents[1] / "data" / "tiny_train.py"


def test_cuda_training_under_gpuprof_run(tmp_path: Path) -> None:
    out = tmp_path / "s"
    p = subprocess.run(
        [sys.executable, "-m", "gpuprof", "run", "--out", str(out), "--interval-ms", "100",
         "--profile-wait", "2", "--profile-warmup", "1", "--profile-active", "3", "--",
         sys.executable, str(TINY), "--device", "cuda", "--steps", "400", "--hidden", "2048", "--exit-code", "3"],
        capture_output=True, text=True, timeout=300,
    )
    assert p.returncode == 3, p.stderr
    s = read_session(out)
    assert s.meta["gpus"], "NVML saw no GPU"
    df = s.samples
    assert df is not None and len(df) > 0
    g0 = df[df["gpu"] == 0]
    # The basics every NVIDIA GPU supports: measured, not missing.
    for col in ("util_gpu_pct", "mem_used_bytes", "mem_total_bytes", "clock_sm_mhz", "temperature_c"):
        assert g0[col].notna().all(), col
    assert (g0["mem_used_bytes"] <= g0["mem_total_bytes"]).all()
    h = s.hook_events
    assert h is not None
    steps = h[h["kind"] == "step"]
    assert steps["step"].max() == 400
    assert "allocated_bytes" in steps and steps["allocated_bytes"].notna().any()
    assert (steps["alloc_retries"].dropna() >= 0).all()
    (trace,) = s.trace_paths
    with gzip.open(trace, "rt") as fh:
        doc = json.load(fh)
    assert any(e.get("cat") == "kernel" for e in doc["traceEvents"]), "no CUDA kernel in the trace"
    a = subprocess.run([sys.executable, "-m", "gpuprof", "analyze", str(out), "--format", "json"],
                       capture_output=True, text=True, timeout=300)
    assert a.returncode == 0, a.stderr
    report = json.loads(a.stdout)
    assert report["ranks"][0]["steps"] == 3
    assert report["samples"]["gpus"][0]["samples"] > 0
