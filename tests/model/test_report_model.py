"""The JSON report layout of SPEC.md, and its round trip for check/diff."""

from __future__ import annotations

import json

import pytest

from gpuprof.model.report import (
    CAUSES,
    SCHEMA,
    Cause,
    RankReport,
    Recommendation,
    Report,
    ReportFormatError,
    report_from_dict,
    report_to_dict,
    sort_recommendations,
    zero_lost,
)
from gpuprof.render import render


def _report() -> Report:
    lost0 = zero_lost()
    lost0[Cause.DATALOADER] = 300.0
    lost0[Cause.OTHER] = 100.0
    lost1 = zero_lost()
    lost1[Cause.STRAGGLER] = 50.0
    ranks = (
        RankReport(rank=0, device="GPU A", steps=2, window_us=1000.0, compute_us=600.0, lost_us=lost0),
        RankReport(rank=1, device=None, steps=2, window_us=800.0, compute_us=750.0, lost_us=lost1),
    )
    recs = (
        Recommendation("b", Cause.HOST, "t", 3.0, (0,), ("e",), ("a",)),
        Recommendation("a", Cause.DATALOADER, "t", 30.0, (0,), ("e",), ("a",)),
    )
    return Report(inputs=("x.json",), ranks=ranks, recommendations=sort_recommendations(recs))


def test_json_has_every_spec_key_and_all_eight_causes() -> None:
    doc = json.loads(render(_report(), "json"))
    assert doc["schema"] == SCHEMA
    for key in ("inputs", "ranks", "totals", "recommendations"):
        assert key in doc
    for r in doc["ranks"]:
        for key in ("rank", "device", "steps", "window_us", "compute_us", "lost_us"):
            assert key in r
        assert set(r["lost_us"]) == {c.value for c in CAUSES}
    assert set(doc["totals"]["lost_us"]) == {c.value for c in CAUSES}
    assert doc["totals"]["window_us"] == pytest.approx(1800.0)
    assert doc["totals"]["lost_us"]["dataloader"] == pytest.approx(300.0)
    rec = doc["recommendations"][0]
    for key in ("id", "category", "title", "estimated_savings_pct", "ranks", "evidence", "actions"):
        assert key in rec


def test_recommendations_sorted_by_savings() -> None:
    doc = report_to_dict(_report())
    savings = [r["estimated_savings_pct"] for r in doc["recommendations"]]
    assert savings == sorted(savings, reverse=True)
    assert doc["recommendations"][0]["id"] == "a"


def test_round_trip_keeps_numbers() -> None:
    doc = json.loads(render(_report(), "json"))
    back = report_from_dict(doc)
    assert report_to_dict(back)["ranks"] == doc["ranks"]
    assert back.ranks[0].lost_us[Cause.DATALOADER] == 300.0
    assert back.recommendations[0].category is Cause.DATALOADER


@pytest.mark.parametrize(
    "doc, needle",
    [
        ([], "JSON object"),
        ({"schema": "gpuprof.report/2"}, "gpuprof.report/2"),
        ({"schema": SCHEMA, "ranks": [{"rank": 0}], "recommendations": []}, "malformed"),
    ],
)
def test_other_schemas_are_refused(doc: object, needle: str) -> None:
    with pytest.raises(ReportFormatError, match=needle):
        report_from_dict(doc)
