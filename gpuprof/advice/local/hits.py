"""What every local advisor shares: the ranks a finding costs time on (its hits), and the
one way a local finding gets its saving (a what-if's replay, else the closed form) and the
facts every local finding carries."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from gpuprof.accounting.factrecord import RankFacts
from gpuprof.accounting.rules import RULES
from gpuprof.accounting.summary import RankSummary
from gpuprof.advice.context import AdviceContext
from gpuprof.advice.finding import Fact, Finding, Said, said
from gpuprof.advice.replayed import replayed, results
from gpuprof.advice.savings import MIN_WINDOW_US, savings_pct
from gpuprof.model.report import Cause, RankReport

# Below this share of a rank's window a finding is not worth the user's attention.
MIN_SHARE = 0.02


@dataclass(frozen=True)
class Hit:
    """One rank's measure of a finding: ``lost_us`` of its window it costs."""

    summary: RankSummary
    report: RankReport
    lost_us: float

    @property
    def share(self) -> float:
        return self.lost_us / self.report.window_us if self.report.window_us > 0 else 0.0

    @property
    def per_step_us(self) -> float:
        return self.lost_us / self.report.steps if self.report.steps > 0 else self.lost_us

    @property
    def fact(self) -> RankFacts:
        """The rank's measured facts (a hit is made only for a rank that has them: :func:`pairs`)."""
        f = self.summary.facts
        if f is None:
            raise ValueError(f"rank {self.rank} has no facts: it is no hit")
        return f

    @property
    def rank(self) -> int:
        return self.report.rank


def pairs(ctx: AdviceContext) -> list[tuple[RankSummary, RankReport]]:
    by_rank = {r.rank: r for r in ctx.reports}
    return [
        (s, by_rank[s.rank])
        for s in ctx.summaries
        if s.rank in by_rank and s.empty_reason is None and s.facts is not None
    ]


def rule_share(s: RankSummary, r: RankReport, cause: Cause, rules: Sequence[str]) -> float:
    """Lost time of ``rules`` on one rank, scaled to what the cause kept after the
    cross-rank claims (they can only take time away from the local rules)."""
    by_rule: Mapping[str, float] = s.facts.local_lost_us_by_rule if s.facts is not None else {}
    cause_rules = [x.name for x in RULES if x.cause is cause]
    local_total = sum(float(by_rule.get(n, 0.0)) for n in cause_rules)
    mine = sum(float(by_rule.get(n, 0.0)) for n in rules)
    kept = float(r.lost_us.get(cause, 0.0))
    if local_total <= 0:
        return 0.0
    return mine * min(1.0, kept / local_total)


def kept(found: Sequence[Hit]) -> list[Hit]:
    """The hits that cost at least :data:`MIN_SHARE` of their rank's window."""
    return [h for h in found if h.share >= MIN_SHARE]


# What a local finding costs one rank, in microseconds of its window (None: it has none).
Measure = Callable[[RankSummary, RankReport], float | None]
LocalFinder = Callable[[AdviceContext, list[Hit]], list[Finding]]


def _lost_to(cause: Cause) -> Measure:
    return lambda s, r: float(r.lost_us.get(cause, 0.0))


def local(measure: Cause | Measure) -> Callable[[LocalFinder], Callable[[AdviceContext], list[Finding]]]:
    """Decorator: a local advisor written as a function of its hits, called only when there
    is one: the ranks where ``measure`` (a cause's lost time, or a function of a rank's
    summary and report) costs at least :data:`MIN_SHARE` of the window."""

    of = _lost_to(measure) if isinstance(measure, Cause) else measure

    def wrap(fn: LocalFinder) -> Callable[[AdviceContext], list[Finding]]:
        @functools.wraps(fn)
        def find(ctx: AdviceContext) -> list[Finding]:
            found = kept([Hit(s, r, us) for s, r in pairs(ctx) if (us := of(s, r)) is not None])
            return fn(ctx, found) if found else []

        return find

    return wrap


def worst(found: Sequence[Hit]) -> Hit:
    return max(found, key=lambda h: h.share)


def idle(found: Sequence[Hit], finding: str) -> Said:
    """The first line of every local finding: how long the GPU idled for it, on which ranks."""
    w = worst(found)
    shares = [h.share for h in found]
    return said("local.idle", finding=finding, ranks=len(found), worst_rank=w.rank, per_step_us=w.per_step_us,
                stepped=w.report.steps > 0, share_pct=100 * w.share, low_pct=100 * min(shares),
                high_pct=100 * max(shares))


def inference(found: Sequence[Hit]) -> bool:
    return any(h.fact.workload == "inference" for h in found)


# Inductor's kernels (``triton_*``) make at least this share of a compiled model's kernels:
# the GEMMs and convolutions stay cuBLAS / cuDNN (or Inductor's extern calls), so a compiled
# model need not be mostly Triton. With the host ranges compiled code leaves in the trace, a
# smaller share will do; a compiled helper in an eager model (vLLM's eager B200 trace: two
# compiled regions, 1 Triton kernel in 694) is not a compiled model.
COMPILED_KERNEL_SHARE = 0.2
COMPILED_KERNEL_SHARE_WITH_REGIONS = 0.05


def compiled(facts: RankFacts) -> bool:
    """The rank runs a model torch.compile already compiled: a good share of Inductor's
    kernels, or some with the host ranges of compiled code (``CompiledFunction``,
    ``Torch-Compiled Region``, ``CompiledFxGraph``). Such a model is not told to compile
    itself."""
    share = facts.compiled_kernel_share
    if share is None:
        return False
    least = COMPILED_KERNEL_SHARE_WITH_REGIONS if facts.compiled_regions else COMPILED_KERNEL_SHARE
    return share >= least


def has_optimizer(s: RankSummary) -> bool:
    """The rank's trace shows an optimizer (its step or zero_grad ops, or a backward pass
    it updates from): optimizer advice needs one to act on."""
    return (
        s.phases_us.get("optimizer", 0.0) > 0
        or s.phases_us.get("backward", 0.0) > 0
        or (s.facts is not None and s.facts.workload == "training")
    )


def idle_facts(found: Sequence[Hit]) -> dict[str, Fact]:
    """The facts of the idle line: the worst rank's loss, and its spread over the ranks."""
    w = worst(found)
    return {
        "rank": w.rank,
        "ranks_affected": len(found),
        "lost_us_per_step": w.per_step_us,
        "lost_pct": 100.0 * w.share,
        "min_lost_pct": 100.0 * min(h.share for h in found),
        "max_lost_pct": 100.0 * max(h.share for h in found),
    }


def recommend(
    ctx: AdviceContext,
    found: Sequence[Hit],
    rec_id: str,
    cause: Cause,
    evidence: Sequence[Said],
    actions: Sequence[Said],
    whatif: str | None = None,
    lower: str | None = None,
    replay_note: Said | None = None,
    upper: tuple[str, ...] = (),
    facts: Mapping[str, Fact] | None = None,
    idle_as: str | None = None,
) -> list[Finding]:
    """One finding whose saving is the replay of ``whatif`` on the whole job (the
    closed-form removal of the hits' lost time where the job could not be replayed);
    ``lower``: a what-if whose saving is the lower end of the range. ``upper``: what-ifs
    that, replayed together with ``whatif``, bound the fix from above (it changes more than
    the trace can show); the estimate is then the middle of the two, and the evidence says
    so. Its title is the phrase ``title.<rec_id>``; its evidence opens with the idle line
    (:func:`idle`, of ``idle_as``: the advisor's name where it gives more than one id)."""
    removed = {h.rank: h.lost_us for h in found}
    estimate = savings_pct(ctx.reports, removed)
    lines = [idle(found, idle_as or rec_id), *evidence]
    known: dict[str, Fact] = {**idle_facts(found), **(facts or {})}
    used: str | None = None
    span: tuple[float, float] | None = None  # the range the saving lies in, when one is known
    got = replayed(ctx, whatif) if whatif is not None else None
    if got is not None:
        estimate, used = got.pct, got.name
        lines.append(got.said)
        known.update(got.facts)
        low = replayed(ctx, lower) if lower is not None else None
        if low is not None and low.pct < estimate:
            span = (low.pct, estimate)
            lines.append(said("local.model_range", whatif=got.name, lower=low.name, low_pct=low.pct, pct=estimate))
        if replay_note is not None:
            lines.append(replay_note)
        w = results(ctx)
        hi = w.combined_pct((got.name, *upper)) if upper and w is not None else None
        if hi is not None and hi > estimate + 1.0:
            lo_pct = estimate
            estimate = (lo_pct + hi) / 2.0
            span = (lo_pct, hi)
            lines.append(said("local.estimate_middle", pct=estimate, low_pct=lo_pct, high_pct=hi, upper=upper))
    elif whatif is not None:
        lines.append(said("replay.none"))
    if any(h.report.window_us < MIN_WINDOW_US for h in found):
        estimate, span = 0.0, None
        lines.append(said("window.too_short", min_window_ms=MIN_WINDOW_US / 1000))
    return [
        Finding(
            id=rec_id,
            cause=cause,
            saving_pct=estimate,
            title=said(f"title.{rec_id}"),
            evidence=tuple(lines),
            actions=tuple(actions),
            ranks=tuple(sorted(removed)),
            whatif=used,
            savings_low_pct=None if span is None else span[0],
            savings_high_pct=None if span is None else span[1],
            facts=known,
        )
    ]


__all__ = [
    "MIN_SHARE",
    "Hit",
    "idle",
    "idle_facts",
    "inference",
    "kept",
    "local",
    "ops",
    "pairs",
    "recommend",
    "rule_share",
    "top_op_facts",
    "worst",
]


def ops(hit: Hit, cause: str) -> Said | None:
    """Where the lost time of ``cause`` sits on the worst rank: its top enclosing ops
    (facts ``lost_by_op``), at most five."""
    found = hit.fact.lost_by_op.get(cause, ())
    steps = hit.report.steps
    rows = []
    for o in found[:5]:
        per = o.lost_us_per_step
        launches = o.launches_per_call
        inner = o.inner_op
        inner_us = o.inner_lost_us
        rows.append({
            "op": o.op,
            "us": float(per) if per is not None else float(o.lost_us),
            "per_step": per is not None,
            "calls": o.calls,
            # a count of launches worth naming: an op that launches many kernels per call
            "launches_per_call": float(launches) if launches and float(launches) >= 10 else None,
            "inner_op": inner if inner else None,
            "inner_us": (inner_us / steps if steps > 0 else inner_us) if inner and inner_us is not None else None,
            "inner_longest_us": o.inner_longest_us if inner else None,
            "stepped": steps > 0,
        })
    if not rows:
        return None
    return said("local.ops", rank=hit.rank, cause=cause, ops=tuple(rows))


def top_op_facts(hit: Hit, cause: str) -> dict[str, Fact]:
    """The op under which most of ``cause``'s lost time sits on the worst rank."""
    found = hit.fact.lost_by_op.get(cause, ())
    if not found:
        return {}
    o = found[0]
    return {"top_op": o.op, "top_op_lost_us_per_step": o.lost_us_per_step}
