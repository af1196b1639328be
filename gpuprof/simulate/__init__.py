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

The modules, by job:

* the scenarios: :mod:`~gpuprof.simulate.scenarios` declares every one (:data:`SCENARIOS`,
  :data:`KNOB_HELP`) as a :class:`~gpuprof.simulate.scenario.Scenario` (a function of
  knobs, presets, description, layout; knob parsing and the step loop shared by all);
  their functions are in ``scenarios_single`` (one rank), ``scenarios_dp`` (data
  parallel, stragglers, RL) and ``scenarios_pipeline`` (the pipeline's program), with
  ``pipeline_job`` (the pipeline's ranks, groups, work and what its fixes change) and
  ``schedules``; each returns a :class:`~gpuprof.simulate.plan.Plan`;
* the model they are written in: ``workload`` (a transformer's operators and kernels, a
  training step, DDP), ``comm`` (NCCL collectives and point-to-point transfers), ``kernels``;
* the simulator: ``engine`` (the event loop and rendezvous), ``host`` (a rank's host
  thread, its clock and the ground truth's bookkeeping), ``rank`` (its device streams),
  ``job`` (one run of a plan);
* what is written: ``kineto`` and ``platform`` (traces, CUDA or ROCm names), ``megatron``
  (the op-level timeline), ``session`` (a ``gpuprof run`` folder), ``truth`` (the ground
  truth), ``fixes`` and ``whatif`` (the what-if fixes and their true savings).
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpuprof.errors import GpuprofError
from gpuprof.model.report import Cause
from gpuprof.simulate.fixes import ALL, FREE_HOST, NO_VARIATION, WHATIF_HELP, WHATIFS
from gpuprof.simulate.job import host_pid, null_writer, simulate_job
from gpuprof.simulate.kineto import KinetoWriter, TraceWriter
from gpuprof.simulate.platform import PLATFORMS, Platform
from gpuprof.simulate.rank import RankSim
from gpuprof.simulate.scenario import Scenario
from gpuprof.simulate.scenarios import KNOB_HELP, SCENARIOS, Plan
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
from gpuprof.util.jsontypes import JsonMapping, JsonObject

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
    "resolve_knobs",
    "truth_path",
    "with_noise",
]

LAYOUTS = ("kineto", "megatron")

# Scenarios written as an op-level timeline unless told otherwise.
DEFAULT_LAYOUT: dict[str, str] = {n: s.layout for n, s in SCENARIOS.items() if s.layout != "kineto"}


def layout_of(scenario: str, layout: str | None) -> str:
    """The layout asked for, else the scenario's own (``kineto`` for most)."""
    return layout or DEFAULT_LAYOUT.get(scenario, "kineto")


def _scenario(name: str) -> Scenario:
    if name not in SCENARIOS:
        raise GpuprofError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
    return SCENARIOS[name]


def knobs_of(scenario: str) -> JsonObject:
    """The knobs of a scenario and their defaults (``seed`` is separate)."""
    return dict(_scenario(scenario).knobs)


def resolve_knobs(scenario: str, knobs: JsonMapping) -> JsonObject:
    """Every knob of ``scenario``: its default, or the value in ``knobs`` read as the
    default's type. Raises :class:`GpuprofError` for an unknown knob or a bad value."""
    return _scenario(scenario).resolve(knobs)


def prepare(
    scenario: str,
    knobs: JsonMapping,
    *,
    seed: int = 0,
    platform: str | None = None,
    layout: str | None = None,
    whatif: str | None = None,
) -> tuple[JsonObject, Plan]:
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
    plan = SCENARIOS[scenario].plan(params, seed)
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
    step_noise_pct: float = 0.0,
    run_noise_pct: float = 0.0,
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
    plan = with_noise(plan, step_noise_pct, run_noise_pct)
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
    if step_noise_pct or run_noise_pct:
        doc["noise"] = {"step_pct": step_noise_pct, "run_pct": run_noise_pct}
    doc["whatif"] = whatif_truth(sims, plan, run, fixes) if whatifs else None
    if plan.session:
        write_session(out, sims, scenario)
    if megatron and plan.parallel is not None:
        doc = renumber_ranks(doc, int(plan.parallel.get("tp_size", 1)))
    write_truth(out, doc)
    return out


def with_noise(plan: Plan, step_noise_pct: float, run_noise_pct: float) -> Plan:
    """``plan`` with noise like real jobs' (see :func:`generate`), as percentages."""
    for name, value in (("step noise", step_noise_pct), ("run noise", run_noise_pct)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and 0 <= value <= 100):
            raise GpuprofError(f"{name}: expected a percentage from 0 to 100, got {value!r}")
    if not step_noise_pct and not run_noise_pct:
        return plan
    timing = replace(plan.timing, step_cv=step_noise_pct / 100.0, run_cv=run_noise_pct / 100.0)
    return replace(plan, timing=timing)


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

