"""The JSON Schema of gpuprof.report/1: generated from the model, shipped, and true of real reports."""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from analyzed import analysis_of
from jsonschema import Draft202012Validator
from reportfactory import rank, rec, report

from gpuprof.model.report import CAUSES, SCHEMA, ReportFormatError, report_from_dict, report_to_dict
from gpuprof.model.schema import first_problem, report_schema, schema_text, shipped_schema_text

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
SAMPLE_DIRS = sorted(p for p in SAMPLES.iterdir() if p.is_dir())
# Real traces of different kinds: old Kineto schema, 8 ranks, an op-level timeline, CPU only.
SHARED = ("resnet50-nw0", "dlrm-8rank", "megatron-pp4-timeline", "edge-cpu-only-gloo")


def _validator() -> Draft202012Validator:
    return Draft202012Validator(json.loads(shipped_schema_text()))


def _errors(doc: Any) -> list[str]:
    return [f"{e.json_path}: {e.message}" for e in _validator().iter_errors(doc)]


def test_shipped_schema_is_the_generated_one() -> None:
    assert shipped_schema_text() == schema_text(report_schema()), (
        "gpuprof/model/report.schema.json is stale: python -m gpuprof.model.schema --write"
    )


def test_schema_is_a_valid_draft_2020_12_schema() -> None:
    Draft202012Validator.check_schema(json.loads(shipped_schema_text()))


def test_spec_keys_are_required_and_nothing_more() -> None:
    """SPEC.md: every key of its example is present; more keys may be added."""
    s = report_schema()
    defs = s["$defs"]
    assert s["required"] == ["schema", "inputs", "ranks", "totals", "recommendations"]
    assert defs["rank"]["required"] == ["rank", "device", "steps", "window_us", "compute_us", "lost_us"]
    assert defs["recommendation"]["required"] == [
        "id", "category", "title", "estimated_savings_pct", "ranks", "evidence", "actions"
    ]
    assert defs["totals"]["required"] == ["window_us", "compute_us", "lost_us"]
    assert defs["lost_us"]["required"] == [c.value for c in CAUSES]
    assert defs["cause"]["enum"] == [c.value for c in CAUSES]
    for name in ("rank", "recommendation", "totals"):
        assert defs[name]["additionalProperties"] is True
    assert s["additionalProperties"] is True and defs["lost_us"]["additionalProperties"] is False


@pytest.fixture(scope="module")
def sample_reports() -> dict[str, dict[str, Any]]:
    return {d.name: json.loads(analysis_of(d).report.to_json()) for d in SAMPLE_DIRS}  # analyze_paths([d])


def test_every_sample_report_is_valid(sample_reports: dict[str, dict[str, Any]]) -> None:
    assert len(sample_reports) >= 10
    for name, doc in sample_reports.items():
        assert _errors(doc) == [], name
        assert first_problem(doc) is None, name
        back = report_to_dict(report_from_dict(doc))  # the round trip loses nothing
        assert {k: v for k, v in back.items() if k != "totals"} == {k: v for k, v in doc.items() if k != "totals"}
        # Totals are summed again from the rounded per-rank figures: equal to the rounding.
        assert back["totals"]["window_us"] == pytest.approx(doc["totals"]["window_us"], abs=0.01), name


@pytest.mark.parametrize("name", SHARED)
def test_real_trace_reports_are_valid(shared_traces: Path, name: str) -> None:
    doc = json.loads(analysis_of(shared_traces / name).report.to_json())  # analyze_paths, once per session
    assert doc["ranks"], name
    assert _errors(doc) == []
    assert first_problem(doc) is None


def _doc() -> dict[str, Any]:
    r = report(
        [rank(0, lost_ms={"dataloader": 20}), rank(1, device=None, extra={"is_straggler": True})],
        [rec("dataloader", 12.5)],
        warnings=("w",),
        extra={"job": {"stragglers": []}},
    )
    return json.loads(r.to_json())


def _set(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def apply(doc: dict[str, Any]) -> None:
        node: Any = doc
        for p in path[:-1]:
            node = node[p]
        node[path[-1]] = value

    return apply


def _drop(path: tuple[Any, ...]) -> Callable[[dict[str, Any]], None]:
    def apply(doc: dict[str, Any]) -> None:
        node: Any = doc
        for p in path[:-1]:
            node = node[p]
        del node[path[-1]]

    return apply


@pytest.mark.parametrize(
    "mutate, says",
    [
        (_set(("ranks", 0, "lost_us"), [1.0, 2.0]), "$.ranks[0].lost_us: expected an object, got an array"),
        (_set(("inputs",), 5), "$.inputs: expected an array, got an integer"),
        (_set(("inputs",), [3]), "$.inputs[0]: expected a string, got an integer"),
        (_drop(("ranks", 1, "steps")), "$.ranks[1]: missing key 'steps'"),
        (_drop(("totals",)), "$: missing key 'totals'"),
        (_drop(("ranks", 0, "lost_us", "host")), "$.ranks[0].lost_us: missing key 'host'"),
        (_set(("ranks", 0, "lost_us", "hots"), 1.0), "$.ranks[0].lost_us: unexpected key(s) 'hots'"),
        (_set(("recommendations", 0, "category"), "gpu"), '$.recommendations[0].category: "gpu" is not one of'),
        (_set(("recommendations", 0, "ranks"), ["0"]), "$.recommendations[0].ranks[0]: expected an integer, got a string"),
        (_set(("ranks", 0, "rank"), True), "$.ranks[0].rank: expected an integer, got a boolean"),
        (_set(("ranks", 0, "window_us"), -5.0), "$.ranks[0].window_us: -5.0 is below the minimum 0"),
        (_set(("ranks", 0, "device"), 7), "$.ranks[0].device: expected a string or null, got an integer"),
        (_set(("ranks",), {"0": {}}), "$.ranks: expected an array, got an object"),
        (_set(("ranks", 0, "compute_us"), math.nan), "$.ranks[0].compute_us: NaN is not allowed"),
        (_set(("totals", "window_us"), math.inf), "$.totals.window_us: Infinity"),
        (_set(("job", "weird key"), [1, -math.inf]), '$.job["weird key"][1]: Infinity'),
        (_set(("ranks", 0, "steps"), 10**400), "$.ranks[0].steps: an integer beyond 1.8e308"),
        (_set(("job", "model_error_pct"), "3%"), "$.job.model_error_pct: expected a number or null, got a string"),
        (_set(("recommendations", 0, "whatif"), 3), "$.recommendations[0].whatif: expected a string or null"),
    ],
)
def test_malformed_reports_name_the_first_problem(mutate: Callable[[dict[str, Any]], None], says: str) -> None:
    doc = _doc()
    assert first_problem(doc) is None
    bad = copy.deepcopy(doc)
    mutate(bad)
    problem = first_problem(bad)
    assert problem is not None and problem.startswith(says), problem
    with pytest.raises(ReportFormatError, match="malformed gpuprof report"):
        report_from_dict(bad)


def test_more_keys_are_allowed_where_the_spec_allows_extension() -> None:
    doc = _doc()
    doc["recommendations"][0]["whatif"] = "no-dataloader-wait"
    doc["recommendations"][0]["replay"] = {"step_us_after": 1.0, "replayed": True}
    doc["job"].update({"model_error_pct": -2.5, "combined_savings_pct": None})
    doc["ranks"][0]["new_rank_fact"] = [1, 2]
    doc["totals"]["new_total"] = 1
    doc["new_top_level"] = {"x": 1}
    assert first_problem(doc) is None and _errors(doc) == []
    back = report_from_dict(doc)
    assert back.extra["new_top_level"] == {"x": 1} and back.ranks[0].extra["new_rank_fact"] == [1, 2]


def test_schema_name_is_checked_first() -> None:
    with pytest.raises(ReportFormatError, match="gpuprof.report/2"):
        report_from_dict({**_doc(), "schema": "gpuprof.report/2"})
    assert _doc()["schema"] == SCHEMA


def test_a_report_holding_nan_is_never_written() -> None:
    r = report([rank(0)], extra={"job": {"x": math.nan}})
    with pytest.raises(ValueError):
        r.to_json()


def test_the_timeline_is_described_and_checked(sample_reports: dict[str, dict[str, Any]]) -> None:
    doc = sample_reports["pipeline-1f1b"]
    assert "timeline" in report_schema()["properties"]
    timeline = doc["timeline"]
    assert timeline["critical_path"] and timeline["lanes"] and first_problem(doc) is None
    for path, value, says in (
        (("timeline", "lanes", 0, "segments", 0, 1), "0", "$.timeline.lanes[0].segments[0][1]: expected a number"),
        (("timeline", "critical_path", 0, "rank"), -1, "$.timeline.critical_path[0].rank: -1 is below the minimum 0"),
        (("timeline", "step"), "2", "$.timeline.step: expected an integer or null"),
    ):
        bad = copy.deepcopy(doc)
        _set(path, value)(bad)
        problem = first_problem(bad)
        assert problem is not None and problem.startswith(says), problem
