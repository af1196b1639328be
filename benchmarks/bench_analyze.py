"""gpuprof analyze vs HolisticTraceAnalysis: wall time and peak memory, same traces, one run.

    bash benchmarks/setup_hta.sh                # once: HTA in benchmarks/.venv-hta
    python benchmarks/bench_analyze.py          # real traces + generated 1/8/128-rank jobs
    python benchmarks/bench_analyze.py --big    # also the ~1 GB single-rank trace

Each case runs ``gpuprof analyze DIR --format json --jobs J`` and HTA's load plus full
analysis (``hta_run.py``) as separate subprocesses, measured from outside (``measure.py``):
wall time from start to exit (interpreter start and imports included, as a user waits for
them) and the peak memory of the whole process tree. The table gives the ratios against
HTA, the throughput in MB of uncompressed JSON per second per core used, the growth of
time and memory with the number of events, and whether each target of issue 7 is met.

Generated traces are made by ``gen_large.py`` under ``benchmarks/out/traces`` and reused
when present. Results are also written to ``benchmarks/out/bench-<time>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from measure import Measured, run_measured

MB = 1_000_000
HTA_PY = HERE / ".venv-hta" / "bin" / "python"
REAL = REPO.parent / "shared" / "traces"
OUT = HERE / "out"
# Targets of issue 7, on the 2-core reference machine.
SPEED_RATIO_TARGET = 10.0
MEMORY_RATIO_TARGET = 0.5
MBPS_PER_CORE_TARGET = 150.0
BUSY_LOAD = 0.5  # 1-min load average above which another job was competing for the cores


@dataclass
class Case:
    name: str
    path: Path
    ranks: int
    json_bytes: int
    events: int
    kind: str  # "real" or "generated"
    jobs: int = 1
    gpuprof: dict[str, Any] = field(default_factory=dict)
    hta: dict[str, Any] = field(default_factory=dict)


# -- inputs -------------------------------------------------------------------------------
def trace_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.endswith((".json", ".json.gz")))


_COUNT = """
import gzip, json, sys
size = events = 0
for name in sys.argv[1:]:
    opener = gzip.open if name.endswith(".gz") else open
    with opener(name, "rb") as fh:
        data = fh.read()
    size += len(data)
    doc = json.loads(data)
    events += len(doc.get("traceEvents", []) if isinstance(doc, dict) else doc)
print(size, events)
"""


def count_json(paths: list[Path]) -> tuple[int, int]:
    """(uncompressed bytes, events) of trace files, counted in a subprocess.

    Never in this process: a child's peak-RSS counter starts from its parent's high-water
    mark (it is inherited through fork and exec), so the benchmark must stay small itself.
    """
    out = subprocess.run(
        [sys.executable, "-c", _COUNT, *map(str, paths)], check=True, capture_output=True, text=True
    )
    size, events = out.stdout.split()
    return int(size), int(events)


def real_cases() -> list[Case]:
    if not REAL.is_dir():
        print(f"bench: real traces not found at {REAL}; skipping them", file=sys.stderr)
        return []
    cases = []
    for folder in sorted(p for p in REAL.iterdir() if p.is_dir()):
        files = trace_files(folder)
        if not files:
            continue
        size, events = count_json(files)
        cases.append(Case(f"real/{folder.name}", folder, len(files), size, events, "real"))
    return cases


def generated(name: str, ranks: int, mb_per_rank: float, jobs: int, layers: int | None = None) -> Case:
    """A generated job folder, made by gen_large.py unless an identical one is there.

    ``layers`` sets the work per step: the default makes ~2 steps per MB; real traces hold
    a handful of steps in tens of MB (HTA's cost grows with events x steps)."""
    folder = OUT / "traces" / name
    stamp = OUT / "traces" / f"{name}.gen.json"  # beside the folder: gpuprof would read it as a trace
    want = {"ranks": ranks, "mb_per_rank": mb_per_rank, "layers": layers, "generator": gen_version()}
    if stamp.is_file() and json.loads(stamp.read_text()).get("spec") == want:
        meta = json.loads(stamp.read_text())
    else:
        import gen_large

        folder.mkdir(parents=True, exist_ok=True)
        for old in trace_files(folder):
            old.unlink()
        t0 = time.perf_counter()
        shape = gen_large.Shape() if layers is None else gen_large.Shape(layers=layers)
        size = events = 0
        for r in range(ranks):
            _, ev, sz = gen_large.write_rank(
                folder / f"rank{r}.pt.trace.json", r, ranks, int(mb_per_rank * MB), 0, shape, False
            )
            size += sz
            events += ev
        meta = {"spec": want, "bytes": size, "events": events}
        stamp.write_text(json.dumps(meta))
        print(
            f"bench: generated {name} ({size / MB:.0f} MB) in {time.perf_counter() - t0:.1f} s",
            file=sys.stderr,
        )
    return Case(name, folder, ranks, int(meta["bytes"]), int(meta["events"]), "generated", jobs=jobs)


def gen_version() -> str:
    """Changes whenever gen_large.py changes, so stale generated traces are remade."""
    import hashlib

    return hashlib.sha256((HERE / "gen_large.py").read_bytes()).hexdigest()[:12]


# -- runs ---------------------------------------------------------------------------------
def _summary(m: Measured) -> dict[str, Any]:
    return {
        "wall_s": m.wall_s,
        "cpu_s": m.cpu_s,
        "peak_bytes": m.peak_bytes,
        "max_single_rss_bytes": m.max_single_rss_bytes,
        "peak_tree_bytes": m.peak_tree_bytes,
        "returncode": m.returncode,
        "load_before": m.load_before,
    }


def best_of(runs: list[Measured]) -> Measured:
    """The fastest run: on a shared machine, slower repeats measure the neighbours."""
    return min(runs, key=lambda m: m.wall_s)


def run_gpuprof(case: Case, repeat: int) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "gpuprof",
        "analyze",
        str(case.path),
        "--format",
        "json",
        "--jobs",
        str(case.jobs),
    ]
    runs = [run_measured(cmd, cwd=REPO) for _ in range(repeat)]
    m = best_of(runs)
    out = _summary(m)
    out["walls_s"] = [r.wall_s for r in runs]
    if m.returncode != 0:
        out["error"] = m.stderr.strip().splitlines()[-1] if m.stderr.strip() else f"exit {m.returncode}"
    return out


def run_hta(case: Case, repeat: int, timeout_s: float | None) -> dict[str, Any]:
    if not HTA_PY.is_file():
        return {"error": "HTA not installed: run benchmarks/setup_hta.sh"}
    cmd = [str(HTA_PY), str(HERE / "hta_run.py"), str(case.path)]
    runs = [run_measured(cmd, cwd=REPO, timeout_s=timeout_s) for _ in range(repeat)]
    m = best_of(runs)
    out = _summary(m)
    out["walls_s"] = [r.wall_s for r in runs]
    if m.timed_out:
        # Not an error: HTA was still working. Its time and memory so far are lower bounds,
        # so gpuprof's speed ratio is at least, and its memory ratio at most, what is shown.
        out["timed_out"] = True
        return out
    if m.returncode != 0:
        last = m.stderr.strip().splitlines()[-1] if m.stderr.strip() else f"exit {m.returncode}"
        out["error"] = last[:120]
        return out
    detail = json.loads(m.stdout.strip().splitlines()[-1])
    out.update(detail)
    if detail.get("failed"):
        out["error"] = "analysis failed: " + ", ".join(sorted(detail["failed"]))
    return out


# -- report -------------------------------------------------------------------------------
def cores(case: Case) -> int:
    return max(1, min(case.jobs, case.ranks, os.cpu_count() or 1))


def mbps_per_core(case: Case) -> float | None:
    wall = case.gpuprof.get("wall_s")
    if not wall or "error" in case.gpuprof:
        return None
    return case.json_bytes / MB / wall / cores(case)


def ratios(case: Case) -> tuple[float | None, float | None]:
    g, h = case.gpuprof, case.hta
    if "error" in g or "error" in h or not g.get("wall_s") or not h.get("wall_s"):
        return None, None
    return h["wall_s"] / g["wall_s"], g["peak_bytes"] / h["peak_bytes"]


def fmt(v: float | None, spec: str, na: str = "N/A") -> str:
    return na if v is None else format(v, spec)


def cpu_ratio(case: Case) -> float | None:
    g, h = case.gpuprof, case.hta
    if "error" in g or "error" in h or not g.get("cpu_s") or not h.get("cpu_s"):
        return None
    return float(h["cpu_s"] / g["cpu_s"])


def _mb(v: Any) -> float | None:
    return v / MB if v else None


def table(cases: list[Case]) -> str:
    head = (
        "| case | ranks | jobs | JSON MB | events | gpuprof s (CPU s) | gpuprof peak MB | HTA s (CPU s) "
        "| HTA peak MB | speed × HTA (CPU) | memory / HTA | gpuprof MB/s/core | load | note |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for c in cases:
        g, h = c.gpuprof, c.hta
        speed, mem = ratios(c)
        note = "; ".join(
            x
            for x in (
                f"gpuprof: {g['error']}" if "error" in g else "",
                f"HTA: {h['error']}" if "error" in h else "",
            )
            if x
        )
        load = max(g.get("load_before", 0.0), h.get("load_before", 0.0))
        lo = ">" if h.get("timed_out") else ""  # HTA stopped: its figures are lower bounds
        hi = "≤" if h.get("timed_out") else ""
        if h.get("timed_out"):
            note = (note + "; " if note else "") + f"HTA stopped after {h['wall_s']:.0f} s, still running"
        lines.append(
            f"| {c.name} | {c.ranks} | {c.jobs} | {c.json_bytes / MB:.1f} | {c.events:,} "
            f"| {fmt(g.get('wall_s'), '.2f')} ({fmt(g.get('cpu_s'), '.2f')}) | {fmt(_mb(g.get('peak_bytes')), '.0f')} "
            f"| {lo}{fmt(h.get('wall_s'), '.2f')} ({lo}{fmt(h.get('cpu_s'), '.2f')}) "
            f"| {lo}{fmt(_mb(h.get('peak_bytes')), '.0f')} "
            f"| {lo}{fmt(speed, '.1f')} ({lo}{fmt(cpu_ratio(c), '.1f')}) | {hi}{fmt(mem, '.2f')} "
            f"| {fmt(mbps_per_core(c), '.0f')} "
            f"| {load:.1f} | {note} |"
        )
    return "\n".join(lines)


def growth(cases: list[Case]) -> str:
    """Time and memory per million events along the single-rank size series."""
    series = sorted(
        (c for c in cases if c.kind == "generated" and c.ranks == 1 and "error" not in c.gpuprof),
        key=lambda c: c.events,
    )
    if len(series) < 2:
        return "(growth: needs at least two single-rank sizes)"
    lines = [
        "| case | events | gpuprof s | s per M events | peak MB | MB per M events | HTA s per M events | HTA MB per M events |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in series:
        me = c.events / 1e6
        h = c.hta
        hs = fmt(h["wall_s"] / me if "error" not in h and h.get("wall_s") else None, ".2f")
        hm = fmt(h["peak_bytes"] / MB / me if "error" not in h and h.get("peak_bytes") else None, ".0f")
        lines.append(
            f"| {c.name} | {c.events:,} | {c.gpuprof['wall_s']:.2f} | {c.gpuprof['wall_s'] / me:.2f} "
            f"| {c.gpuprof['peak_bytes'] / MB:.0f} | {c.gpuprof['peak_bytes'] / MB / me:.0f} | {hs} | {hm} |"
        )
    a, b = series[0], series[-1]
    k = b.events / a.events
    t = b.gpuprof["wall_s"] / a.gpuprof["wall_s"]
    m = b.gpuprof["peak_bytes"] / a.gpuprof["peak_bytes"]
    lines.append("")
    lines.append(
        f"{k:.1f}× the events: gpuprof time ×{t:.2f}, peak memory ×{m:.2f} "
        f"(linear would be ×{k:.1f}; less means a fixed start-up cost is amortized)."
    )
    return "\n".join(lines)


def _ratio_lines(label: str, group: list[Case]) -> list[str]:
    compared = [c for c in group if ratios(c)[0] is not None]
    if not compared:
        return []
    worst_speed = min(compared, key=lambda c: ratios(c)[0] or 0.0)
    worst_mem = max(compared, key=lambda c: ratios(c)[1] or 0.0)
    s, m = ratios(worst_speed)[0] or 0.0, ratios(worst_mem)[1] or 0.0
    speed_line = (
        f"- {label}: speed ≥ {SPEED_RATIO_TARGET:.0f}× HTA: {'MET' if s >= SPEED_RATIO_TARGET else 'MISSED'} "
        f"(worst {s:.1f}× on {worst_speed.name}, {len(compared)} cases compared)"
    )
    mem_line = (
        f"- {label}: peak memory ≤ {MEMORY_RATIO_TARGET:.1f}× HTA: {'MET' if m <= MEMORY_RATIO_TARGET else 'MISSED'} "
        f"(worst {m:.2f}× on {worst_mem.name})"
    )
    return [speed_line, mem_line]


def targets(cases: list[Case]) -> str:
    lines: list[str] = []
    gen = [c for c in cases if c.kind == "generated"]
    lines += _ratio_lines("generated, ≥ 100 MB", [c for c in gen if c.json_bytes >= 100 * MB])
    lines += _ratio_lines("generated, < 100 MB", [c for c in gen if c.json_bytes < 100 * MB])
    lines += _ratio_lines("real traces", [c for c in cases if c.kind == "real"])
    tiny = [c for c in cases if c.json_bytes < MB and "error" not in c.gpuprof and c.gpuprof.get("wall_s")]
    if tiny:
        g = min(c.gpuprof["wall_s"] for c in tiny)
        h = [c.hta["wall_s"] for c in tiny if "wall_s" in c.hta]
        lines.append(
            f"- fixed cost (traces under 1 MB): gpuprof {g:.2f} s"
            + (f", HTA {min(h):.2f} s" if h else "")
            + ": interpreter start and imports; on the real traces (≤ 35 MB) this floor, not the"
            " reading, bounds the speed ratio"
        )
    big = [c for c in cases if c.kind == "generated" and mbps_per_core(c) is not None]
    if big:
        worst = min(big, key=lambda c: mbps_per_core(c) or 0.0)
        best = max(big, key=lambda c: mbps_per_core(c) or 0.0)
        v = mbps_per_core(worst) or 0.0
        lines.append(
            f"- ≥ {MBPS_PER_CORE_TARGET:.0f} MB/s per core end to end (generated): "
            f"{'MET' if v >= MBPS_PER_CORE_TARGET else 'MISSED'} (worst {v:.0f} MB/s/core on {worst.name}, "
            f"best {mbps_per_core(best) or 0.0:.0f} on {best.name})"
        )
    multi = [c for c in cases if c.kind == "generated" and c.ranks > 1 and "error" not in c.gpuprof]
    if multi:
        parts = []
        for c in multi:
            per_rank = c.json_bytes / c.ranks / MB
            parts.append(
                f"{c.name}: {c.gpuprof['peak_bytes'] / MB:.0f} MB peak for {c.json_bytes / MB:.0f} MB "
                f"({per_rank:.0f} MB/rank, {c.jobs} jobs)"
            )
        lines.append("- memory bounded per rank: " + "; ".join(parts))
    loaded = [
        c.name for c in cases if max(c.gpuprof.get("load_before", 0), c.hta.get("load_before", 0)) > BUSY_LOAD
    ]
    if loaded:
        lines.append(
            f"- note: other work was running (1-min load > {BUSY_LOAD}) when these started: {', '.join(loaded)}"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="gpuprof analyze vs HolisticTraceAnalysis: time and memory")
    p.add_argument("--sizes", default="50,100,200", help="single-rank sizes in MB for the growth series")
    p.add_argument("--big", action="store_true", help="also the ~1 GB single-rank trace")
    p.add_argument("--ranks8-mb", type=float, default=50.0, help="MB per rank of the 8-rank job")
    p.add_argument("--ranks128-mb", type=float, default=4.0, help="MB per rank of the 128-rank job")
    p.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1, help="gpuprof --jobs for multi-rank cases"
    )
    p.add_argument("--repeat", type=int, default=1, help="runs per measurement (the fastest is kept)")
    p.add_argument("--no-hta", action="store_true", help="measure gpuprof only")
    p.add_argument(
        "--hta-timeout",
        type=float,
        default=900.0,
        help="seconds after which an HTA run is stopped and its figures shown as bounds (0: never)",
    )
    p.add_argument("--no-compile", action="store_true", help="do not compile gpuprof's bytecode first")
    p.add_argument("--no-real", action="store_true", help="skip the real traces")
    p.add_argument("--no-generated", action="store_true", help="skip the generated traces")
    p.add_argument("--only", default="", help="run only cases whose name contains this text")
    p.add_argument(
        "--report", type=Path, help="print the table of a saved bench-<time>.json again; run nothing"
    )
    return p.parse_args(argv)


def load_saved(path: Path) -> list[Case]:
    cases = []
    for d in json.loads(path.read_text()):
        d = dict(d)
        d["path"] = Path(d["path"])
        cases.append(Case(**d))
    return cases


def render(cases: list[Case], stamp: str) -> str:
    title = (
        f"gpuprof analyze vs HolisticTraceAnalysis on {os.cpu_count()} cores ({stamp}); "
        "times are wall seconds from process start to exit, memory the peak of the process tree."
    )
    return "\n\n".join(
        (
            title,
            table(cases),
            "Growth with the number of events (single rank):",
            growth(cases),
            "Targets:",
            targets(cases),
        )
    )


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.report:
        print(render(load_saved(a.report), a.report.stem.removeprefix("bench-")))
        return 0
    if not a.no_compile:
        # Bytecode as a wheel install writes it: under PYTHONDONTWRITEBYTECODE (or in a
        # checkout where it is stale) every run would compile gpuprof's changed modules
        # again, 30-60 ms of each small case (bench_startup.py does the same).
        import compileall

        compileall.compile_dir(str(REPO / "gpuprof"), quiet=1)
    cases: list[Case] = []
    if not a.no_real:
        cases += real_cases()
    if not a.no_generated:
        sizes = [float(s) for s in a.sizes.split(",") if s.strip()]
        if a.big:
            sizes.append(1000.0)
        for s in sizes:
            cases.append(generated(f"gen-1r-{s:g}MB", 1, s, 1))
        cases.append(generated(f"gen-8r-{a.ranks8_mb:g}MB", 8, a.ranks8_mb, a.jobs))
        cases.append(generated(f"gen-8r-{a.ranks128_mb:g}MB", 8, a.ranks128_mb, a.jobs))
        cases.append(generated(f"gen-128r-{a.ranks128_mb:g}MB", 128, a.ranks128_mb, a.jobs))
        # Like the real traces: a handful of steps per rank (~5 steps in 50 MB).
        cases.append(generated("gen-1r-50MB-5steps", 1, 50, 1, layers=960))
        # Issue 22's cases: a 200 MB rank of 10 steps (the marginal throughput of reading
        # plus analysis), and a 60 MB job of two ranks holding a few steps each.
        cases.append(generated("gen-1r-200MB-10steps", 1, 200, 1, layers=1920))
        cases.append(generated("gen-2r-30MB-3steps", 2, 30, a.jobs, layers=960))
    if a.only:
        cases = [c for c in cases if a.only in c.name]
    for c in cases:
        if c.kind == "real":
            c.jobs = max(1, min(c.ranks, a.jobs))
        print(f"bench: {c.name}: gpuprof ...", file=sys.stderr, flush=True)
        c.gpuprof = run_gpuprof(c, a.repeat)
        if not a.no_hta:
            print(f"bench: {c.name}: HTA ...", file=sys.stderr, flush=True)
            c.hta = run_hta(c, a.repeat, a.hta_timeout or None)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    text = render(cases, stamp)
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    text += (
        f"\n- the benchmark process itself peaked at {own:.0f} MB (children's peak-RSS counters "
        "start from it, so peaks below it are not measurable)"
    )
    print(text)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"bench-{stamp}.json").write_text(
        json.dumps(
            [{**{k: v for k, v in asdict(c).items() if k != "path"}, "path": str(c.path)} for c in cases],
            indent=1,
        )
    )
    (OUT / f"bench-{stamp}.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
