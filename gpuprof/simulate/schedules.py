"""Pipeline-parallel schedules: the order in which each stage runs its microbatches.

A schedule is, per stage, a list of :class:`Work` items (forward or backward of one
microbatch on one model chunk). The communication follows from the order: a forward on
virtual stage ``c * p + s`` receives from the virtual stage before it and sends to the one
after; a backward goes the other way.

Theoretical bubble fractions, with equal work per stage and free communication:
GPipe and 1F1B ``(p - 1) / (m + p - 1)``; interleaved 1F1B with ``v`` chunks per stage
``(p - 1) / (v * m + p - 1)``.
"""

from __future__ import annotations

from typing import NamedTuple

SCHEDULES = ("gpipe", "1f1b", "interleaved")


class Work(NamedTuple):
    kind: str  # "F" or "B"
    mb: int  # microbatch index
    chunk: int  # model chunk on this stage (0 unless interleaved)


def theoretical_bubble(schedule: str, stages: int, microbatches: int, chunks: int = 1) -> float:
    """Idle share of a stage's pipeline time for a balanced pipeline."""
    v = chunks if schedule == "interleaved" else 1
    return (stages - 1) / (v * microbatches + stages - 1)


def gpipe(stage: int, stages: int, microbatches: int) -> list[Work]:
    return [Work("F", j, 0) for j in range(microbatches)] + [Work("B", j, 0) for j in range(microbatches)]


def one_f_one_b(stage: int, stages: int, microbatches: int) -> list[Work]:
    warmup = min(stages - stage - 1, microbatches)
    order = [Work("F", j, 0) for j in range(warmup)]
    for i in range(microbatches - warmup):
        order += [Work("F", warmup + i, 0), Work("B", i, 0)]
    order += [Work("B", j, 0) for j in range(microbatches - warmup, microbatches)]
    return order


def interleaved(stage: int, stages: int, microbatches: int, chunks: int) -> list[Work]:
    """Megatron-LM's interleaved 1F1B (needs ``microbatches % stages == 0``)."""
    p, v = stages, chunks
    total = microbatches * v

    def item(k: int, backward: bool) -> Work:
        group, within = divmod(k, p * v)
        chunk = within // p
        if backward:
            chunk = v - 1 - chunk
        return Work("B" if backward else "F", group * p + within % p, chunk)

    warmup = min((p - stage - 1) * 2 + (v - 1) * p, total)
    order = [item(k, False) for k in range(warmup)]
    for i in range(total - warmup):
        order += [item(warmup + i, False), item(i, True)]
    order += [item(k, True) for k in range(total - warmup, total)]
    return order


def stage_order(schedule: str, stage: int, stages: int, microbatches: int, chunks: int = 1) -> list[Work]:
    if schedule == "gpipe":
        return gpipe(stage, stages, microbatches)
    if schedule == "1f1b":
        return one_f_one_b(stage, stages, microbatches)
    if schedule == "interleaved":
        return interleaved(stage, stages, microbatches, chunks)
    raise ValueError(f"unknown schedule {schedule!r} (expected one of {', '.join(SCHEDULES)})")
