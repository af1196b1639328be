"""Each step's compute and lost time per cause (``step_compute_us``, ``step_lost_us``): the
rank's partition cut at the step bounds, in the report, its schema, its tables; and the
simulator's noise that the gate's benchmark runs on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import numpy as np
import pytest

import gpuprof
from gpuprof.model.report import CAUSES
from gpuprof.model.schema import report_schema

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


@pytest.mark.parametrize("sample", ["input-bound", "straggler", "pipeline-dp2", "megatron-timeline"])
def test_each_step_is_compute_plus_its_causes_and_the_steps_add_up_to_the_rank(sample: str) -> None:
    rep = gpuprof.analyze(SAMPLES / sample)
    doc = rep.to_dict()
    jsonschema.validate(doc, report_schema())
    checked = 0
    for r in doc["ranks"]:
        if not r["step_times_us"]:
            continue
        n = len(r["step_times_us"])
        lost = r["step_lost_us"]
        assert set(lost) == {c.value for c in CAUSES} and all(len(v) == n for v in lost.values())
        per_step = np.array(r["step_compute_us"]) + sum(np.array(v) for v in lost.values())
        assert per_step == pytest.approx(r["step_times_us"], rel=1e-6, abs=0.01)
        for c in CAUSES:  # the steps tile the window: their causes sum to the rank's
            assert sum(lost[c.value]) == pytest.approx(r["lost_us"][c.value], rel=1e-6, abs=0.01)
        assert sum(r["step_compute_us"]) == pytest.approx(r["compute_us"], rel=1e-6, abs=0.01)
        checked += 1
    assert checked


def test_the_input_bound_sample_shows_its_dataloader_waits_step_by_step() -> None:
    rep = gpuprof.analyze(SAMPLES / "input-bound")
    steps = rep.to_dataframe("steps")
    assert {"compute_us", "lost_dataloader_us", "lost_host_us"} <= set(steps.columns)
    assert (steps["lost_dataloader_us"] > 0.3 * steps["duration_us"]).all()
    total = steps["compute_us"] + steps[[f"lost_{c.value}_us" for c in CAUSES]].sum(axis=1)
    assert np.allclose(total, steps["duration_us"], rtol=1e-6)


def test_a_report_saved_without_them_loads_and_tabulates_nan(tmp_path: Path) -> None:
    doc = gpuprof.analyze(SAMPLES / "input-bound").to_dict()
    for r in doc["ranks"]:
        r.pop("step_compute_us", None)
        r.pop("step_lost_us", None)
    path = tmp_path / "old.json"
    path.write_text(json.dumps(doc))
    steps = gpuprof.load_report(path).to_dataframe("steps")
    assert steps["duration_us"].notna().all() and steps["lost_dataloader_us"].isna().all()


def test_a_malformed_step_series_is_refused_naming_its_path(tmp_path: Path) -> None:
    doc = gpuprof.analyze(SAMPLES / "input-bound").to_dict()
    doc["ranks"][0]["step_lost_us"]["dataloader"][0] = -1.0
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(gpuprof.GpuprofError, match=r"\$\.ranks\[0\]\.step_lost_us\.dataloader\[0\]"):
        gpuprof.load_report(path)


def _median_step_ms(out: Path) -> float:
    rep = gpuprof.analyze(out)
    return float(np.median(rep.ranks[0].step_times_us)) / 1000.0


def test_simulated_noise_moves_runs_apart_and_none_changes_nothing(tmp_path: Path) -> None:
    from gpuprof.simulate import generate

    plain = generate("healthy", tmp_path / "plain", whatifs=False, steps=6)
    zero = generate("healthy", tmp_path / "zero", whatifs=False, steps=6, step_noise_pct=0.0, run_noise_pct=0.0)
    for f in ("rank0.pt.trace.json.gz",):
        assert (plain / f).read_bytes() == (zero / f).read_bytes()
    assert "noise" not in json.loads((plain / "truth" / "ground_truth.json").read_text())
    a = generate("healthy", tmp_path / "a", seed=1, whatifs=False, steps=6, run_noise_pct=5.0)
    a2 = generate("healthy", tmp_path / "a2", seed=1, whatifs=False, steps=6, run_noise_pct=5.0)
    b = generate("healthy", tmp_path / "b", seed=2, whatifs=False, steps=6, run_noise_pct=5.0)
    assert _median_step_ms(a) == _median_step_ms(a2)  # the same seed, the same run
    assert abs(_median_step_ms(a) / _median_step_ms(b) - 1) > 0.005  # another seed, another run
    assert json.loads((a / "truth" / "ground_truth.json").read_text())["noise"] == {"step_pct": 0.0, "run_pct": 5.0}
    steady = generate("healthy", tmp_path / "s", whatifs=False, steps=8, step_noise_pct=0.0)
    noisy = generate("healthy", tmp_path / "n", whatifs=False, steps=8, step_noise_pct=5.0)
    cv = lambda out: float(np.std(gpuprof.analyze(out).ranks[0].step_times_us) / np.mean(gpuprof.analyze(out).ranks[0].step_times_us))
    assert cv(noisy) > 3 * cv(steady)


def test_simulate_command_line_takes_the_noise_and_refuses_nonsense(tmp_path: Path) -> None:
    run = lambda *a: subprocess.run([sys.executable, "-m", "gpuprof", "simulate", "healthy", *a], capture_output=True, text=True, check=False)
    ok = run("steps=3", "--no-whatifs", "--step-noise", "2", "--run-noise", "1", "-o", str(tmp_path / "o"))
    assert ok.returncode == 0, ok.stderr
    bad = run("--run-noise", "-1", "-o", str(tmp_path / "x"))
    assert bad.returncode == 2 and bad.stderr.strip() == "gpuprof: run noise: expected a percentage from 0 to 100, got -1.0"
    assert not (tmp_path / "x").exists()


def test_schema_command_prints_each_schema() -> None:
    for kind, title in (("check", "gpuprof.check/1"), ("history", "gpuprof.history/1"), ("report", "gpuprof.report/1")):
        got = subprocess.run([sys.executable, "-m", "gpuprof", "schema", kind], capture_output=True, text=True, check=False)
        assert got.returncode == 0, got.stderr
        doc = json.loads(got.stdout)
        assert doc["title"] == title
        jsonschema.Draft202012Validator.check_schema(doc)
    bad = subprocess.run([sys.executable, "-m", "gpuprof", "schema", "chek"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "did you mean 'check'" in bad.stderr
