"""Phrases of the pipeline findings (:mod:`gpuprof.advice.pipeline`): a slow stage, and the
schedule's fill and drain."""

from __future__ import annotations

from gpuprof.advice.phrasebook.book import specs, templates

_IDLE = "the other stages sit idle {idle_pct:pct_range} of the pipeline span"
_SCHEDULE = "{schedule} schedule with p={stages} stages, m={microbatches} microbatches"
_BUBBLE = ": even with balanced stages {theory_pct:.0f}% of the pipeline span is fill and drain"

specs({"stage_pcts": lambda v: ", ".join(f"stage {s} {pct:.0f}%" for s, pct in v)})
templates({
    "title.pipeline-imbalance": (
        "Pipeline stage {stage} computes {ratio:.2f}x the other stages per microbatch: move layers off it"
    ),
    "pipeline.slow_stage": (
        "stage {stage}'s compute per microbatch is {compute_us:dur}, {ratio:.2f}x the median of the other stages "
        "(forward {forward_us:dur} vs {others_forward_us:dur}, backward {backward_us:dur} vs {others_backward_us:dur})"
    ),
    "pipeline.others_idle": _IDLE,
    "pipeline.others_idle_theory": (
        _IDLE + " waiting for it, against {theory_pct:.0f}% that a balanced {schedule} schedule with p={stages}, "
        "m={microbatches} leaves; stage {stage} itself idles {stage_idle_pct:.0f}%"
    ),
    "pipeline.balanced_span": (
        "with the same total compute spread evenly the pipeline span would drop from about {span_us:dur} "
        "to {after_us:dur} {unit.per} (bottleneck model sum(t) + (m-1) max(t))"
    ),
    "pipeline.imbalance_actions": (
        (
            "Rebalance layers across stages: give stage {stage} fewer transformer layers to pay for what "
            "only it runs (embedding, output head, loss) -- e.g. Megatron's "
            "--decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers, or an uneven "
            "split_spec in torch.distributed.pipelining."
        ),
        "Re-profile after the change: the stages' compute per microbatch should be within ~10% of each other.",
    ),
    "title.pipeline-bubble": (
        "Only {microbatches} microbatches for {stages} pipeline stages: use more microbatches or an interleaved schedule"
    ),
    "title.pipeline-bubble-enough": (
        "Fill and drain of {stages} pipeline stages with {microbatches} microbatches: use more microbatches or an "
        "interleaved schedule"
    ),
    "pipeline.schedule": _SCHEDULE + _BUBBLE,
    "pipeline.schedule_chunks": _SCHEDULE + ", v={chunks} chunks" + _BUBBLE,
    "pipeline.bubbles": "measured bubble per stage: {bubbles:stage_pcts}",
    "pipeline.halved": (
        "halving the bubble saves about {saved_us:dur} {unit.per} ({stages_less_one} x {microbatch_us:dur} / 2)"
    ),
    "pipeline.counted_from": "microbatches counted from the {source}",
    "pipeline.bubble_actions_more": (
        (
            "Raise the number of microbatches from {microbatches} to {min_microbatches} (smaller micro-batch size or "
            "more gradient-accumulation steps at the same global batch): the fill and drain shrink with it."
        ),
        (
            "Use an interleaved schedule (virtual pipeline stages: Megatron "
            "--num-layers-per-virtual-pipeline-stage, torch.distributed.pipelining "
            "ScheduleInterleaved1F1B) or a zero-bubble schedule (ScheduleInterleavedZeroBubble)."
        ),
    ),
    "pipeline.bubble_actions": (
        (
            "Raise the number of microbatches to at least {min_microbatches} (smaller micro-batch size or more "
            "gradient-accumulation steps at the same global batch)."
        ),
        (
            "Use an interleaved schedule (virtual pipeline stages: Megatron "
            "--num-layers-per-virtual-pipeline-stage, torch.distributed.pipelining "
            "ScheduleInterleaved1F1B) or a zero-bubble schedule (ScheduleInterleavedZeroBubble)."
        ),
    ),
})
