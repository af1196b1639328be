"""The pipeline job's shape and work: who runs what, how long each microbatch takes, what
each fix changes.

:class:`PipelineJob` is what the pipeline scenario (:mod:`gpuprof.simulate.scenarios_pipeline`)
knows before any rank runs: the rank of each (stage, data-parallel replica) as Megatron-LM
lays them out (``rank = stage * dp + replica``), the process groups, each rank's
compute-time factor (its stage's work times its GPU's speed), each microbatch's work
(its sequence lengths), the time factor of each pipeline link's transfers and of each
stage's data-parallel collectives, and how the job-level fixes of :mod:`gpuprof.simulate.fixes`
change them: from that, which fixes change the job, which ones it is built to show and
the ranks each one speeds up (the plan's what-if fields). Nothing here runs or writes.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from statistics import mean, median
from typing import Any, NamedTuple

from gpuprof.model.report import Cause
from gpuprof.simulate.fixes import (
    BALANCED_BATCHES,
    BALANCED_STAGES,
    DOUBLE_MICROBATCHES,
    NO_VARIATION,
    PEER_MEDIAN_COLLECTIVE,
    PEER_MEDIAN_COMPUTE,
    PEER_MEDIAN_LINK,
    differs,
    faster,
    others_median,
)
from gpuprof.simulate.rank import RankSim


class WhatIfs(NamedTuple):
    """The plan's what-if fields: the fixes that change the job, those it is built to show,
    and the ranks each one speeds up."""

    applies: tuple[str, ...]
    intended: tuple[str, ...]
    culprits: dict[str, list[int]]


@dataclass(frozen=True)
class PipelineJob:
    """``stages`` x ``dp`` ranks running ``microbatches`` per step for ``steps`` steps, with
    the slowness the knobs ask for (see :func:`gpuprof.simulate.scenarios_pipeline.pipeline`)."""

    stages: int
    dp: int
    microbatches: int
    steps: int
    slow_stage: int
    slow_rank: int
    slowdown: float
    replica_spread: float
    seq_cv: float
    tied_embeddings: bool
    seed: int
    # one slow pipeline link: between stage slow_link and slow_link + 1 of one replica
    slow_link: int = -1
    slow_link_replica: int = 0
    link_slowdown: float = 1.0
    # one stage whose data-parallel collectives are slow
    slow_dp_group: int = -1
    group_slowdown: float = 1.0

    @property
    def p(self) -> int:
        return self.stages

    @property
    def n(self) -> int:
        return self.stages * self.dp

    @cached_property
    def stage_work(self) -> list[float]:
        """Each stage's work per microbatch (the slow stage's ``slowdown`` times the others')."""
        return [self.slowdown if st == self.slow_stage else 1.0 for st in range(self.p)]

    @cached_property
    def speed(self) -> list[float]:
        """Each rank's GPU's compute-time factor: its replica's, times ``slowdown`` for the slow rank."""
        dp = self.dp
        # replica d computes 1 + spread * d / (dp - 1) times slower: the last replica is the slowest
        replica_f = [1.0 + self.replica_spread * d / max(dp - 1, 1) for d in range(dp)]
        return [replica_f[r % dp] * (self.slowdown if r == self.slow_rank else 1.0) for r in range(self.n)]

    @cached_property
    def same_stage(self) -> list[list[int]]:
        """The ranks of each stage (its data-parallel group)."""
        return [[st * self.dp + d for d in range(self.dp)] for st in range(self.p)]

    @cached_property
    def seq(self) -> list[list[list[float]]]:
        """Work of each microbatch from its sequence lengths, per (replica, step, microbatch)."""
        seq_cv, m = self.seq_cv, self.microbatches
        seq_rng = random.Random(self.seed * 7919 + 13)
        shape = 1.0 / seq_cv**2 if seq_cv > 0 else 0.0
        def factor() -> float:
            return seq_rng.gammavariate(shape, 1.0 / shape) if seq_cv > 0 else 1.0

        return [[[factor() for _ in range(m)] for _ in range(self.steps)] for _ in range(self.dp)]

    @cached_property
    def base(self) -> list[float]:
        """Each rank's compute-time factor with no fix."""
        return self.compute_factors(frozenset())

    @cached_property
    def mean_work(self) -> float:
        """no_variation: every compute op at the mean of its type over ranks, stages and steps."""
        return mean(self.base[r] * x for r in range(self.n) for row in self.seq[r % self.dp] for x in row)

    # -- ranks and groups ---------------------------------------------------------------
    def pp_group(self, replica: int) -> tuple[str, list[int]]:
        """The pipeline group of a replica: its name and ranks."""
        return str(1 + replica), [st * self.dp + replica for st in range(self.p)]

    def dp_group(self, stage: int) -> tuple[str, list[int]]:
        """The data-parallel group of a stage: its name and ranks."""
        return str(1 + self.dp + stage), [stage * self.dp + d for d in range(self.dp)]

    def embedding_group(self, replica: int) -> tuple[str, list[int]]:
        """The group of a replica's first and last stage, which tie their embeddings."""
        return str(1 + self.dp + self.p + replica), [replica, (self.p - 1) * self.dp + replica]

    def pg_config(self, rank: int) -> list[dict[str, Any]]:
        """The process groups of ``rank``, as ``distributedInfo.pg_config`` lists them."""
        stage, replica = divmod(rank, self.dp)
        out = [_pg("0", list(range(self.n)), desc="default_pg")]
        out.append(_pg(*self.pp_group(replica), desc="PIPELINE_MODEL_PARALLEL_GROUP"))
        if self.dp > 1:
            out.append(_pg(*self.dp_group(stage), desc="DATA_PARALLEL_GROUP"))
        if self.tied_embeddings and stage in (0, self.p - 1):
            out.append(_pg(*self.embedding_group(replica), desc="EMBEDDING_GROUP"))
        return out

    # -- links and collective groups -------------------------------------------------------
    def link_index(self, replica: int, a: int, b: int) -> int | None:
        """The index in :meth:`link_factors` of the link between stages ``a`` and ``b`` of
        ``replica`` (either direction); ``None`` for stages that are not neighbours (the
        interleaved schedule's wrap from the last stage to the first keeps nominal speed)."""
        lo, hi = min(a, b), max(a, b)
        return lo * self.dp + replica if hi == lo + 1 else None

    @cached_property
    def base_links(self) -> list[float]:
        """Transfer-time factor of each pipeline link, index ``boundary * dp + replica``
        (boundary s joins stage s and s + 1): the slow link's ``link_slowdown``, else 1."""
        out = [1.0] * (max(self.p - 1, 0) * self.dp)
        if self.slow_link >= 0:
            out[self.slow_link * self.dp + self.slow_link_replica] = self.link_slowdown
        return out

    def link_factors(self, fixes: frozenset[str]) -> list[float]:
        """Each link's transfer-time factor under ``fixes``: ``peer_median_link`` brings each
        down to the median of the same boundary on the other replicas, ``no_variation`` sets
        every one to the median over all links."""
        base = self.base_links
        if NO_VARIATION in fixes and base:
            return [median(base)] * len(base)
        if PEER_MEDIAN_LINK in fixes:
            boundaries = [[b * self.dp + d for d in range(self.dp)] for b in range(self.p - 1)]
            return others_median(base, boundaries)
        return list(base)

    @cached_property
    def base_groups(self) -> list[float]:
        """Transfer-time factor of each stage's data-parallel collectives."""
        return [self.group_slowdown if st == self.slow_dp_group else 1.0 for st in range(self.p)]

    def group_factors(self, fixes: frozenset[str]) -> list[float]:
        """Each stage's data-parallel collective factor under ``fixes``:
        ``peer_median_collective`` brings each down to the median of the other stages'
        groups, ``no_variation`` sets every one to the median over all."""
        base = self.base_groups
        if NO_VARIATION in fixes:
            return [median(base)] * len(base)
        if PEER_MEDIAN_COLLECTIVE in fixes:
            return others_median(base, [list(range(self.p))])
        return list(base)

    def _link_ranks(self, links: list[int]) -> list[int]:
        """The ranks at both ends of the links (indices of :meth:`link_factors`)."""
        out: set[int] = set()
        for i in links:
            b, d = divmod(i, self.dp)
            out |= {b * self.dp + d, (b + 1) * self.dp + d}
        return sorted(out)

    def _group_ranks(self, stages: list[int]) -> list[int]:
        return sorted(r for st in stages for r in self.same_stage[st])

    # -- work ---------------------------------------------------------------------------
    def compute_factors(self, fixes: frozenset[str]) -> list[float]:
        """Each rank's compute-time factor: its stage's work times its GPU's speed."""
        p, dp = self.p, self.dp
        work = [mean(self.stage_work)] * p if BALANCED_STAGES in fixes else self.stage_work
        speed = self.speed
        peers = PEER_MEDIAN_COMPUTE in fixes and not self.seq_cv
        spd = others_median(speed, self.same_stage) if peers else speed
        return [work[r // dp] * spd[r] for r in range(self.n)]

    def work_factors(self, fixes: frozenset[str], rank: int, step: int) -> list[float]:
        """The compute-time factor of each microbatch of ``rank`` in ``step``: its stage's
        work, its GPU's speed and the microbatch's sequence lengths, as the fixes leave them."""
        microbatches, dp, seq, base_f = self.microbatches, self.dp, self.seq, self.base
        if NO_VARIATION in fixes:
            return [self.mean_work] * microbatches
        d = rank % dp
        f = self.compute_factors(fixes)[rank]
        w = seq[d][step]
        if BALANCED_BATCHES in fixes:
            w = [mean(x for rep in seq for x in rep[step])] * microbatches
        if PEER_MEDIAN_COMPUTE in fixes and self.seq_cv:
            # each rank's step no longer than the median of its stage's other replicas in that step
            mine = base_f[rank] * sum(w)
            others = [base_f[q] * sum(seq[q % dp][step]) for q in self.same_stage[rank // dp] if q != rank]
            if not others:
                return [f * x for x in w]
            return [f * x * min(1.0, median(others) / mine) for x in w]
        return [f * x for x in w]

    # -- what the scenario is built to show ---------------------------------------------
    def slow_ranks(self) -> list[int]:
        """The ranks made slow: every replica's slow stage, the slow rank, both ends of the
        slow link, the members of the slow data-parallel group."""
        slow_ranks = (
            sorted({*self.same_stage[self.slow_stage]} if self.slow_stage >= 0 else set())
            if self.slowdown != 1
            else []
        )
        if self.slow_rank >= 0 and self.slowdown != 1 and self.slow_rank not in slow_ranks:
            slow_ranks = sorted([*slow_ranks, self.slow_rank])
        slow_links = [i for i, f in enumerate(self.base_links) if f != 1]
        slow_groups = [st for st, f in enumerate(self.base_groups) if f != 1]
        return sorted({*slow_ranks, *self._link_ranks(slow_links), *self._group_ranks(slow_groups)})

    def whatifs(self) -> WhatIfs:
        """Which job-level fixes change the job, which it is built to show, whom each speeds up."""
        n, steps, base = self.n, self.steps, self.base
        by_fix = {w: self.compute_factors(frozenset({w})) for w in (BALANCED_STAGES, PEER_MEDIAN_COMPUTE)}
        balanced = differs(base, by_fix[BALANCED_STAGES])
        varies = self.seq_cv > 0
        peers = differs(base, by_fix[PEER_MEDIAN_COMPUTE]) or (varies and self.dp > 1)
        culprits = {w: faster(base, fixed) for w, fixed in by_fix.items()}

        def step_work(fixes: frozenset[str]) -> list[list[float]]:
            return [[sum(self.work_factors(fixes, r, t)) for t in range(steps)] for r in range(n)]

        if varies:
            now = step_work(frozenset())
            for w in (PEER_MEDIAN_COMPUTE, BALANCED_BATCHES, NO_VARIATION):
                after = step_work(frozenset({w}))
                culprits[w] = sorted(
                    r for r in range(n) if any(b < a * 0.99 for a, b in zip(now[r], after[r]))
                )
        elif balanced or peers:
            culprits[NO_VARIATION] = faster(base, [self.mean_work] * n)
        # a slow link or collective group: the ranks at its ends, the group's members
        links, groups = self.base_links, self.base_groups
        fixed_links = self.link_factors(frozenset({PEER_MEDIAN_LINK}))
        fixed_groups = self.group_factors(frozenset({PEER_MEDIAN_COLLECTIVE}))
        slow_link, slow_group = differs(links, fixed_links), differs(groups, fixed_groups)
        culprits[PEER_MEDIAN_LINK] = self._link_ranks(faster(links, fixed_links))
        culprits[PEER_MEDIAN_COLLECTIVE] = self._group_ranks(faster(groups, fixed_groups))
        even_links = self.link_factors(frozenset({NO_VARIATION}))
        even_groups = self.group_factors(frozenset({NO_VARIATION}))
        if differs(links, even_links) or differs(groups, even_groups):
            culprits[NO_VARIATION] = sorted(
                {
                    *culprits.get(NO_VARIATION, []),
                    *self._link_ranks(faster(links, even_links)),
                    *self._group_ranks(faster(groups, even_groups)),
                }
            )
        # The fixes a user would make: a slow GPU's (peers), the stages', and for data that
        # varies the batches' (the per-step peer median is not a fix one can apply to data).
        slow_gpu = differs(base, by_fix[PEER_MEDIAN_COMPUTE])
        shown = (
            (BALANCED_STAGES, balanced),
            (PEER_MEDIAN_COMPUTE, slow_gpu),
            (BALANCED_BATCHES, varies),
            (PEER_MEDIAN_LINK, slow_link),
            (PEER_MEDIAN_COLLECTIVE, slow_group),
        )
        intended: tuple[str, ...] = tuple(w for w, on in shown if on) or (DOUBLE_MICROBATCHES,)
        applies = (
            (DOUBLE_MICROBATCHES,)
            + ((BALANCED_STAGES,) if balanced else ())
            + ((PEER_MEDIAN_COMPUTE,) if peers else ())
            + ((BALANCED_BATCHES,) if varies else ())
            + ((PEER_MEDIAN_LINK,) if slow_link else ())
            + ((PEER_MEDIAN_COLLECTIVE,) if slow_group else ())
            + ((NO_VARIATION,) if varies or balanced or peers or slow_link or slow_group else ())
        )
        return WhatIfs(applies, intended, culprits)


def drain_bubble(sims: Sequence[RankSim]) -> None:
    """The plan's ``post``: the drain bubble of each stage, from its last pipeline compute
    (``mark("pipeline_end", replica, step)``) to the pipeline's last one."""
    for key, ends in sims[0].job.marks.items():
        if key[0] != "pipeline_end":
            continue
        group_end = max(ends.values())
        for rank, end in ends.items():
            sims[rank].claim(Cause.PIPELINE_BUBBLE, end, group_end)


def _pg(name: str, ranks: list[int], desc: str = "undefined") -> dict[str, Any]:
    return {
        "pg_name": name,
        "pg_desc": desc,
        "backend_config": "cuda:nccl",
        "pg_size": len(ranks),
        "ranks": ranks,
    }
