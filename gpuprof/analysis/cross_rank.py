"""Job-level analysis across ranks: from compact per-rank summaries to claims and findings.

Placeholder until the cross-rank rules land: no claims, no findings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from gpuprof.analysis.intervals import Intervals
from gpuprof.analysis.summary import RankSummary
from gpuprof.model.report import Cause


@dataclass(frozen=True)
class CrossRankResult:
    """``claims[rank][cause]``: intervals (on that rank's own clock) claimed by job-level
    rules; ``findings``: JSON-serializable job-level facts for the report and the advice."""

    claims: Mapping[int, Mapping[Cause, Intervals]] = field(default_factory=dict)
    findings: Mapping[str, Any] = field(default_factory=dict)


def analyze_job(summaries: Sequence[RankSummary]) -> CrossRankResult:
    return CrossRankResult()
