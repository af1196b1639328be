"""How often the CI gate cries wolf, and how often it catches a real regression (issue 30).

    python benchmarks/bench_gate.py            # ~15 min on 2 cores the first time; then seconds
    python benchmarks/bench_gate.py --quick    # smaller pools (a minute), rougher figures

Printed figures, not a timed test. Jobs come from ``gpuprof simulate`` (the ``healthy``
scenario, one rank, 60 profiled steps) with noise like real jobs' at three levels
(``--step-noise``: each step's durations scaled by exp(N(0, s)); ``--run-noise``: the whole
run's by exp(N(0, r)), one draw per seed, which is what makes repeated runs of one job
differ): A 3 % / 0 %, B 3 % / 0.5 %, C 5 % / 1 %, D 5 % / 2 %. Each run is simulated, written as a Kineto trace, analyzed by gpuprof and reduced
to its step distribution (:func:`gpuprof.ci.samples.run_steps`), as ``gpuprof check`` does.

Simulating 1000+ jobs per level is too slow here, so a **pool** is simulated once per
level (``--pool`` runs of the job, ``--reg-runs`` runs of each regressed job; cached in
``benchmarks/out/gate-runs/``) and pairs are drawn from it: ``--pairs`` same-job pairs of
two different runs (false alarms) and as many (baseline run, regressed run) pairs per
size (detection). Pairs share runs, so they are not independent: the rates' uncertainty
is larger than a binomial's. A regression is injected by the scenario's ``layer_ms`` knob
(every layer's kernels 3 / 5 / 10 % slower); the effect on the step, measured on the
noise-free job, is printed beside it. With fewer steps, each side keeps its first N.

Rules compared on the same pairs:

- **gate**: ``gpuprof check --baseline`` today (99 % interval, 5 % floor), a failure being
  a "regression" verdict;
- **gate, 5 runs pooled**: the same with five baseline runs pooled (the run-to-run spread
  they show widens the interval);
- **fixed 5 %**: earlier versions' step rule, the mean step more than 5 % above the
  baseline's;
- **old default**: earlier versions' default with a baseline: that step rule, or a share
  (compute or a cause) 5 percentage points worse.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from gpuprof.ci.history import line_for, run_from_line
from gpuprof.ci.samples import PARTS, RunSteps, run_steps
from gpuprof.ci.verdict import GateSettings, Kind, compare

# name, step-to-step %, run-to-run %: from noise within a run only (what a test of two
# distributions sees) to run-to-run offsets of several percent (which one run cannot show).
LEVELS = (("A", 3.0, 0.0), ("B", 3.0, 0.5), ("C", 5.0, 1.0), ("D", 5.0, 2.0))
SIZES = (3.0, 5.0, 10.0)  # injected regressions, % slower layers
STEPS = (5, 10, 20, 30, 60)
SCENARIO, LAYER_MS, TOTAL_STEPS = "healthy", 1.5, 60
OUT = HERE / "out" / "gate-runs"


def _simulate(level: tuple[str, float, float], size: float, seed: int) -> RunSteps:
    """One run, from the cache or simulated and analyzed."""
    name, step_pct, run_pct = level
    cache = OUT / f"{name}-{size:g}-{seed}.json"
    if cache.exists():
        got = run_from_line(json.loads(cache.read_text()), cache.name)
        if got is not None:
            return got[0]
    from gpuprof.pipeline import analyze_paths
    from gpuprof.simulate import generate

    with tempfile.TemporaryDirectory() as tmp:
        generate(
            SCENARIO, tmp, seed=seed, compress=False, whatifs=False, step_noise_pct=step_pct, run_noise_pct=run_pct,
            steps=TOTAL_STEPS, layer_ms=LAYER_MS * (1 + size / 100.0),
        )  # fmt: skip
        run = run_steps(analyze_paths([Path(tmp)]), cache.name)
    OUT.mkdir(parents=True, exist_ok=True)
    cache.write_text(line_for(run, commit=None, verdict=None, inputs=[]))
    return run


def _true_effect_pct(size: float) -> float:
    """The regression's effect on the median step of the noise-free job (seed 0)."""
    base = _simulate(("exact", 0.0, 0.0), 0.0, 0)
    slow = _simulate(("exact", 0.0, 0.0), size, 0)
    return 100.0 * (float(np.median(slow.step_ms)) / float(np.median(base.step_ms)) - 1.0)


def _first(run: RunSteps, n: int) -> RunSteps:
    parts = None if run.parts_ms is None else {k: v[:n] for k, v in run.parts_ms.items()}
    return RunSteps(run.label, run.step_ms[:n], parts, run.totals_ms, run.fingerprint)


def _fixed_step(cur: RunSteps, base: RunSteps, tol_pct: float = 5.0) -> bool:
    return float(cur.step_ms.mean()) > float(base.step_ms.mean()) * (1 + tol_pct / 100.0)


def _shares(run: RunSteps) -> dict[str, float]:
    assert run.parts_ms is not None
    total = float(run.step_ms.sum())
    return {k: 100.0 * float(v.sum()) / total for k, v in run.parts_ms.items()}


def _old_default(cur: RunSteps, base: RunSteps, tol_pp: float = 5.0) -> bool:
    c, b = _shares(cur), _shares(base)
    worse = c["compute"] < b["compute"] - tol_pp or any(c[k] > b[k] + tol_pp for k in PARTS if k != "compute")
    return worse or _fixed_step(cur, base)


def _pairs(rng: np.random.Generator, n_a: int, n_b: int, count: int, distinct: bool) -> list[tuple[int, int]]:
    seen: set[tuple[int, int]] = set()
    while len(seen) < count:
        a, b = int(rng.integers(n_a)), int(rng.integers(n_b))
        if not (distinct and a == b):
            seen.add((a, b))
    return sorted(seen)


def _rate(hits: list[bool]) -> str:
    return f"{100.0 * sum(hits) / len(hits):.1f}%" if hits else "-"


def evaluate(level: tuple[str, float, float], pool: int, reg_runs: int, n_pairs: int) -> dict[str, Any]:
    t0 = time.time()
    base_runs = [_simulate(level, 0.0, seed) for seed in range(pool)]
    regressed = {s: [_simulate(level, s, 10_000 + seed) for seed in range(reg_runs)] for s in SIZES}
    simulated_s = time.time() - t0
    rng = np.random.default_rng(30)
    same = _pairs(rng, pool, pool, n_pairs, distinct=True)
    reg_pairs = {s: _pairs(rng, pool, reg_runs, min(n_pairs, pool * reg_runs), distinct=False) for s in SIZES}
    gs = GateSettings()
    rows: dict[str, Any] = {"level": level[0], "simulated_s": round(simulated_s, 1), "by_steps": {}}
    for n in STEPS:
        fa = {"gate": [], "fixed": [], "old": [], "inconclusive": []}
        for i, j in same:
            cur, base = _first(base_runs[i], n), _first(base_runs[j], n)
            v = compare(cur, [base], gs)
            fa["gate"].append(v.kind is Kind.REGRESSION)
            fa["inconclusive"].append(v.kind is Kind.INCONCLUSIVE)
            fa["fixed"].append(_fixed_step(cur, base))
            fa["old"].append(_old_default(cur, base))
        det: dict[float, dict[str, list[bool]]] = {}
        for s, pairs in reg_pairs.items():
            d = {"gate": [], "fixed": [], "old": [], "cause": []}
            for i, j in pairs:
                cur, base = _first(regressed[s][j], n), _first(base_runs[i], n)
                v = compare(cur, [base], gs)
                d["gate"].append(v.kind is Kind.REGRESSION)
                if v.kind is Kind.REGRESSION:
                    d["cause"].append(bool(v.causes) and v.causes[0].name == "compute")
                d["fixed"].append(_fixed_step(cur, base))
                d["old"].append(_old_default(cur, base))
            det[s] = d
        rows["by_steps"][n] = {"false_alarms": fa, "detection": det}
    # Five baseline runs pooled, 30 steps a side: a candidate run outside the five.
    pooled_fa, pooled_det = [], {s: [] for s in SIZES}
    for k in range(n_pairs):
        pick = rng.choice(pool, size=6, replace=False)
        bases = [_first(base_runs[int(i)], 30) for i in pick[:5]]
        pooled_fa.append(compare(_first(base_runs[int(pick[5])], 30), bases, gs).kind is Kind.REGRESSION)
        for s in SIZES:
            cur = _first(regressed[s][k % reg_runs], 30)
            pooled_det[s].append(compare(cur, bases, gs).kind is Kind.REGRESSION)
    rows["pooled"] = {"false_alarms": pooled_fa, "detection": pooled_det}
    rows["pairs"] = {"same": len(same), "regressed": {s: len(p) for s, p in reg_pairs.items()}}
    return rows


def table(results: list[dict[str, Any]], effects: dict[float, float]) -> str:
    sizes = " | ".join(f"detect {s:g}% (step +{effects[s]:.1f}%)" for s in SIZES)
    lines = [
        f"| noise (step / run) | steps per side | rule | false alarms | {sizes} |",
        "|---|---:|---|---:|" + "---:|" * len(SIZES),
    ]
    for res, (name, sp, rp) in zip(results, LEVELS):
        label = f"{name}: {sp:g}% / {rp:g}%"
        for n in STEPS:
            row = res["by_steps"][n]
            fa, det = row["false_alarms"], row["detection"]
            for rule, title in (("gate", "gate"), ("fixed", "fixed 5% (mean step)"), ("old", "old default (+ shares 5 pp)")):
                extra = f" ({_rate(fa['inconclusive'])} inconclusive)" if rule == "gate" and any(fa["inconclusive"]) else ""
                cells = " | ".join(_rate(det[s][rule]) for s in SIZES)
                lines.append(f"| {label} | {n} | {title} | {_rate(fa[rule])}{extra} | {cells} |")
        pooled = res["pooled"]
        cells = " | ".join(_rate(pooled["detection"][s]) for s in SIZES)
        lines.append(f"| {label} | 30 | gate, 5 baseline runs pooled | {_rate(pooled['false_alarms'])} | {cells} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pool", type=int, default=150, help="runs of the job per noise level (default 150)")
    ap.add_argument("--reg-runs", type=int, default=60, help="runs of each regressed job per level (default 60)")
    ap.add_argument("--pairs", type=int, default=500, help="same-job pairs, and pairs per regression size (default 500)")
    ap.add_argument("--quick", action="store_true", help="pool 40, 20 regressed runs, 200 pairs")
    args = ap.parse_args(argv)
    if args.quick:
        args.pool, args.reg_runs, args.pairs = 40, 20, 200
    effects = {s: _true_effect_pct(s) for s in SIZES}
    results = []
    for level in LEVELS:
        res = evaluate(level, args.pool, args.reg_runs, args.pairs)
        print(f"{level[0]}: runs ready in {res['simulated_s']} s; pairs {res['pairs']}", file=sys.stderr)
        results.append(res)
    text = table(results, effects)
    # How often the gate named compute first when it called a 5 % regression at 30 steps.
    named = [r["by_steps"][30]["detection"][5.0]["cause"] for r in results]
    text += "\ncause named first for a detected 5 % regression at 30 steps (compute, the one that grew): "
    text += ", ".join(f"{lv[0]} {_rate(c)}" for lv, c in zip(LEVELS, named)) + "\n"
    print(text)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    (OUT.parent / f"gate-{time.strftime('%Y%m%d-%H%M%S')}.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
