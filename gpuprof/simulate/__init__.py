"""Simulated training jobs: realistic traces with a known ground truth, what-ifs included.

``generate(scenario, out_dir, seed=0, **knobs)`` runs one scenario of
:mod:`gpuprof.simulate.scenarios` and writes ``rank<R>.pt.trace.json.gz`` per rank plus
the ground truth in ``truth/ground_truth.json`` (for the RL scenario: a ``gpuprof run``
session folder with the traces under ``traces/`` and NVML-like samples). Traces are streamed to disk, so
large ones (many steps or layers) need little memory.

Options beside the knobs: ``platform`` (``cuda``: H100 and CUDA names; ``rocm``: MI300X,
HIP and RCCL names), ``layout`` (``kineto``, or ``megatron`` for pipeline scenarios: one
op-level timer timeline of the whole job, :mod:`gpuprof.simulate.megatron`), ``whatif``
(write the job with one fix of :mod:`gpuprof.simulate.fixes` applied, or ``all``) and
``whatifs`` (compute the what-if truth, :mod:`gpuprof.simulate.whatif`).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpuprof.errors import GpuprofError
from gpuprof.model.report import Cause
from gpuprof.simulate.fixes import ALL, FREE_HOST, NO_VARIATION, WHATIF_HELP, WHATIFS
from gpuprof.simulate.job import host_pid, null_writer, simulate_job
from gpuprof.simulate.kineto import KinetoWriter, TraceWriter
from gpuprof.simulate.platform import PLATFORMS, Platform
from gpuprof.simulate.rank import RankSim
from gpuprof.simulate.scenarios import KNOB_HELP, SCENARIOS, Plan
from gpuprof.simulate.scenarios_parallel import SLOW_WORKER_KNOBS, UNEVEN_DATA_KNOBS
from gpuprof.simulate.session import write_session
from gpuprof.simulate.truth import (
    OLD_TRUTH_FILE,
    TRUTH_FILE,
    rank_truth,
    read_truth,
    renumber_ranks,
    truth_document,
    truth_path,
    write_truth,
)
from gpuprof.simulate.whatif import applicable, whatif_truth

__all__ = [
    "DEFAULT_LAYOUT",
    "KNOB_HELP",
    "LAYOUTS",
    "PLATFORMS",
    "SCENARIOS",
    "TRUTH_FILE",
    "WHATIFS",
    "WHATIF_HELP",
    "generate",
    "knobs_of",
    "prepare",
    "read_truth",
    "truth_path",
    "resolve_knobs",
]

LAYOUTS = ("kineto", "megatron")

# Scenarios that are another one with different defaults.
_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "dp_exposed": ("data_parallel", {"link_gbs": 5.0}),
    "dp_overlapped": ("data_parallel", {"link_gbs": 200.0}),
    "megatron_slow_worker": ("pipeline", SLOW_WORKER_KNOBS),
    "megatron_uneven_data": ("pipeline", UNEVEN_DATA_KNOBS),
}
# Scenarios written as an op-level timeline unless told otherwise.
DEFAULT_LAYOUT: dict[str, str] = {"megatron_slow_worker": "megatron", "megatron_uneven_data": "megatron"}


def layout_of(scenario: str, layout: str | None) -> str:
    """The layout asked for, else the scenario's own (``kineto`` for most)."""
    return layout or DEFAULT_LAYOUT.get(scenario, "kineto")


def knobs_of(scenario: str) -> dict[str, Any]:
    """The knobs of a scenario and their defaults (``seed`` is separate)."""
    if scenario not in SCENARIOS:
        raise GpuprofError(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}")
    base, overrides = _VARIANTS.get(scenario, (scenario, {}))
    from gpuprof.simulate import scenarios as sc

    fn = getattr(sc, base)
    knobs = {
        n: p.default
        for n, p in inspect.signature(fn).parameters.items()
        if p.kind is p.KEYWORD_ONLY and n != "seed"
    }
    knobs.update(overrides)
    return knobs


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


def resolve_knobs(scenario: str, knobs: Mapping[str, Any]) -> dict[str, Any]:
    defaults = knobs_of(scenario)
    unknown = sorted(set(knobs) - set(defaults))
    if unknown:
        raise GpuprofError(f"{scenario}: unknown knob(s) {', '.join(unknown)}; known: {', '.join(defaults)}")
    out = dict(defaults)
    for k, v in knobs.items():
        out[k] = _coerce(scenario, k, v, defaults[k])
    return out


def prepare(
    scenario: str,
    knobs: Mapping[str, Any],
    *,
    seed: int = 0,
    platform: str | None = None,
    layout: str | None = None,
    whatif: str | None = None,
) -> tuple[dict[str, Any], Plan]:
    """Check a scenario's knobs and options and build its plan (nothing runs, nothing is
    written): the knobs with defaults filled in, and the plan. Raises :class:`GpuprofError`
    with one line saying what is wrong."""
    params = resolve_knobs(scenario, knobs)
    _platform(platform)
    layout = layout_of(scenario, layout)
    if layout not in LAYOUTS:
        raise GpuprofError(f"unknown layout {layout!r}; known: {', '.join(LAYOUTS)}")
    if whatif is not None and whatif not in (*WHATIFS, ALL):
        raise GpuprofError(f"unknown what-if {whatif!r}; known: {', '.join((*WHATIFS, ALL))}")
    if whatif == FREE_HOST:
        raise GpuprofError(
            "free_host is simulated only for the what-if truth: a host that costs nothing leaves no host "
            "timeline to write (--whatif all writes every other applicable fix)"
        )
    call = dict(params)
    if "seed" in inspect.signature(_base_fn(scenario)).parameters:
        call["seed"] = seed
    plan: Plan = SCENARIOS[scenario](**call)
    if layout == "megatron" and (plan.parallel is None or plan.session):
        raise GpuprofError(f"{scenario}: the megatron layout is for pipeline scenarios (try: pipeline)")
    if layout != "megatron" and params.get("batched_p2p"):
        raise GpuprofError(f"{scenario}: batched_p2p is written only with --layout megatron")
    if layout != "megatron" and plan.parallel is not None and int(plan.parallel.get("tp_size", 1)) > 1:
        raise GpuprofError(
            f"{scenario}: tp > 1 is written only with --layout megatron (a timeline of TP rank 0 of each position)"
        )
    return params, plan


def generate(
    scenario: str,
    out_dir: str | Path,
    *,
    seed: int = 0,
    compress: bool = True,
    compresslevel: int = 6,
    platform: str | None = None,
    layout: str | None = None,
    whatif: str | None = None,
    whatifs: bool = True,
    **knobs: Any,
) -> Path:
    """Simulate ``scenario`` and write its traces and the ground truth (``TRUTH_FILE``) into ``out_dir``.

    ``compress=False`` writes plain ``.json`` files (faster for very large traces;
    ``compresslevel`` trades gzip speed for size otherwise). ``platform`` is ``cuda`` or
    ``rocm`` (default: the scenario's own, else ``cuda``); ``layout`` ``kineto`` (one
    trace per rank) or ``megatron`` (one op-level timeline, pipeline scenarios only).
    ``whatif`` writes the job with that fix applied (``all``: every applicable one but
    ``free_host``, which leaves no host timeline to write), and
    its ground truth is that job's. ``whatifs=False`` skips the what-if truth (each
    what-if is one more simulation). Returns the path to give ``gpuprof analyze``
    (``out_dir`` itself). Earlier traces of ``generate`` in ``out_dir`` are replaced.
    Raises :class:`GpuprofError` for an unknown scenario, knob or option, or knobs that
    make no sense.
    """
    params, plan = prepare(scenario, knobs, seed=seed, platform=platform, layout=layout, whatif=whatif)
    layout = layout_of(scenario, layout)
    pf = _platform(platform or plan.platform)
    megatron = layout == "megatron"

    def run(fixes: frozenset[str]) -> list[RankSim]:
        return simulate_job(plan, seed, fixes=fixes, platform=pf)

    fixes: frozenset[str] = frozenset()
    if whatif == ALL:
        fixes = frozenset(applicable(run(frozenset()), plan)) - {FREE_HOST, NO_VARIATION}
    elif whatif is not None:
        fixes = frozenset({whatif})

    out = Path(out_dir)
    trace_dir = out / "traces" if plan.session else out
    trace_dir.mkdir(parents=True, exist_ok=True)
    # Traces of an earlier run into the same folder (more ranks, other format) would be
    # read together with the new ones: remove them first. Nothing else is touched.
    for old in [
        *out.glob("rank*.pt.trace.json*"),
        *(out / "traces").glob("rank*.pt.trace.json*"),
        *out.glob("timeline-*.json*"),
        *out.glob("meta-*.yaml"),
        *out.glob(OLD_TRUTH_FILE),  # where older versions kept the ground truth
    ]:
        old.unlink()
    n = plan.world_size
    writers: list[TraceWriter] = []
    files: dict[int, str] = {}

    def writer_for(r: int) -> TraceWriter:
        if megatron:
            return null_writer(r)
        name = f"rank{r}.pt.trace.json" + (".gz" if compress else "")
        files[r] = str(Path(trace_dir.name) / name) if plan.session else name
        return KinetoWriter(
            trace_dir / name,
            pid=host_pid(r),
            device=r % 8,
            device_properties=[{"id": i, **pf.device_properties} for i in range(min(n, 8))],
            distributed_info=_distributed_info(plan, r, pf),
            compresslevel=compresslevel,
            header=pf.header,
        )

    try:
        sims = simulate_job(
            plan, seed, fixes=fixes, platform=pf, writer_for=writer_for, timers=megatron, writers=writers
        )
        for w, sim in zip(writers, sims):
            assert sim.window is not None
            if isinstance(w, KinetoWriter):
                w.close(start_us=sim.window[0] - 50.0, end_us=sim.window[1] + 50.0, trace_name=w.path.name)
        if megatron:
            from gpuprof.simulate.megatron import write_timeline

            assert plan.parallel is not None
            path = write_timeline(out, sims, plan.parallel, compress=compress)
            files = {r: path.name for r in range(n)}
    except BaseException:
        for w in writers:
            w.abort()
        raise
    truths = [rank_truth(s) for s in sims]
    expected = dict(plan.expected)
    if expected.get("theoretical_bubble_fraction") is not None:
        fr = [
            t.lost_us[Cause.PIPELINE_BUBBLE]
            / max(t.lost_us[Cause.PIPELINE_BUBBLE] + t.phase_compute_us.get("pipeline", 0.0), 1e-9)
            for t in truths
        ]
        expected["measured_bubble_fraction"] = round(sum(fr) / len(fr), 6)
    doc = truth_document(scenario, params, seed, files, truths, expected)
    doc["platform"] = pf.name
    doc["layout"] = layout
    doc["fixes"] = [w for w in WHATIFS if w in fixes]
    doc["whatif"] = whatif_truth(sims, plan, run, fixes) if whatifs else None
    if plan.session:
        write_session(out, sims, scenario)
    if megatron and plan.parallel is not None:
        doc = renumber_ranks(doc, int(plan.parallel.get("tp_size", 1)))
    write_truth(out, doc)
    return out


def _platform(name: str | None) -> Platform:
    key = name or "cuda"
    if key not in PLATFORMS:
        raise GpuprofError(f"unknown platform {key!r}; known: {', '.join(PLATFORMS)}")
    return PLATFORMS[key]


def _distributed_info(plan: Plan, rank: int, pf: Platform) -> dict[str, Any] | None:
    n = plan.world_size
    if n <= 1:
        return None
    pg = {
        "pg_name": "0",
        "pg_desc": "default_pg",
        "backend_config": "cuda:nccl",
        "pg_size": n,
        "ranks": list(range(n)),
    }
    groups = [pg] if plan.pg_config is None else plan.pg_config(rank)
    return {
        "backend": "nccl",
        "rank": rank,
        "world_size": n,
        "pg_count": len(groups),
        "pg_config": groups,
        "nccl_version": "2.22.3" if pf.rocm else "2.21.5",
    }


def _base_fn(scenario: str) -> Any:
    from gpuprof.simulate import scenarios as sc

    return getattr(sc, _VARIANTS.get(scenario, (scenario, {}))[0])
