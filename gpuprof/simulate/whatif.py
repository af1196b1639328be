"""What-if truth: simulate the fixed job and compare its step time with the original's.

For every fix of the vocabulary (:mod:`gpuprof.simulate.fixes`) that applies to the
simulated job, the job is simulated again with that fix -- same seed, same random draws
(the fix changes what a call costs, not which draws are made) -- and writing nothing, and
its step time is compared with the original's:

    step_us[name]     = max over ranks of (window / steps) of the fixed job
    savings_pct[name] = 100 * (1 - step_us[name] / baseline_step_us)

``all`` applies every applicable fix at once (``no_variation``, the bound of a job without
stragglers, stays out of it: it is what the fixes are measured against). A fix *applies* when the job has something
for it to remove: a blocking sync (``no_sync``), a DataLoader wait, however short
(``no_dataloader``: the analyzer cannot tell a starved loader's wait from a fed one's), an allocator call
(``no_allocator``), a launch (``free_launches``), a collective (``overlap_collectives``,
``double_bandwidth``) or a point-to-point transfer (``double_bandwidth``), as the ranks
report while they run; the job-level fixes apply where the scenario says they change the
job (a slower rank among same-work peers, unequal stages, a pipeline for
``double_microbatches``).

The section written to ``ground_truth.json`` (all times microseconds)::

    "whatif": {
      "baseline_step_us": 41234.5,
      "intended": ["peer_median_compute"],      # the fixes the scenario is built to show
      "applied": ["no_sync", "free_launches", ...],   # the applicable fixes, i.e. what "all" does
      "step_us": {"no_sync": 40100.2, ..., "all": 20333.1},
      "savings_pct": {"no_sync": 2.75, ..., "all": 50.69},
      "culprit_ranks": {"peer_median_compute": [0]}  # job-level fixes: the ranks they speed up
    }

``intended`` and ``culprit_ranks`` come from the scenario; the step times only from the
simulations.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from gpuprof.simulate.fixes import ALL, JOB_FIXES, NO_VARIATION, WHATIFS
from gpuprof.simulate.job import job_step_us
from gpuprof.simulate.plan import Plan
from gpuprof.simulate.rank import RankSim


def applicable(sims: Sequence[RankSim], plan: Plan, already: Iterable[str] = ()) -> list[str]:
    """The fixes that change this job, in vocabulary order (``already`` applied ones left out)."""
    seen: set[str] = set()
    for s in sims:
        seen |= s.seen
    seen -= JOB_FIXES  # job-level fixes apply where the scenario says so
    seen |= set(plan.whatifs)
    done = set(already)
    return [w for w in WHATIFS if w in seen and w not in done]


def savings_pct(baseline_us: float, fixed_us: float) -> float:
    return round(100.0 * (1.0 - fixed_us / baseline_us), 3) if baseline_us > 0 else 0.0


def whatif_truth(
    baseline: Sequence[RankSim],
    plan: Plan,
    run: Callable[[frozenset[str]], Sequence[RankSim]],
    base_fixes: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """The ``whatif`` section for a job already simulated (``baseline``, with ``base_fixes``).

    ``run(fixes)`` simulates the same plan and seed with ``fixes`` and returns its ranks.
    """
    base_us = job_step_us(baseline)
    names = applicable(baseline, plan, base_fixes)
    step: dict[str, float] = {}
    for name in names:
        step[name] = job_step_us(run(base_fixes | {name}))
    # ``all`` is every fix a user would make; ``no_variation`` is the bound they are measured
    # against, not one more fix.
    fixes = [n for n in names if n != NO_VARIATION]
    if fixes:
        step[ALL] = step[fixes[0]] if len(fixes) == 1 else job_step_us(run(base_fixes | set(fixes)))
    return {
        "baseline_step_us": round(base_us, 3),
        "intended": [w for w in plan.intended_whatifs if w in names],
        "applied": names,
        "step_us": {k: round(v, 3) for k, v in step.items()},
        "savings_pct": {k: savings_pct(base_us, v) for k, v in step.items()},
        "culprit_ranks": {k: sorted(v) for k, v in plan.whatif_culprits.items() if k in names},
    }
