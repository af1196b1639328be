"""advise(): one recommendation per id, ranked by savings, none that would save nothing."""

from __future__ import annotations

import pytest

import gpuprof.advice as advice
from gpuprof.advice import AdviceContext
from gpuprof.model.report import Cause, Recommendation


def _rec(id_: str, pct: float) -> Recommendation:
    return Recommendation(id_, Cause.HOST, "t", pct, (0,), ("e",), ("a",))


def test_ranked_deduplicated_and_negligible_ones_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    recs = [_rec("a", 3.0), _rec("b", 0.2), _rec("c", 12.0), _rec("a", 5.0), _rec("d", 0.0)]
    monkeypatch.setattr(advice.context, "ADVISORS", [lambda ctx: recs])
    monkeypatch.setattr(advice, "_loaded", True)
    out = advice.advise(AdviceContext(summaries=(), reports=()))
    assert [r.id for r in out] == ["c", "a"]
    assert out[1].estimated_savings_pct == 5.0  # the larger estimate of the duplicate id
