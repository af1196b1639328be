"""``gpuprof check`` settings: one validation for pyproject.toml and the command line."""

from __future__ import annotations

from pathlib import Path

import pytest
from clirun import run_cli

from gpuprof.cli.check_config import load_settings, merged, settings_from_options, settings_from_table
from gpuprof.errors import GpuprofError
from gpuprof.model.report import Cause

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "healthy"


@pytest.mark.parametrize(
    "toml, names",
    [
        ("tool = 5\n", "tool must be a table"),
        ("[tool]\ngpuprof = 5\n", "tool.gpuprof must be a table"),
        ("[tool.gpuprof]\ncheck = [1, 2]\n", "tool.gpuprof.check must be a table"),
    ],
)
def test_a_pyproject_with_a_value_where_a_table_belongs_is_one_line(tmp_path: Path, toml: str, names: str) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(toml)
    with pytest.raises(GpuprofError, match=names) as err:
        load_settings(pyproject)
    assert err.value.path == str(pyproject)


def test_check_with_such_a_pyproject_exits_2_naming_it(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text("[tool]\ngpuprof = 5\n")
    result = run_cli("check", str(SAMPLE), "--config", str(pyproject), "--min-compute-pct", "5")
    assert result.traceback is None, result.traceback
    assert result.code == 2 and result.stderr_lines == [f"gpuprof: {pyproject}: tool.gpuprof must be a table ([tool.gpuprof]), not int"]


def test_other_tools_and_no_gpuprof_table_mean_no_settings(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text("[project]\nname = 'x'\n[tool.ruff]\nline-length = 100\n[tool.gpuprof]\n")
    settings = load_settings(pyproject)
    assert settings.thresholds.empty and settings.baseline is None


# (key, value rejected by both paths); the option is the key with dashes.
REJECTED = [
    ("tolerance_pct", 150.0),
    ("tolerance_pct", float("inf")),
    ("step_tolerance_pct", float("inf")),
    ("max_step_ms", float("inf")),
    ("max_step_ms", float("nan")),
    ("min_compute_pct", -5.0),
    ("min_compute_pct", 100.5),
]


@pytest.mark.parametrize("key, value", REJECTED)
def test_the_file_and_the_command_line_reject_the_same_values(tmp_path: Path, key: str, value: float) -> None:
    with pytest.raises(GpuprofError) as from_file:
        settings_from_table({key: value}, tmp_path, "pyproject.toml [tool.gpuprof.check]")
    with pytest.raises(GpuprofError) as from_options:
        settings_from_options(**{key: value})  # type: ignore[arg-type]
    option = "--" + key.replace("_", "-")
    assert str(from_options.value).startswith(f"{option}: expected ")
    # Same rule, same words after the name of the setting.
    assert str(from_file.value).split(f"{key}: ", 1)[1] == str(from_options.value).split(f"{option}: ", 1)[1]


@pytest.mark.parametrize("key, value", [("tolerance_pct", 100.0), ("step_tolerance_pct", 400.0), ("max_step_ms", 1e9)])
def test_large_finite_values_are_accepted_by_both(tmp_path: Path, key: str, value: float) -> None:
    from_file = settings_from_table({key: value}, tmp_path, "here")
    from_options = settings_from_options(**{key: value})  # type: ignore[arg-type]
    assert from_file == from_options


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--min-compute-pct", "5", "--baseline", "b.json", "--tolerance-pct", "150"], "--tolerance-pct: expected a number between 0 and 100"),
        (["--min-compute-pct", "5", "--baseline", "b.json", "--tolerance-pct", "inf"], "--tolerance-pct: expected"),
        (["--min-compute-pct", "5", "--baseline", "b.json", "--step-tolerance-pct", "inf"], "--step-tolerance-pct: expected a finite"),
        (["--max-step-ms", "inf"], "--max-step-ms: expected a finite number >= 0, got inf"),
        (["--min-compute-pct", "nan"], "--min-compute-pct: expected"),
    ],
)
def test_check_refuses_them_on_the_command_line_before_reading_anything(argv: list[str], says: str) -> None:
    result = run_cli("check", str(SAMPLE), "--no-config", *argv)
    assert result.traceback is None, result.traceback
    assert result.code == 2
    assert len(result.stderr_lines) == 1 and result.stderr_lines[0].startswith(f"gpuprof: {says}")
    assert result.stdout == ""


def test_options_override_the_file_cause_by_cause(tmp_path: Path) -> None:
    file = settings_from_table(
        {"min_compute_pct": 60, "max_lost_pct": {"host": 5, "sync": 3}, "tolerance_pct": 2}, tmp_path, "here"
    )
    options = settings_from_options(max_lost_pct=["host=9"], step_tolerance_pct=7)
    both = merged(file, options)
    assert both.thresholds.min_compute_pct == 60
    assert dict(both.thresholds.max_lost_pct) == {Cause.HOST: 9.0, Cause.SYNC: 3.0}
    assert both.tolerance_pct == 2 and both.step_tolerance_pct == 7


def test_the_gate_settings_come_from_the_file_and_options_win(tmp_path: Path) -> None:
    file = settings_from_table(
        {"min_effect_pct": 3, "confidence_pct": 95, "history": "ci/h.jsonl", "baseline": ["a.json", "runs/"]}, tmp_path, "here"
    )
    assert file.min_effect_pct == 3 and file.confidence_pct == 95
    assert file.history == tmp_path / "ci" / "h.jsonl"
    assert file.baselines == (tmp_path / "a.json", tmp_path / "runs") and file.baseline == tmp_path / "a.json"
    both = merged(file, settings_from_options(min_effect_pct=7, baseline=[Path("x.json")]))
    assert both.min_effect_pct == 7 and both.confidence_pct == 95 and both.baselines == (Path("x.json"),)


@pytest.mark.parametrize("value", [100.0, 49.0, float("nan"), -1.0])
def test_a_confidence_outside_50_to_under_100_is_refused_by_both(tmp_path: Path, value: float) -> None:
    with pytest.raises(GpuprofError, match="confidence_pct: expected"):
        settings_from_table({"confidence_pct": value}, tmp_path, "here")
    with pytest.raises(GpuprofError, match="^--confidence: expected"):
        settings_from_options(confidence_pct=value)


@pytest.mark.parametrize("table, says", [({"baseline": 3}, "baseline must be a path string or a list"),
                                         ({"history": ["a"]}, "history must be a path string")])  # fmt: skip
def test_paths_must_be_strings(tmp_path: Path, table: dict[str, object], says: str) -> None:
    with pytest.raises(GpuprofError, match=says):
        settings_from_table(table, tmp_path, "here")
