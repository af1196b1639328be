"""Phrases of what :func:`gpuprof.advice.advise_all` adds and qualifies last: the general
advice for a cause no finding spoke for, the line where a saving and its cause's share
disagree, the caveats beside a saving and the line for advice held back."""

from __future__ import annotations

from collections.abc import Sequence

from gpuprof.advice.phrasebook.book import phrase, templates
from gpuprof.model.causes import spec_of
from gpuprof.util.phrases import spans

# The line that explains a saving far from its cause's lost share starts so.
AGREE_MARK = "Saving vs lost share:"


# --- general advice, by cause ---------------------------------------------------------------
# Each cause's title, what was missing and actions are in its declaration (gpuprof.model.causes).

_COMPILED = (
    "The model is already compiled: capture CUDA graphs too (torch.compile(mode='reduce-overhead')) and "
    "look for graph breaks (TORCH_LOGS=graph_breaks)."
)


@phrase("title.general")
def general_title(cause: str) -> str:
    return spec_of(cause).title


@phrase("general.why")
def why_general(cause: str) -> str:
    return f"general advice: {spec_of(cause).missing}, so no more specific fix can be named"


@phrase("general.actions")
def general_actions(cause: str, compiled: bool) -> tuple[str, ...]:
    """The general actions, fitted to the trace: a model already compiled (most of its
    kernels Inductor's) is not told to compile itself."""
    actions = spec_of(cause).actions
    if cause == "host" and compiled:
        return tuple(_COMPILED if a.startswith("torch.compile") else a for a in actions)
    return actions


@phrase("held_back")
def held_back(title: str, missing: Sequence[tuple[str, Sequence[int], str]]) -> str:
    """``missing``: per evidence lacking, its label, the ranks that lack it and why."""
    parts = [f"{label} ({'rank' if len(ranks) == 1 else 'ranks'} {spans(ranks)}: {why})" for label, ranks, why in missing]
    return f"held back '{title}': it needs " + "; ".join(parts)


_SHARE = "{est_pct:.1f}% is {than} the {share_pct:.1f}% {unit.of_a} that {cause} holds: "
templates({
    "general.share": "{cause} holds {top_pct:.1f}% {unit.of_the} on rank{ranks:s} {ranks:list}",
    "general.why_pipeline_known": (
        "the {schedule} schedule with p={stages} stages and m={microbatches} microbatches leaves only "
        "{theory_pct:.0f}% of the pipeline span to fill and drain: the rest of this idle time is stages waiting for a "
        "slower rank or stage, or for work that varies (see the recommendations above)"
    ),
    "rank.adds": (
        "replayed with the recommendation{above:s} above, it adds {gain_pct:.1f}% {unit.of_the} "
        "({alone_pct:.1f}% alone): the fixes reinforce each other"
    ),
    "general.no_saving": "no saving is estimated: nothing says what would remove this idle time",
    "general.queued": (
        "on rank {rank} the next kernel had already been launched during most of the lost time that no rule "
        "explains, and nothing recorded ran on the GPU meanwhile: it waited on work the trace does not "
        "show (a filtered or sampled export, or an event of a stream the profiler left out)"
    ),
    "general.closed_form": (
        "estimate: this idle time vanishing on every rank, with the job's step set by its slowest rank "
        "(an upper bound: no replay of this fix was possible)"
    ),
    # a saving far from its cause's share
    "agree.less": (
        AGREE_MARK + " its " + _SHARE.replace("{than}", "less than") + "once that idle time is gone the job still "
        "waits on other work of its critical path (other ranks, collectives, other causes), which the estimate follows"
    ),
    "agree.more": (
        AGREE_MARK + " its " + _SHARE.replace("{than}", "more than") + "removing it also removes idle time it sets "
        "off that is counted under other causes (a drained queue refilled by late launches, waits of the ranks "
        "that waited for it)"
    ),
    # caveats beside a saving
    "caveat.partial_job": "upper bound: {present} of {world} ranks profiled",
    "caveat.python_stacks": "host time may be inflated: the trace recorded Python stacks (with_stack=True)",
    "caveat.slow_host": (
        "host time may be inflated by the profiler: host ops run slow (median aten::empty "
        "{empty_op_median_us:.0f} µs, normally a few µs)"
    ),
})

__all__ = ["AGREE_MARK"]
