"""Every what-if, declared once: its name, what it says, when it applies, what it changes.

A what-if is a :class:`WhatIfSpec` in :data:`REGISTRY`; everything else reads it from here:
the job model asks each spec whether it changes the job (``applies``) and lets the specs of
a combination change it in registry order (``change``) -- the order matters where one
what-if works on what an earlier one left (the stages balanced on the compute the peer fix
leaves); the savings table, the bound, the floor of :mod:`gpuprof.job.floor` and the general
advice of :mod:`gpuprof.advice.general` read its flags. Adding a what-if is one
:func:`register` call (a declaration here, or in a plug-in), plus the phrase a
recommendation that carries it is worded with.

``applies`` and ``change`` take the :class:`~gpuprof.job.whatifs.JobModel` (typed loosely
here: this module sits below it) and a :class:`Change` being put together.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from gpuprof.accounting.graph import (
    BLOCK_ALLOC,
    BLOCK_COPY,
    BLOCK_SYNC,
    EV_COLLECTIVE,
    EV_COMPUTE,
    EV_COPY,
    EV_P2P,
)
from gpuprof.model import intervals as iv
from gpuprof.model.intervals import Intervals
from gpuprof.model.report import Cause

FloatArray = npt.NDArray[np.float64]


@dataclass
class Change:
    """A what-if being put together for a model: host time removed and blocking calls
    freed per rank, per-event duration factors, a factor on each rank's compute (applied
    last), copies taken off the critical path, communication scales, launch delays gone."""

    names: frozenset[str]
    removed: dict[int, Intervals] = field(default_factory=dict)
    unblock: set[int] = field(default_factory=set)
    per_event: dict[int, FloatArray] = field(default_factory=dict)
    compute_factor: dict[int, float] = field(default_factory=dict)
    zero_pageable_copies: bool = False
    zero_other_copies: bool = False
    transfer_scale: float = 1.0
    p2p_scale: float = 1.0
    no_delays: bool = False

    def remove(self, rank: int, cut: Intervals) -> None:
        """Delete host time ``cut`` on ``rank`` (joined with what is already removed)."""
        if cut[0].size == 0:
            return
        prev = self.removed.get(rank)
        self.removed[rank] = cut if prev is None else iv.union(
            np.concatenate((prev[0], cut[0])), np.concatenate((prev[1], cut[1]))
        )

    def scale(self, rank: int, factors: FloatArray) -> None:
        """Multiply ``rank``'s event durations by ``factors`` (one per graph event)."""
        got = self.per_event.get(rank)
        self.per_event[rank] = factors if got is None else got * factors


Applies = Callable[[Any], bool]
Changes = Callable[[Any, Change], None]


@dataclass(frozen=True)
class WhatIfSpec:
    """One what-if. ``says``: what the job is like with it (one line). ``applies(model)``:
    it changes something in the job. ``change(model, change)``: what it changes (``None``:
    not a change of the graphs, replayed on a model of its own, ``double_microbatches``).
    ``bound``: a limit the fixes are measured against, not a fix; ``evening``: it evens out
    the work (the bound is their limit); ``keeps_compute``: every compute op keeps its
    measured duration (the floor of :mod:`gpuprof.job.floor` holds it); ``hides_copies``:
    the copy engines' floor holds it; ``shortens``: it only shortens work or removes waits
    (its replay is never longer); ``general``: the cause whose general advice it costs;
    ``general_rank``: its place among that cause's what-ifs (the first that saves is used);
    ``phase``: changes are made by phase, then in registry order (balancing the stages
    works on the compute every other change leaves: phase 1)."""

    name: str
    says: str
    applies: Applies
    change: Changes | None
    bound: bool = False
    evening: bool = False
    keeps_compute: bool = True
    hides_copies: bool = False
    shortens: bool = True
    general: Cause | None = None
    general_rank: int = 0
    phase: int = 0


REGISTRY: list[WhatIfSpec] = []


def register(spec: WhatIfSpec, before: str | None = None) -> WhatIfSpec:
    """Add ``spec`` (at the end, or before what-if ``before``: registry order is the order in
    which a combination's changes are made); a name is declared once."""
    if any(s.name == spec.name for s in REGISTRY):
        raise ValueError(f"what-if {spec.name!r} is declared twice")
    at = next((i for i, s in enumerate(REGISTRY) if s.name == before), len(REGISTRY)) if before else len(REGISTRY)
    REGISTRY.insert(at, spec)
    return spec


def unregister(name: str) -> None:
    """Remove what-if ``name`` (a plug-in's, or a test's)."""
    REGISTRY[:] = [s for s in REGISTRY if s.name != name]


def spec(name: str) -> WhatIfSpec | None:
    return next((s for s in REGISTRY if s.name == name), None)


class _Says(Mapping[str, str]):
    """name -> what it says, in registry order, read live (a what-if registered later is in)."""

    def __getitem__(self, name: str) -> str:
        got = spec(name)
        if got is None:
            raise KeyError(name)
        return got.says

    def __iter__(self) -> Iterator[str]:
        return iter([s.name for s in REGISTRY])

    def __len__(self) -> int:
        return len(REGISTRY)


WHATIFS: Mapping[str, str] = _Says()


def in_change_order(names: frozenset[str]) -> list[WhatIfSpec]:
    """The specs of ``names`` in the order their changes are made."""
    chosen = [s for s in REGISTRY if s.name in names]
    return sorted(chosen, key=lambda s: s.phase)  # stable: registry order within a phase


def names_where(**flags: bool) -> frozenset[str]:
    """The what-ifs whose flags have the values given (``bound=True``, ...)."""
    return frozenset(s.name for s in REGISTRY if all(getattr(s, k) == v for k, v in flags.items()))


def for_cause(cause: Cause) -> tuple[str, ...]:
    """The what-ifs whose saving stands for ``cause``'s general advice, in registry order."""
    return tuple(s.name for s in sorted((s for s in REGISTRY if s.general is cause), key=lambda s: s.general_rank))


# --- the declarations -------------------------------------------------------------------------


def _host(
    name: str, key: str, tags: tuple[int, ...], says: str, general: Cause | None = None, general_rank: int = 0
) -> WhatIfSpec:
    """A what-if that deletes the host time a rank's graph lists under ``key`` and frees
    the blocking calls of ``tags``."""

    def applies(m: Any) -> bool:
        return any(iv.total(g.removable.get(key, iv.empty())) > 0 for g in m.graphs)

    def change(m: Any, c: Change) -> None:
        c.unblock.update(tags)
        for g in m.graphs:
            rem = g.removable.get(key)
            if rem is not None and rem[0].size:
                c.remove(g.rank, rem)

    return WhatIfSpec(name, says, applies, change, general=general, general_rank=general_rank)


def _copies(pageable: bool) -> tuple[Applies, Changes]:
    def applies(m: Any) -> bool:
        for g in m.graphs:
            page = g.pageable if g.pageable is not None else np.zeros(g.n_events, dtype=bool)
            if ((g.kind == EV_COPY) & (page if pageable else ~page)).any():
                return True
        return False

    def change(m: Any, c: Change) -> None:
        if pageable:
            c.zero_pageable_copies = True
        else:
            c.zero_other_copies = True

    return applies, change


def _per_event(table: str) -> tuple[Applies, Changes]:
    """A what-if whose change is the per-event factors the model's method ``table`` gives."""

    def applies(m: Any) -> bool:
        return any(f.size and float(np.max(np.abs(f - 1.0))) > 1e-3 for f in getattr(m, table)().values())

    def change(m: Any, c: Change) -> None:
        for r, f in getattr(m, table)().items():
            c.scale(r, f)

    return applies, change


def _comm(kind: str) -> tuple[Applies, Changes]:
    def applies(m: Any) -> bool:
        return m.dag is not None and any(float(np.min(f)) < 0.999 for f in m._comm_factors(kind).values())

    def change(m: Any, c: Change) -> None:
        for r, f in m._comm_factors(kind).items():
            c.scale(r, f)

    return applies, change


def _peer_compute_applies(m: Any) -> bool:
    return any(float(np.min(f)) < 0.999 for f in m._peer_factors().values() if f.size)


def _peer_compute(m: Any, c: Change) -> None:
    # With balanced batches the batches already even out the rest: only the persistently
    # slow ranks (a slow GPU) are brought to their peers.
    keep = set(m.slow_ranks()) if "balanced_batches" in c.names else None
    by_rank = {g.rank: g for g in m.graphs}
    for r, f in m._peer_factors().items():
        g = by_rank.get(r)
        if (keep is not None and r not in keep) or g is None or f.size != g.n_events:
            continue
        c.scale(r, np.where(g.kind == EV_COMPUTE, f, 1.0))


def _stages_applies(m: Any) -> bool:
    return len(set(m.stage_of.values())) >= 2 and any(abs(f - 1.0) > 1e-3 for f in m._stage_factors().values())


def _stages(m: Any, c: Change) -> None:
    # On the compute the earlier changes leave (the peer fix, the batches balanced).
    after = dict(m.compute_us_per_step)
    for g in m.graphs:
        if g.rank in c.per_event and g.rank in after:
            comp = g.kind == EV_COMPUTE
            steps = max(int(m.compute_by_step[g.rank].size), 1)
            after[g.rank] = float(np.sum(g.dur[comp] * c.per_event[g.rank][comp])) / steps
    for r, f in m._stage_factors(after).items():
        c.compute_factor[r] = c.compute_factor.get(r, 1.0) * f


def _kinds(m: Any) -> FloatArray:
    return np.concatenate([g.kind for g in m.graphs]) if m.graphs else np.zeros(0)


def _overlap_applies(m: Any) -> bool:
    k = _kinds(m)
    # Hidden behind compute: with none, nothing hides them.
    return bool((k == EV_COLLECTIVE).any() and (k == EV_COMPUTE).any())


def _overlap(m: Any, c: Change) -> None:
    c.transfer_scale = 0.0


def _bandwidth(m: Any, c: Change) -> None:
    c.transfer_scale = min(c.transfer_scale, 0.5)
    c.p2p_scale = 0.5


def _on_time(m: Any, c: Change) -> None:
    for r, late in m.late_start_us.items():
        c.remove(r, (np.array([0.0]), np.array([late])))


def _peer_host(m: Any, c: Change) -> None:
    for r, cut in m._host_removed().items():
        c.remove(r, cut)


def _no_variation(m: Any, c: Change) -> None:
    for r, f in m._variation_factors().items():
        c.scale(r, f)
    c.no_delays = True


_pageable = _copies(pageable=True)
_hidden = _copies(pageable=False)
_blocking = _host("pinned_copies", "blocking_copies", (BLOCK_COPY,), "")


def _pinned_applies(m: Any) -> bool:
    return _pageable[0](m) or _blocking.applies(m)


def _pinned_change(m: Any, c: Change) -> None:
    # Pinned buffers and non_blocking copies: the pageable copies off the critical path
    # and their launch calls no longer blocking the host.
    _pageable[1](m, c)
    assert _blocking.change is not None
    _blocking.change(m, c)
_batches = _per_event("_batch_factors")
_variation = _per_event("_variation_factors")
_links = _comm("link")
_groups = _comm("collective")

for _spec in (
    _host("no_dataloader", "dataloader", (), "the DataLoader waits cost nothing", Cause.DATALOADER),
    _host("no_sync", "sync", (BLOCK_SYNC,), "no blocking host-device syncs (the host runs ahead)", Cause.SYNC),
    _host("free_launches", "operators", (),
          "the operators that launch kernels cost no host time (CUDA graphs / torch.compile)"),
    _host("free_launch_calls", "launch", (), "the kernel launch calls cost no host time"),
    _host("free_host", "host_work", (), "the host's own work between launches (Python, framework) costs nothing",
          Cause.HOST),
    _host("no_allocator", "allocator", (BLOCK_ALLOC,), "no device allocator calls", Cause.MEMORY, 1),
    _host("no_ddp_buffer_sync", "ddp_buffers", (), "no DDP buffer broadcast at each forward"),
    WhatIfSpec("pinned_copies", "pageable copies made asynchronous and hidden behind compute", _pinned_applies,
               _pinned_change, hides_copies=True, general=Cause.MEMORY, general_rank=2),
    WhatIfSpec("hidden_copies", "the other copies and memsets hidden behind compute", _hidden[0], _hidden[1],
               hides_copies=True, general=Cause.MEMORY),
    WhatIfSpec("peer_median_compute",
               "every rank computes no slower than the median of the ranks that do the same work",
               _peer_compute_applies, _peer_compute, evening=True, keeps_compute=False, general=Cause.STRAGGLER),
    WhatIfSpec("balanced_stages", "the pipeline's compute spread evenly over its stages", _stages_applies, _stages,
               evening=True, keeps_compute=False, shortens=False, general=Cause.PIPELINE_BUBBLE, general_rank=1,
               phase=1),
    WhatIfSpec("double_microbatches", "twice the microbatches at half the size",
               lambda m: m.pipeline is not None and m.pipeline.p > 1, None, keeps_compute=False, shortens=False,
               general=Cause.PIPELINE_BUBBLE),
    WhatIfSpec("overlap_collectives", "collective transfers fully hidden behind compute", _overlap_applies, _overlap,
               general=Cause.COMMUNICATION),
    WhatIfSpec("double_bandwidth", "communication transfers twice as fast",
               lambda m: bool(np.isin(_kinds(m), (EV_COLLECTIVE, EV_P2P)).any()), _bandwidth,
               general=Cause.COMMUNICATION, general_rank=1),
    WhatIfSpec("on_time_start", "every rank begins its step with the median rank", lambda m: bool(m.late_start_us),
               _on_time),
    WhatIfSpec("balanced_batches",
               "every replica and microbatch of a step carries the same work (sequence packing, length bucketing)",
               _batches[0], _batches[1], evening=True, keeps_compute=False, shortens=False),
    WhatIfSpec("no_variation", "the job without stragglers: every op at its type's mean (compute) or median (transfers)",
               _variation[0], _no_variation, bound=True, keeps_compute=False, shortens=False),
    WhatIfSpec("peer_median_link", "every pipeline link transfers no slower than the same link on the other replicas",
               _links[0], _links[1], keeps_compute=False),
    WhatIfSpec("peer_median_collective",
               "every data-parallel group's collectives no slower than the same collective on the other groups",
               _groups[0], _groups[1], keeps_compute=False),
    WhatIfSpec("peer_median_host",
               "every rank's own host work no slower than the median of the ranks that do the same work",
               lambda m: any(r for r in m._host_removed().values()), _peer_host),
):
    register(_spec)


__all__ = [
    "REGISTRY",
    "WHATIFS",
    "Change",
    "WhatIfSpec",
    "for_cause",
    "in_change_order",
    "names_where",
    "register",
    "spec",
    "unregister",
]
