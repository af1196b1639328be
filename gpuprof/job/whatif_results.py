"""The what-ifs replayed on a job (:mod:`gpuprof.job.whatifs`): the replayed step times,
the savings they give, and what several fixes save together.

:func:`run_whatifs` replays the model unchanged and once per applicable what-if;
:class:`WhatIfResults` holds the replays and says each saving (percent of the measured
step), the bound ``no_variation`` sets, and the saving of several fixes replayed at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuprof.job.replay_types import JobReplay
from gpuprof.job.whatifs import BOUNDS, EVENING, HIDES_COPIES, WHATIFS, JobModel


@dataclass(frozen=True)
class WhatIfResults:
    """Replayed step times: ``baseline`` (unchanged) and one per applicable what-if."""

    model: JobModel
    baseline: JobReplay
    results: Mapping[str, JobReplay]
    microbatch_saving_us: float = 0.0

    @property
    def model_error_pct(self) -> float:
        m = self.model.measured_step_us
        return 100.0 * (self.baseline.step_us - m) / m if m > 0 else 0.0

    def savings_pct(self, name: str) -> float | None:
        """What ``name`` saves, percent of the measured job step (``None``: not replayed)."""
        m = self.model.measured_step_us
        if m <= 0:
            return None
        if name == "double_microbatches":
            return min(100.0, 100.0 * self.microbatch_saving_us / m) if self.model.pipeline is not None else None
        got = self.results.get(name)
        if got is None:
            return None
        saved = min(self.baseline.step_us - self._bounded(got.step_us, (name,)), self._headroom_us((name,)))
        return min(100.0, max(0.0, 100.0 * saved / m))

    def _headroom_us(self, names: Iterable[str]) -> float:
        """The most ``names`` can save per step: the measured step down to the shortest step
        a fix that keeps the compute can give (no fix saves more than the idle time it acts
        on; the replay's own error must not make it)."""
        return max(self.model.measured_step_us - self.model.step_floor_us(names), 0.0)

    def _bounded(self, step_us: float, names: Iterable[str]) -> float:
        """A replayed step no shorter than the copies need when a what-if hides them (the
        replay gives hidden copies no time at all)."""
        if any(n in HIDES_COPIES for n in names):
            return max(step_us, self.model.copy_floor_us())
        return step_us

    def combined_pct(self, names: Iterable[str]) -> float | None:
        """What applying every what-if of ``names`` at once saves, from one replay (bounds
        such as ``no_variation`` are not fixes and are left out)."""
        names = [n for n in names if n in WHATIFS and n not in BOUNDS]
        m = self.model.measured_step_us
        if not names or m <= 0:
            return None
        graph_names = [n for n in names if n != "double_microbatches"]
        step = self.model.replay(graph_names).step_us if graph_names else self.baseline.step_us
        saved = min(self.baseline.step_us - self._bounded(step, graph_names), self._headroom_us(names))
        if "double_microbatches" in names:
            # After a stage or rank fix the bottleneck's measured bubble no longer applies:
            # the schedule model with the fixed stage times says what the microbatches add.
            fixed = "balanced_stages" in names or "peer_median_compute" in names
            saved += self.model.microbatch_saving_us(balanced="balanced_stages" in names, capped=not fixed)
        return max(0.0, min(100.0, 100.0 * saved / m))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "measured_step_us": round(self.model.measured_step_us, 3),
            "replayed_step_us": round(self.baseline.step_us, 3),
            "model_error_pct": round(self.model_error_pct, 3),
            "groups": len(self.model.groups),
            "unreached_members": self.baseline.unreached,
            "savings_pct": {},
            "step_us": {},
        }
        for name in WHATIFS:
            pct = self.savings_pct(name)
            if pct is None:
                continue
            # two decimals, as a recommendation carries its saving: one number reads alike everywhere
            out["savings_pct"][name] = round(pct, 2)
            if name in self.results:
                step = self._bounded(self.results[name].step_us, (name,))
                out["step_us"][name] = round(max(step, self.baseline.step_us - self._headroom_us((name,))), 3)
        bound = self.savings_pct("no_variation")
        if bound is not None and bound > 0:
            # How much of the job without stragglers each fix that evens out the work
            # reaches, alone and all together (structural fixes, more microbatches or
            # overlapped collectives, can go past it and are not counted).
            even = [n for n in EVENING if n in self.results]
            together = self.combined_pct(even) if even else None
            out["bound"] = {
                "whatif": "no_variation",
                "savings_pct": round(bound, 2),
                "reached_pct": {n: round(min(100.0, 100.0 * out["savings_pct"][n] / bound), 1) for n in even},
                "reached_together_pct": None if together is None else round(min(100.0, 100.0 * together / bound), 1),
            }
        return out


def run_whatifs(model: JobModel) -> WhatIfResults:
    """Replay ``model`` unchanged and once per applicable what-if."""
    base = model.replay(())
    results = {name: model.replay((name,)) for name in model.applicable() if name != "double_microbatches"}
    mb = model.microbatch_saving_us() if model.pipeline is not None else 0.0
    return WhatIfResults(model=model, baseline=base, results=results, microbatch_saving_us=mb)


__all__ = ["WhatIfResults", "run_whatifs"]
