"""``python -m gpuprof.record.probe``: what the sampler reads per field, on a stubbed NVML."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest
from test_nvml_backend import FakeGpu, StubNvml

from gpuprof.record import probe as probe_mod
from gpuprof.record.backend import BackendUnavailable, GpuSample
from gpuprof.record.nvml import NvmlBackend


def test_every_sample_field_names_its_nvml_source() -> None:
    names = {f.name for f in fields(GpuSample)} - {"gpu", "uuid"}
    assert set(probe_mod.FIELD_SOURCES) == names


def test_probe_reports_measured_unsupported_and_gpm_fields() -> None:
    gpu = FakeGpu(uuid="GPU-1234", gpm=True, not_supported={"power"}, nvlink_kib=None)
    be = NvmlBackend(StubNvml([gpu]))
    slept: list[float] = []
    doc = probe_mod.probe(be, polls=3, interval_s=0.25, sleep=slept.append)
    assert slept == [0.25, 0.25]
    (g,) = doc["gpus"]
    assert g["uuid"] == "GPU-1234" and g["gpm_supported"] is True
    f = g["fields"]
    assert f["util_gpu_pct"] == {"value": 87.0, "status": "measured",
                                 "source": "nvmlDeviceGetUtilizationRates().gpu"}
    assert f["power_w"]["status"] == "unsupported" and f["power_w"]["value"] is None
    assert "power" in g["unsupported_metrics"] and "nvlink" in g["unsupported_metrics"]
    assert f["nvlink_tx_kib"]["status"] == "unsupported"
    # GPM answers from the second poll on; DRAM bandwidth is not supported by this fake GPM.
    assert f["gpm_sm_active_pct"] == {"value": 71.5, "status": "measured", "source": "GPM SM_UTIL"}
    assert f["gpm_dram_bw_pct"]["status"] == "no value"
    assert f["pcie_tx_bytes_per_s"]["value"] == 10.0 * 1024 * 1024  # from GPM, in bytes/s
    assert g["poll_ms"]["median"] is not None and len(json.dumps(doc)) > 0


def test_lost_gpu_is_reported_and_the_others_still_probed() -> None:
    gpus = [FakeGpu(uuid="GPU-a", lost_after_polls=1), FakeGpu(uuid="GPU-b")]
    doc = probe_mod.probe(NvmlBackend(StubNvml(gpus)), polls=3, interval_s=0.0, sleep=lambda s: None)
    a, b = doc["gpus"]
    assert a["error"] and "lost" in a["error"]
    assert b["error"] is None and b["fields"]["temperature_c"]["value"] == 66.0


def test_main_without_nvml_says_why_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def no_nvml() -> NvmlBackend:
        raise BackendUnavailable("NVML Shared Library Not Found")

    out = tmp_path / "p.json"
    assert probe_mod.main(["-o", str(out)], open_backend=no_nvml) == 1
    doc = json.loads(out.read_text())
    assert doc["available"] is False and "Shared Library" in doc["reason"] and doc["gpus"] == []
    assert "NVML unavailable" in capsys.readouterr().err


def test_main_writes_json_on_stdout_and_closes_nvml(capsys: pytest.CaptureFixture[str]) -> None:
    stub = StubNvml([FakeGpu(uuid="GPU-x")])
    assert probe_mod.main(["--polls", "2", "--interval-ms", "0"], open_backend=lambda: NvmlBackend(stub)) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["available"] and doc["polls"] == 2 and doc["versions"]["driver"] == "550.54.15"
    assert stub.shutdown_called


def test_main_bad_output_path_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stub = StubNvml([FakeGpu(uuid="GPU-x")])
    code = probe_mod.main(["--polls", "1", "-o", str(tmp_path / "no" / "p.json")],
                          open_backend=lambda: NvmlBackend(stub))
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no" in err[0] and "Traceback" not in err[0]
