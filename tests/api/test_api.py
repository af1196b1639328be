"""The public Python API: ``import gpuprof``, ``gpuprof.analyze``, ``gpuprof.check``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from reportfactory import rank, report, stepped_rank

import gpuprof
from gpuprof.model.report import CAUSES

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
HEAVY = ("pandas", "numpy", "torch", "jsonschema", "msgspec", "typer", "rich")


def _imported_after(code: str) -> list[str]:
    probe = f"import sys\n{code}\nprint(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return [m for m in out.strip().split(",") if m]


def test_import_gpuprof_is_cheap() -> None:
    assert _imported_after("import gpuprof") == []
    # Looking a type up loads only its own module.
    assert _imported_after("import gpuprof; gpuprof.Report; gpuprof.Cause; gpuprof.GpuprofError") == []


def test_version_and_the_cli_never_import_the_analysis_stack() -> None:
    code = (
        "sys.argv = ['gpuprof', '--version']\n"
        "from gpuprof.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass"
    )
    assert not {"pandas", "numpy", "torch", "jsonschema"} & set(_imported_after(code))


def test_analyze_never_imports_torch_or_the_validator() -> None:
    code = f"import gpuprof\ngpuprof.analyze({str(SAMPLES / 'straggler')!r})"
    loaded = _imported_after(code)
    assert "numpy" in loaded  # the probe sees what analysis imports
    assert "pandas" not in loaded  # a multi-rank job's analysis is numpy columns too (issue 22)
    assert "torch" not in loaded and "jsonschema" not in loaded


def test_all_lists_the_public_api_and_nothing_else() -> None:
    assert sorted(gpuprof.__all__) == sorted(
        ["__version__", "analyze", "check", "diff", "load_report", "Report", "RankReport", "Recommendation", "Cause",
         "CheckResult", "CheckResults", "Verdict", "ReportDiff", "GpuprofError"]
    )
    assert dir(gpuprof) == sorted(gpuprof.__all__)
    assert sorted(gpuprof.__all__) == sorted(["__version__", *gpuprof._PUBLIC])
    for name in gpuprof.__all__:
        assert getattr(gpuprof, name) is not None
    with pytest.raises(AttributeError):
        gpuprof.pipeline_internals  # type: ignore[attr-defined]  # noqa: B018


@pytest.fixture(scope="module")
def straggler() -> gpuprof.Report:
    return gpuprof.analyze(SAMPLES / "straggler")


def test_analyze_returns_the_report_the_cli_writes(straggler: gpuprof.Report, tmp_path: Path) -> None:
    from gpuprof.cli import main

    out = tmp_path / "cli.json"
    argv = sys.argv
    sys.argv = ["gpuprof", "analyze", str(SAMPLES / "straggler"), "-o", str(out)]
    try:
        main()
    except SystemExit as exc:
        assert not exc.code
    finally:
        sys.argv = argv
    cli_doc = json.loads(out.read_text())
    api_doc = json.loads(straggler.to_json())
    assert api_doc["ranks"] == cli_doc["ranks"]
    assert api_doc["recommendations"] == cli_doc["recommendations"]
    assert straggler.to_dict() == api_doc
    top = straggler.recommendations[0]
    assert isinstance(top, gpuprof.Recommendation) and top.category is gpuprof.Cause.STRAGGLER and top.ranks == (2,)


def test_per_rank_dataframe(straggler: gpuprof.Report) -> None:
    df = straggler.to_dataframe()
    assert isinstance(df, pd.DataFrame)
    assert list(df.index) == [0, 1, 2, 3] and df.index.name == "rank"
    lost_cols = [f"lost_{c.value}_us" for c in CAUSES]
    for r in straggler.ranks:
        row = df.loc[r.rank]
        assert row["window_us"] == r.window_us and row["compute_us"] == r.compute_us
        assert row["compute_us"] + row[lost_cols].sum() == pytest.approx(row["window_us"], rel=1e-3)
        assert row["lost_us"] == pytest.approx(row[lost_cols].sum())
        assert row["source"] == r.source
    # Rank 2 is the straggler: it waits for nobody, the others wait for it.
    assert df["lost_straggler_us"].idxmin() == 2
    assert df.loc[2, "compute_pct"] > df.loc[0, "compute_pct"]


def test_text_and_repr(straggler: gpuprof.Report) -> None:
    assert "Rank 2 computes" in str(straggler) and "\x1b[" not in str(straggler)
    short = repr(straggler)
    assert short.startswith("<gpuprof.Report 4 rank(s)") and len(short) < 300


def test_steps_and_jobs(tmp_path: Path) -> None:
    whole = gpuprof.analyze(SAMPLES / "imbalance")  # steps 1-3
    assert whole.ranks[0].steps == 3
    one = gpuprof.analyze(SAMPLES / "imbalance", steps=(2, 2))
    assert [r.steps for r in one.ranks] == [1] * len(one.ranks)
    assert one.ranks[0].window_us < whole.ranks[0].window_us
    assert gpuprof.analyze(SAMPLES / "imbalance", steps="2").to_dict()["ranks"] == one.to_dict()["ranks"]
    assert gpuprof.analyze(SAMPLES / "imbalance", steps=2).to_dict()["ranks"] == one.to_dict()["ranks"]
    tail = gpuprof.analyze(SAMPLES / "imbalance", steps=(2, None))
    assert tail.ranks[0].steps == whole.ranks[0].steps - 1
    two = gpuprof.analyze([SAMPLES / "straggler"], jobs=2)
    assert two.to_dict()["ranks"] == gpuprof.analyze(SAMPLES / "straggler").to_dict()["ranks"]
    lines: list[str] = []
    gpuprof.analyze(str(SAMPLES / "healthy"), progress=lines.append)
    assert any("analyzing" in ln for ln in lines)


@pytest.mark.parametrize(
    "kwargs, error, says",
    [
        ({"steps": "3:1"}, ValueError, "steps: last step 1 is before first step 3"),
        ({"steps": "x"}, ValueError, "steps: expected N"),
        ({"steps": (1, "2")}, TypeError, "steps"),
        ({"steps": True}, TypeError, "steps"),
        ({"jobs": 0}, ValueError, "jobs"),
    ],
)
def test_bad_arguments(kwargs: dict[str, object], error: type[Exception], says: str) -> None:
    with pytest.raises(error, match=says):
        gpuprof.analyze(SAMPLES / "healthy", **kwargs)  # type: ignore[arg-type]


def test_bad_inputs_raise_gpuprof_error_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(gpuprof.GpuprofError, match="no such file"):
        gpuprof.analyze(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [')
    with pytest.raises(gpuprof.GpuprofError) as info:
        gpuprof.analyze(bad)
    assert str(bad) in str(info.value)
    with pytest.raises(ValueError, match="at least one"):
        gpuprof.analyze([])
    with pytest.raises(gpuprof.GpuprofError, match="1e-05 GB"):
        gpuprof.analyze(SAMPLES / "healthy", max_input_gb=1e-5)
    with pytest.raises(ValueError, match="max_input_gb"):
        gpuprof.analyze(SAMPLES / "healthy", max_input_gb=-1)


def test_saved_report_and_session_folder(straggler: gpuprof.Report, tmp_path: Path) -> None:
    saved = tmp_path / "r.json"
    saved.write_text(straggler.to_json())
    again = gpuprof.analyze(saved)
    assert again.to_dict()["ranks"] == straggler.to_dict()["ranks"]
    assert gpuprof.load_report(saved).to_dict()["recommendations"] == straggler.to_dict()["recommendations"]
    with pytest.raises(ValueError, match="saved report"):
        gpuprof.analyze(saved, steps="1")
    broken = tmp_path / "broken.json"
    doc = straggler.to_dict()
    doc["ranks"][0]["lost_us"] = []
    broken.write_text(json.dumps(doc))
    with pytest.raises(gpuprof.GpuprofError, match=r"\$\.ranks\[0\]\.lost_us: expected an object"):
        gpuprof.load_report(broken)
    session = gpuprof.analyze(SAMPLES / "rl-post-training")
    assert "samples" in session.to_dict() and len(session.ranks) == 2


BASE = report([rank(0, lost_ms={"dataloader": 10}), rank(1, lost_ms={"dataloader": 10})])
WORSE = report([rank(0, lost_ms={"dataloader": 40}), rank(1, lost_ms={"dataloader": 30})])


def test_check_thresholds_and_baseline(tmp_path: Path) -> None:
    results = gpuprof.check(WORSE, min_compute_pct=50, max_lost_pct={"dataloader": 20, gpuprof.Cause.HOST: 1})
    assert [(r.name, r.passed) for r in results] == [
        ("min_compute_pct", True),
        ("max_lost_pct.dataloader", False),
        ("max_lost_pct.host", True),
    ]
    assert isinstance(results[0], gpuprof.CheckResult)
    assert results[1].measured == pytest.approx(35.0)
    base_file = tmp_path / "base.json"
    base_file.write_text(BASE.to_json())
    by_path = gpuprof.check(WORSE, baseline=base_file, tolerance_pct=5)
    by_report = gpuprof.check(WORSE, baseline=BASE, tolerance_pct=5)
    assert by_path == by_report
    assert [r.name for r in by_path.failed] == ["baseline.compute_pct", "baseline.lost_pct.dataloader"]
    assert not by_path.passed
    assert gpuprof.check(WORSE, baseline=BASE, tolerance_pct=30).passed
    same = gpuprof.check(BASE, baseline=BASE)
    # Four steps a side cannot reach 99 %: inconclusive, which passes unless strict.
    assert same.passed and [r.name for r in same] == ["baseline.step"]
    assert same.verdict is not None and same.verdict.kind.value == "inconclusive"
    assert not gpuprof.check(BASE, baseline=BASE, strict=True).passed


def test_check_and_diff_give_the_same_verdict(tmp_path: Path) -> None:
    steps = [25.0, 25.2, 24.9, 25.1, 24.8, 25.3, 25.0, 24.95]
    base = report([stepped_rank(0, steps, {"host": [2.0] * 8})])
    slower = report([stepped_rank(0, [s * 1.1 for s in steps], {"host": [4.5] * 8})])
    checks = gpuprof.check(slower, baseline=[base, base.save(tmp_path / "b.json")], min_effect_pct=5)
    assert isinstance(checks, gpuprof.CheckResults) and not checks.passed
    v = checks.verdict
    assert isinstance(v, gpuprof.Verdict) and v.kind.value == "regression" and v.n_base == 16
    assert v.low_pct is not None and 0 < v.low_pct < 10.0 < (v.high_pct or 0)
    assert [p.name for p in v.causes] == ["host"]
    d = gpuprof.diff(base, slower)
    assert isinstance(d, gpuprof.ReportDiff) and d.overall == "worse"
    assert d.verdict is not None and d.verdict.kind is v.kind and d.verdict.effect_pct == pytest.approx(v.effect_pct)
    assert gpuprof.diff(base, slower, min_effect_pct=50).overall == "same"  # significant, within a 50 % floor
    with pytest.raises(ValueError, match="confidence_pct"):
        gpuprof.diff(base, slower, confidence_pct=100)
    with pytest.raises(TypeError, match="current"):
        gpuprof.diff(base, 3)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs, error, says",
    [
        ({}, gpuprof.GpuprofError, "nothing to check"),
        ({"max_lost_pct": {"dataloadr": 5}}, gpuprof.GpuprofError, r"unknown cause 'dataloadr' \(did you mean 'dataloader'\?\)"),
        ({"max_lost_pct": {"dataloader": 150}}, ValueError, "between 0 and 100"),
        ({"min_compute_pct": float("nan")}, ValueError, "min_compute_pct"),
        ({"max_step_ms": "10"}, TypeError, "max_step_ms"),
        ({"max_step_ms": 10, "tolerance_pct": -1}, ValueError, "tolerance_pct"),
        ({"max_step_ms": 10, "min_effect_pct": -1}, ValueError, "min_effect_pct"),
        ({"baseline": [], "max_step_ms": 10}, TypeError, "baseline"),
    ],
)
def test_check_bad_arguments(kwargs: dict[str, object], error: type[Exception], says: str) -> None:
    with pytest.raises(error, match=says):
        gpuprof.check(BASE, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="gpuprof.Report"):
        gpuprof.check({"schema": "gpuprof.report/1"}, max_step_ms=1)  # type: ignore[arg-type]


def test_check_values_are_rounded_as_the_json_rounds_them() -> None:
    # 1/3 of the window: 33.333...% in memory, 33.333 in the JSON and in the check.
    third = report([rank(0, window_ms=300, lost_ms={"dataloader": 100})])
    (res,) = gpuprof.check(third, max_lost_pct={"dataloader": 10.0000000001})
    assert res.measured == 33.333 and res.allowed == 10.0
    assert gpuprof.check(third, max_lost_pct={"DataLoader": 50})[0].passed  # names as the CLI takes them


# --- the notebook user's API ------------------------------------------------------------------


def test_save_and_load_give_back_an_equal_report(straggler: gpuprof.Report, tmp_path: Path) -> None:
    for name in ("r.json", "r.json.gz"):
        assert gpuprof.load_report(straggler.save(tmp_path / name)) == straggler
    assert straggler != gpuprof.load_report(_saved(tmp_path, report([rank(0)])))
    page = straggler.save(tmp_path / "r.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and page == straggler.to_html()
    assert straggler.save(tmp_path / "r.md").read_text() == straggler.to_markdown()
    assert straggler.save(tmp_path / "r.txt").read_text() == str(straggler)
    with pytest.raises(gpuprof.GpuprofError, match="cannot tell the report format"):
        straggler.save(tmp_path / "r.data")
    assert straggler.save(tmp_path / "r.data", format="json").read_text() == straggler.to_json()
    assert not (tmp_path / "r.out").exists()


def _saved(tmp_path: Path, rep: gpuprof.Report) -> Path:
    return rep.save(tmp_path / "other.json")


def test_a_notebook_shows_the_report(straggler: gpuprof.Report) -> None:
    import html

    frame = straggler._repr_html_()
    assert frame.startswith("<iframe srcdoc=") and 'sandbox=""' in frame
    assert html.unescape(frame.split('srcdoc="')[1].split('" sandbox')[0]) == straggler.to_html()
    assert straggler._repr_markdown_() == straggler.to_markdown()


def test_dataframes_answer_the_usual_questions(straggler: gpuprof.Report) -> None:
    steps = straggler.to_dataframe("steps")
    assert list(steps.index.names) == ["rank", "step"] and len(steps) == sum(len(r.step_times_us) for r in straggler.ranks)
    assert steps.loc[(2, 1), "duration_us"] > 0
    kernels = straggler.to_dataframe("kernels")
    assert {"rank", "kernel", "calls", "total_us", "share_pct"} <= set(kernels.columns)
    assert set(kernels["rank"]) == {0, 1, 2, 3} and (kernels["share_pct"] <= 100).all()
    coll = straggler.to_dataframe("collectives")
    assert {"size_bytes", "duration_us", "busbw_gbps", "wait_us_per_step"} <= set(coll.columns) and len(coll) >= 4
    whatifs = straggler.to_dataframe("whatifs")
    top = straggler.recommendations[0]
    row = whatifs.loc[top.whatif]
    assert row["recommendation"] == 1 and row["savings_pct"] == pytest.approx(top.estimated_savings_pct, abs=0.01)
    assert row["step_after_us"] < row["step_before_us"]
    recs = straggler.to_dataframe("recommendations")
    assert list(recs["title"]) == [r.title for r in straggler.recommendations]
    assert recs.loc[1, "saved_us_per_step"] == pytest.approx(top.saved_us_per_step)
    assert top.saved_us_per_step == pytest.approx(row["step_before_us"] * top.estimated_savings_pct / 100, rel=1e-3)
    # The named numbers beside the prose: a dict per row, spread into columns on request.
    assert recs.loc[1, "facts"] == top.facts and top.facts
    spread = pd.json_normalize(list(recs["facts"]))
    assert spread.loc[0, "step_after_us"] == pytest.approx(row["step_after_us"], rel=1e-3)
    with pytest.raises(gpuprof.GpuprofError, match="did you mean 'kernels'"):
        straggler.to_dataframe("kernel")


def test_docstrings_point_at_the_projects_own_docs() -> None:
    import gpuprof.model.report as model
    import gpuprof.render.json as json_renderer

    root = Path(__file__).resolve().parents[2]
    for mod in (model, json_renderer, gpuprof.api):
        assert "SPEC.md" not in (mod.__doc__ or ""), mod.__name__
    assert "docs/report.md" in (model.__doc__ or "") and (root / "docs" / "report.md").is_file()
