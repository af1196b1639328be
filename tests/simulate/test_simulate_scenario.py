"""A scenario is declared once: a function of keyword-only knobs, presets over its defaults,
its description and layout; knob parsing and the step loop are shared by all of them."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest

from gpuprof.errors import GpuprofError
from gpuprof.simulate import DEFAULT_LAYOUT, SCENARIOS, generate, knobs_of, read_truth, resolve_knobs
from gpuprof.simulate.engine import Program
from gpuprof.simulate.job import simulate_job
from gpuprof.simulate.plan import Plan, check
from gpuprof.simulate.platform import CUDA
from gpuprof.simulate.rank import RankSim
from gpuprof.simulate.scenario import Scenario, each_step
from gpuprof.simulate.workload import DataParallel


def toy(*, steps: int = 2, slow: bool = False, layer_us: float = 50.0, seed: int = 0) -> Plan:
    """A toy job: a few kernels per step.

    The second paragraph is not part of the description."""
    check(steps >= 0, "steps must be >= 0")

    def work(sim: RankSim, s: int) -> None:
        sim.aten("aten::mm", "gemm_kernel", layer_us * (2.0 if slow else 1.0) + seed)

    return Plan(1, each_step(steps, work), {"intended": None, "seed_seen": seed})


def test_knobs_are_the_functions_keyword_parameters_with_the_presets_over_them() -> None:
    plain = Scenario(toy)
    preset = Scenario(toy, name="toy_slow", presets={"slow": True, "steps": 5}, doc="A slow toy.", layout="megatron")
    assert plain.name == "toy" and preset.name == "toy_slow"
    # in the function's order (what --help and the truth's "knobs" show), seed left out
    assert list(plain.knobs) == list(preset.knobs) == ["steps", "slow", "layer_us"]
    assert plain.knobs == {"steps": 2, "slow": False, "layer_us": 50.0}
    assert preset.knobs == {"steps": 5, "slow": True, "layer_us": 50.0}
    assert plain.__doc__ == toy.__doc__ and preset.__doc__ == "A slow toy."
    assert (plain.layout, preset.layout) == ("kineto", "megatron")
    assert plain.seeded and preset.seeded


def test_a_preset_of_a_knob_the_function_lacks_is_refused_where_it_is_declared() -> None:
    with pytest.raises(ValueError, match="nonesuch"):
        Scenario(toy, name="bad", presets={"nonesuch": 1})


def test_knob_values_are_read_as_their_defaults_type_and_bad_ones_named() -> None:
    sc = Scenario(toy)
    assert sc.resolve({"steps": "4", "slow": "yes", "layer_us": "7"}) == {"steps": 4, "slow": True, "layer_us": 7.0}
    with pytest.raises(GpuprofError, match=r"toy: unknown knob\(s\) nonesuch; known: steps, slow, layer_us"):
        sc.resolve({"nonesuch": 1})
    with pytest.raises(GpuprofError, match="toy: knob slow expects a bool, got 'maybe'"):
        sc.resolve({"slow": "maybe"})


def test_the_seed_reaches_only_a_function_that_takes_one() -> None:
    seeded = Scenario(toy)
    assert seeded.plan(seeded.resolve({}), 7).expected["seed_seen"] == 7

    def unseeded(*, steps: int = 1) -> Plan:
        return toy(steps=steps)

    sc = Scenario(unseeded)
    assert not sc.seeded
    assert sc.plan(sc.resolve({}), 7).expected["seed_seen"] == 0


def test_calling_a_scenario_fills_in_its_presets() -> None:
    sc = Scenario(toy, name="toy_long", presets={"steps": 4})
    sims = simulate_job(sc(), 0, platform=CUDA)
    assert [n for n, _, _ in sims[0].steps] == [1, 2, 3, 4]
    assert len(simulate_job(sc(steps=1), 0, platform=CUDA)[0].steps) == 1


def test_each_step_runs_plain_and_waiting_work_inside_profiler_steps() -> None:
    seen: list[tuple[int, int]] = []

    def plain(sim: RankSim, s: int) -> None:
        seen.append((s, sim._step_no))
        sim.aten("aten::mm", "gemm_kernel", 10.0)

    sims = simulate_job(Plan(1, each_step(3, plain)), 0, platform=CUDA)
    assert seen == [(0, 1), (1, 2), (2, 3)]
    assert [n for n, _, _ in sims[0].steps] == [1, 2, 3]

    ddp = DataParallel(2, 2, 100.0, 10.0, 1, 100.0)

    def waiting(sim: RankSim, s: int) -> Program:
        return ddp.step(sim, s)

    sims = simulate_job(Plan(2, each_step(2, waiting)), 0, platform=CUDA)
    assert all([n for n, _, _ in s.steps] == [1, 2] for s in sims)
    # the all-reduce ran: every rank waited for it before its optimizer step
    assert all(s.phase_compute_us["main"] > 0 and s.stream_free for s in sims)


def test_every_registered_scenario_is_its_functions_knobs_and_presets() -> None:
    for name, sc in SCENARIOS.items():
        params = inspect.signature(sc.build).parameters
        own = [n for n, p in params.items() if p.kind is p.KEYWORD_ONLY and n != "seed"]
        assert list(knobs_of(name)) == own, name
        for knob, value in sc.presets.items():
            assert knobs_of(name)[knob] == value
        assert resolve_knobs(name, {}) == knobs_of(name)
        assert DEFAULT_LAYOUT.get(name, "kineto") == sc.layout
    assert knobs_of("dp_exposed")["link_gbs"] == 5.0 and knobs_of("dp_overlapped")["link_gbs"] == 200.0
    assert SCENARIOS["dp_exposed"].build is SCENARIOS["dp_overlapped"].build
    assert DEFAULT_LAYOUT == {
        n: "megatron"
        for n in (
            "megatron_slow_worker",
            "megatron_uneven_data",
            "megatron_slow_stage",
            "megatron_slow_link",
            "megatron_slow_dp_group",
        )
    }


def test_a_preset_scenario_writes_the_job_of_its_function_with_those_knobs(tmp_path: Path) -> None:
    root = tmp_path
    small: dict[str, Any] = {"steps": 1, "layers": 2, "ranks": 2}
    generate("dp_exposed", root / "preset", whatifs=False, **small)
    generate("dp_overlapped", root / "by_knob", whatifs=False, link_gbs=5.0, **small)
    a, b = read_truth(root / "preset"), read_truth(root / "by_knob")
    assert a["knobs"] == b["knobs"] and a["ranks"] == b["ranks"]
    for r in range(2):
        name = f"rank{r}.pt.trace.json.gz"
        assert (root / "preset" / name).read_bytes() == (root / "by_knob" / name).read_bytes()
