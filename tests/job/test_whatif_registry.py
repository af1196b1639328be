"""Issue 32: a what-if is one declaration (gpuprof.job.whatif_registry), and everything
that lists what-ifs reads it from there."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpuprof.accounting.graph import EV_COMPUTE
from gpuprof.job import floor, whatifs
from gpuprof.job import whatif_registry as registry
from gpuprof.model.report import Cause
from gpuprof.pipeline import run_analysis
from gpuprof.simulate.fixes import WHATIFS as SIMULATED

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


def test_every_simulated_fix_is_a_declared_whatif() -> None:
    assert set(SIMULATED) <= set(registry.WHATIFS)


def test_the_tables_are_read_from_the_declarations() -> None:
    assert whatifs.BOUNDS == {"no_variation"}
    assert set(whatifs.EVENING) == {"peer_median_compute", "balanced_stages", "balanced_batches"}
    assert whatifs.HIDES_COPIES == {"pinned_copies", "hidden_copies"}
    assert floor.CHANGES_COMPUTE == registry.names_where(keeps_compute=False)
    assert "peer_median_link" in floor.CHANGES_COMPUTE and "no_sync" not in floor.CHANGES_COMPUTE
    assert registry.for_cause(Cause.MEMORY) == ("hidden_copies", "no_allocator", "pinned_copies")
    assert list(whatifs.WHATIFS) == [s.name for s in registry.REGISTRY]


def test_a_name_is_declared_once() -> None:
    with pytest.raises(ValueError, match="declared twice"):
        registry.register(registry.spec("no_sync"))  # type: ignore[arg-type]


@pytest.fixture
def half_compute() -> Iterator[str]:
    """A toy what-if, added through the registry alone: every compute op half as long."""

    def applies(m: Any) -> bool:
        return any((g.kind == EV_COMPUTE).any() for g in m.graphs)

    def change(m: Any, c: registry.Change) -> None:
        for g in m.graphs:
            c.scale(g.rank, np.where(g.kind == EV_COMPUTE, 0.5, 1.0))

    registry.register(registry.WhatIfSpec("half_compute", "every compute op half as long", applies, change,
                                          keeps_compute=False))
    try:
        yield "half_compute"
    finally:
        registry.unregister("half_compute")


@pytest.mark.parametrize("sample", ["straggler", "megatron-timeline"])
def test_a_whatif_added_through_the_registry_alone_is_replayed_and_reported(half_compute: str, sample: str) -> None:
    a = run_analysis([SAMPLES / sample])
    w = a.cross.whatifs
    assert w is not None and half_compute in w.model.applicable()
    got = w.savings_pct(half_compute)
    assert got is not None and got > 5.0  # half the compute: a clearly shorter step
    assert w.results[half_compute].step_us < w.baseline.step_us
    assert half_compute in w.to_dict()["savings_pct"]
    assert registry.WHATIFS[half_compute] == "every compute op half as long"
