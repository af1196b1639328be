"""A rank's measured facts are a typed record (``RankFacts``): a misspelled fact is an error,
every fact is documented with its unit, and ``to_dict`` gives them as plain JSON types."""

from __future__ import annotations

import dataclasses
import json
import typing

import pytest
from rankbuilder import RankBuilder

from gpuprof.accounting.enclosing import OpLoss
from gpuprof.accounting.factrecord import RankFacts
from gpuprof.accounting.hostfacts import DdpBufferSync, TrustFacts
from gpuprof.accounting.summarize import summarize
from gpuprof.accounting.summary import RankSummary
from gpuprof.accounting.warmup import WarmupFacts
from gpuprof.model.timeline import Kind

RECORDS = (RankFacts, TrustFacts, DdpBufferSync, WarmupFacts, OpLoss)


def _facts() -> RankFacts:
    """Three steps with host ops, a DDP buffer broadcast and a slow first step."""
    b = RankBuilder()
    for k, t0 in enumerate((0.0, 30000.0, 40000.0)):
        end = t0 + (30000.0 if k == 0 else 10000.0)
        b.step(k + 1, t0, end)
        b.host(t0, t0 + 5000, "DistributedDataParallel.forward")
        b.host(t0 + 100, t0 + 1000, "c10d::broadcast_")
        b.host(t0 + 1100, t0 + 1500, "cudaMalloc", kind=Kind.RUNTIME)
        b.kernel(t0 + 2000, end - 100, launch_at=t0 + 1900)
    s = summarize(b.build())
    assert s.facts is not None
    return s.facts


def test_a_misspelled_fact_cannot_be_made_or_read() -> None:
    f = _facts()
    with pytest.raises(TypeError, match="wokload"):
        dataclasses.replace(f, wokload="training")  # type: ignore[call-arg]
    with pytest.raises(AttributeError):
        f.wokload  # type: ignore[attr-defined]  # noqa: B018
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.workload = "training"  # type: ignore[misc]
    assert dataclasses.replace(f, workload="inference").workload == "inference"


def test_the_facts_are_measured_into_their_fields() -> None:
    f = _facts()
    assert f.steps == 3 and f.kernels == 3
    assert isinstance(f.ddp_buffer_sync, DdpBufferSync) and f.ddp_buffer_sync.broadcasts == 3
    assert f.warmup.first_step_ratio == pytest.approx(3.0)
    assert f.warmup.alloc_steps == 3
    assert f.alloc_calls_by_name == {"cudaMalloc": 3}
    assert f.window_gaps_us == 0 and isinstance(f.device_aligned_steps, bool)
    assert all(isinstance(o, OpLoss) for ops in f.lost_by_op.values() for o in ops)
    assert set(f.lost_by_op) == {"host", "sync", "other"}


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.__name__)
def test_every_fact_is_documented(record: type) -> None:
    """Each field says what it is: RankFacts in its ``doc`` metadata, the smaller records in
    their class docstring or a comment (the class docstring names the fields in prose)."""
    assert record.__doc__ and len(record.__doc__) > 40
    if record is RankFacts:
        for f in dataclasses.fields(record):
            assert len(f.metadata.get("doc", "")) > 10, f"RankFacts.{f.name} has no doc"


_UNIT_WORDS = ("_us", "_share", "_per_", "_ratio", "_bytes")


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.__name__)
def test_every_measured_amount_has_its_unit_in_its_name(record: type) -> None:
    """A float fact is a time (``_us``), a share, a rate (``_per_``) or a ratio; counts are
    ints (and byte counts say ``_bytes``)."""
    hints = typing.get_type_hints(record)
    for name, hint in hints.items():
        args = typing.get_args(hint) or (hint,)
        if float in args:
            assert any(w in name for w in _UNIT_WORDS), f"{record.__name__}.{name}: no unit in the name"
        if "bytes" in name:
            assert int in args, f"{record.__name__}.{name}: bytes are an int"


def test_to_dict_gives_every_field_in_order_as_json() -> None:
    f = _facts()
    d = f.to_dict()
    assert list(d) == [x.name for x in dataclasses.fields(RankFacts)]
    assert d["trust"] == f.trust.to_dict() and list(d["trust"]) == [
        x.name for x in dataclasses.fields(TrustFacts)
    ]
    assert d["warmup"] == f.warmup.to_dict()
    assert f.ddp_buffer_sync is not None and d["ddp_buffer_sync"] == f.ddp_buffer_sync.to_dict()
    assert list(d["ddp_buffer_sync"]) == [x.name for x in dataclasses.fields(DdpBufferSync)]
    host = d["lost_by_op"]["host"]
    assert isinstance(host, list) and host and {"op", "lost_us", "lost_us_per_step", "calls"} <= set(host[0])
    assert json.loads(json.dumps(d)) == d  # plain JSON types only


def test_an_op_loss_writes_its_few_call_keys_only_where_known() -> None:
    plain = OpLoss(op="aten::mm", lost_us=5.0, lost_us_per_step=None, calls=2)
    assert plain.to_dict() == {"op": "aten::mm", "lost_us": 5.0, "lost_us_per_step": None, "calls": 2}
    inner = OpLoss(
        op="x",
        lost_us=5.0,
        lost_us_per_step=1.0,
        calls=1,
        launches_per_call=3.0,
        inner_op="y",
        inner_lost_us=4.0,
        inner_longest_us=2.0,
    )
    assert list(inner.to_dict())[4:] == ["launches_per_call", "inner_op", "inner_lost_us", "inner_longest_us"]


def test_a_rank_with_nothing_to_analyze_has_no_facts() -> None:
    b = RankBuilder()
    b.step(1, 0, 1000)
    b.host(0, 900, "aten::mm")
    s = summarize(b.build())
    assert s.empty_reason is not None and s.facts is None
    assert typing.get_type_hints(RankSummary)["facts"] == RankFacts | None
