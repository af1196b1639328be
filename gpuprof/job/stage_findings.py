"""The pipeline's findings, as typed records (part of :class:`gpuprof.job.findings.JobFindings`).

:class:`PipelineFindings` is what :func:`gpuprof.job.pipeline_parallel.analyze_pipeline`
finds: the stages and where they were told from, the microbatches, the schedule, each
stage's row (:class:`StageRow`) and the slowest stage (:class:`SlowestStage`). Units as in
:mod:`gpuprof.job.findings`; ``to_dict`` writes the report's ``job.pipeline`` section.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StageRow:
    """One pipeline stage: its ranks; its typical replica's forward, backward and compute
    per microbatch (``None``: phases unknown); its bubble fraction and time per step, and
    the bottleneck model's bubble fraction for it (``None``: not modelled)."""

    stage: int
    ranks: tuple[int, ...]
    bubble_fraction: float
    bubble_us_per_step: float
    forward_per_microbatch_us: float | None = None
    backward_per_microbatch_us: float | None = None
    compute_per_microbatch_us: float | None = None
    modelled_bubble_fraction: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"stage": self.stage, "ranks": list(self.ranks)}
        if self.compute_per_microbatch_us is not None:
            out["forward_per_microbatch_us"] = self.forward_per_microbatch_us
            out["backward_per_microbatch_us"] = self.backward_per_microbatch_us
            out["compute_per_microbatch_us"] = self.compute_per_microbatch_us
        out["bubble_fraction"] = self.bubble_fraction
        out["bubble_us_per_step"] = self.bubble_us_per_step
        if self.modelled_bubble_fraction is not None:
            out["modelled_bubble_fraction"] = self.modelled_bubble_fraction
        return out


@dataclass(frozen=True)
class SlowestStage:
    """With two or more stages timed: the stage with the most compute per microbatch, its
    ranks, its ratio over the others' median, and the bottleneck model's span with the
    measured and with evenly spread stage times."""

    stage: int
    ranks: tuple[int, ...]
    ratio: float | None
    modelled_span_us: float
    modelled_balanced_span_us: float


@dataclass(frozen=True)
class PipelineFindings:
    """A pipeline-parallel job: stages (and what they were told from: ``layout``,
    ``annotations``, ``p2p timing``), microbatches (``None`` unknown; the signal counted),
    chunks, schedule (``gpipe``, ``1f1b``, ``interleaved-1f1b``, ``unknown``), the
    schedule's theoretical bubble fraction, the median pipeline span of a step, steps
    measured, the stages, and the slowest stage."""

    stages: int
    stage_source: str
    microbatches: int | None
    microbatches_source: str | None
    chunks: int
    schedule: str
    theoretical_bubble_fraction: float | None
    span_us: float | None
    steps_measured: int
    per_stage: tuple[StageRow, ...]
    slowest: SlowestStage | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "stages": self.stages,
            "stage_source": self.stage_source,
            "microbatches": self.microbatches,
            "microbatches_source": self.microbatches_source,
            "chunks": self.chunks,
            "schedule": self.schedule,
            "theoretical_bubble_fraction": self.theoretical_bubble_fraction,
            "span_us": self.span_us,
            "steps_measured": self.steps_measured,
            "per_stage": [r.to_dict() for r in self.per_stage],
        }
        if self.slowest is not None:
            out["slowest_stage"] = self.slowest.stage
            out["slowest_stage_ranks"] = list(self.slowest.ranks)
            out["slowest_stage_ratio"] = self.slowest.ratio
            out["modelled_span_us"] = self.slowest.modelled_span_us
            out["modelled_balanced_span_us"] = self.slowest.modelled_balanced_span_us
        return out


__all__ = ["PipelineFindings", "SlowestStage", "StageRow"]
