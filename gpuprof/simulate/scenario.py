"""What a scenario is, once for all of them: a function of knobs that builds a :class:`Plan`.

A scenario is declared as a :class:`Scenario` in :data:`gpuprof.simulate.scenarios.SCENARIOS`:
its function, whose keyword-only parameters are the knobs (their defaults say their types;
a ``seed`` parameter gets the run's seed), the presets it sets over those defaults (a
scenario that is another one with other defaults), its description and the layout it is
written in unless told otherwise. Everything that is the same for every scenario is here:
the knobs and their defaults, reading a knob's value (a command-line string) as its
default's type, refusing an unknown knob in one line, and calling the function.

:func:`each_step` is the program every scenario's ranks run: its profiled steps, one
``ProfilerStep#N`` each, doing the scenario's work.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from gpuprof.errors import GpuprofError
from gpuprof.simulate.engine import Program
from gpuprof.simulate.plan import Plan
from gpuprof.simulate.rank import RankSim


class Scenario:
    """One scenario: ``build(**knobs)`` returns its plan.

    ``presets`` override the function's defaults (``dp_exposed`` is ``data_parallel`` with
    ``link_gbs=5``); ``doc`` is its description (default: the function's docstring), shown by
    ``gpuprof simulate --help`` as ``__doc__``; ``layout`` the one it is written in unless
    the caller asks for another. Calling a scenario builds its plan from knobs given by
    keyword (the presets filled in), as its function does.
    """

    def __init__(
        self,
        build: Callable[..., Plan],
        *,
        name: str | None = None,
        presets: Mapping[str, Any] | None = None,
        doc: str | None = None,
        layout: str = "kineto",
    ) -> None:
        self.build = build
        self.name = name or build.__name__
        self.presets = dict(presets or {})
        self.__doc__ = doc or build.__doc__
        self.layout = layout
        params = inspect.signature(build).parameters
        self.seeded = "seed" in params
        self.knobs: dict[str, Any] = {
            n: p.default for n, p in params.items() if p.kind is p.KEYWORD_ONLY and n != "seed"
        }
        unknown = set(self.presets) - set(self.knobs)
        if unknown:
            raise ValueError(f"{self.name}: presets of unknown knobs {sorted(unknown)}")
        self.knobs.update(self.presets)

    def __call__(self, **knobs: Any) -> Plan:
        return self.build(**{**self.presets, **knobs})

    def __repr__(self) -> str:
        return f"Scenario({self.name!r})"

    def resolve(self, knobs: Mapping[str, Any]) -> dict[str, Any]:
        """Every knob's value: the defaults, with ``knobs`` read as their default's type."""
        unknown = sorted(set(knobs) - set(self.knobs))
        if unknown:
            raise GpuprofError(
                f"{self.name}: unknown knob(s) {', '.join(unknown)}; known: {', '.join(self.knobs)}"
            )
        out = dict(self.knobs)
        for k, v in knobs.items():
            out[k] = _coerce(self.name, k, v, self.knobs[k])
        return out

    def plan(self, params: Mapping[str, Any], seed: int) -> Plan:
        """The plan of resolved knobs (:meth:`resolve`) and the run's seed."""
        call = dict(params)
        if self.seeded:
            call["seed"] = seed
        return self(**call)


def each_step(steps: int, work: Callable[[RankSim, int], Program | None]) -> Callable[[RankSim], Program]:
    """The program of a rank: ``steps`` profiled steps, each ``work(sim, step)`` (step from
    0) inside ``ProfilerStep#<step + 1>``. ``work`` is a generator where it waits for other
    ranks (a collective), else a plain function."""

    def program(sim: RankSim) -> Program:
        for s in range(steps):
            with sim.step(s + 1):
                waits = work(sim, s)
                if waits is not None:
                    yield from waits

    return program


def _coerce(scenario: str, name: str, value: Any, default: Any) -> Any:
    """Turn a knob value (possibly a command-line string) into the default's type."""
    try:
        if isinstance(default, bool):
            if isinstance(value, str):
                if value.lower() in ("1", "true", "yes", "on"):
                    return True
                if value.lower() in ("0", "false", "no", "off"):
                    return False
                raise ValueError(value)
            return bool(value)
        if isinstance(default, int):
            return int(value)
        if isinstance(default, float):
            return float(value)
        return str(value)
    except (TypeError, ValueError):
        raise GpuprofError(
            f"{scenario}: knob {name} expects a {type(default).__name__}, got {value!r}"
        ) from None
