"""Simulated training jobs: realistic Kineto traces with a known ground truth.

``generate(scenario, out_dir, seed=0, **knobs)`` runs one scenario of
:mod:`gpuprof.simulate.scenarios` and writes ``rank<R>.pt.trace.json.gz`` per rank plus
``ground_truth.json`` beside them (for the RL scenario: a ``gpuprof run`` session folder
with the traces under ``traces/`` and NVML-like samples). Traces are streamed to disk, so
large ones (many steps or layers) need little memory.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpuprof.errors import GpuprofError
from gpuprof.model.report import Cause
from gpuprof.simulate.engine import Job, RankSim, run_job
from gpuprof.simulate.kineto import KinetoWriter
from gpuprof.simulate.scenarios import KNOB_HELP, SCENARIOS, Plan
from gpuprof.simulate.session import write_session
from gpuprof.simulate.truth import TRUTH_FILE, rank_truth, read_truth, truth_document, write_truth

__all__ = ["KNOB_HELP", "SCENARIOS", "TRUTH_FILE", "generate", "knobs_of", "read_truth", "resolve_knobs"]

# Scenarios that are another one with different defaults.
_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "dp_exposed": ("data_parallel", {"link_gbs": 5.0}),
    "dp_overlapped": ("data_parallel", {"link_gbs": 200.0}),
}

H100 = {
    "name": "NVIDIA H100 80GB HBM3",
    "totalGlobalMem": 85045346304,
    "computeMajor": 9,
    "computeMinor": 0,
    "maxThreadsPerBlock": 1024,
    "maxThreadsPerMultiprocessor": 2048,
    "regsPerBlock": 65536,
    "warpSize": 32,
    "sharedMemPerBlock": 49152,
    "numSms": 132,
    "regsPerMultiprocessor": 65536,
    "sharedMemPerBlockOptin": 232448,
    "sharedMemPerMultiprocessor": 233472,
}


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


def generate(
    scenario: str,
    out_dir: str | Path,
    *,
    seed: int = 0,
    compress: bool = True,
    compresslevel: int = 6,
    **knobs: Any,
) -> Path:
    """Simulate ``scenario`` and write its traces and ``ground_truth.json`` into ``out_dir``.

    ``compress=False`` writes plain ``.pt.trace.json`` files (faster for very large traces;
    ``compresslevel`` trades gzip speed for size otherwise). Returns the path to give
    ``gpuprof analyze`` (``out_dir`` itself). Earlier ``rank*.pt.trace.json*`` files in
    ``out_dir`` are replaced. Raises
    :class:`GpuprofError` for an unknown scenario or knob, or knobs that make no sense.
    """
    params = resolve_knobs(scenario, knobs)
    fn = SCENARIOS[scenario]
    call = dict(params)
    if "seed" in inspect.signature(_base_fn(scenario)).parameters:
        call["seed"] = seed
    plan: Plan = fn(**call)
    out = Path(out_dir)
    trace_dir = out / "traces" if plan.session else out
    trace_dir.mkdir(parents=True, exist_ok=True)
    # Traces of an earlier run into the same folder (more ranks, other format) would be
    # read together with the new ones: remove them first. Nothing else is touched.
    for old in [*out.glob("rank*.pt.trace.json*"), *(out / "traces").glob("rank*.pt.trace.json*")]:
        old.unlink()
    n = plan.world_size
    pg = {
        "pg_name": "0",
        "pg_desc": "default_pg",
        "backend_config": "cuda:nccl",
        "pg_size": n,
        "ranks": list(range(n)),
    }
    job = Job(world_size=n)
    writers: list[KinetoWriter] = []
    sims: list[RankSim] = []
    files: dict[int, str] = {}
    try:
        for r in range(n):
            name = f"rank{r}.pt.trace.json" + (".gz" if compress else "")
            files[r] = str(Path(trace_dir.name) / name) if plan.session else name
            groups = [pg] if plan.pg_config is None else plan.pg_config(r)
            dist = (
                {
                    "backend": "nccl",
                    "rank": r,
                    "world_size": n,
                    "pg_count": len(groups),
                    "pg_config": groups,
                    "nccl_version": "2.21.5",
                }
                if n > 1
                else None
            )
            w = KinetoWriter(
                trace_dir / name,
                pid=4_000_000 + 1000 * r,
                device=r % 8,
                device_properties=[{"id": i, **H100} for i in range(min(n, 8))],
                distributed_info=dist,
                compresslevel=compresslevel,
            )
            writers.append(w)
            sim = RankSim(job, r, w, seed, plan.timing)
            sim.wait_cause = plan.wait_cause
            sims.append(sim)
        run_job(sims, [plan.program] * n)
        if plan.post is not None:
            plan.post(sims)
        for w, sim in zip(writers, sims):
            assert sim.window is not None
            w.close(start_us=sim.window[0] - 50.0, end_us=sim.window[1] + 50.0, trace_name=w.path.name)
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
    if plan.session:
        write_session(out, sims, scenario)
    write_truth(out, doc)
    return out


def _base_fn(scenario: str) -> Any:
    from gpuprof.simulate import scenarios as sc

    return getattr(sc, _VARIANTS.get(scenario, (scenario, {}))[0])
