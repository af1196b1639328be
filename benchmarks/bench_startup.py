"""The fixed cost of a gpuprof command: what a user waits for before any trace is read.

    python benchmarks/bench_startup.py [--repeat 10] [--mb 1]

Runs each command ``--repeat`` times as a fresh process and prints the fastest and the
median wall time and CPU time (user + system, which the neighbours on a shared machine do
not inflate), beside the same for the interpreter alone and for importing numpy and
pandas. The analyzed trace is a generated one-rank trace of ``--mb`` MB (``gen_large.py``,
kept in ``benchmarks/out/traces``). Then ``python -X importtime`` of the analyze command,
summed by top-level package: where the start-up goes.

Bytecode: the package's modules are compiled first (``compileall``), as a wheel install
does; run with ``--no-compile`` to see the cost of an install that never wrote any (an
editable install under ``PYTHONDONTWRITEBYTECODE``).
"""

from __future__ import annotations

import argparse
import compileall
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))


def run_once(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def measure(label: str, cmd: list[str], repeat: int) -> dict[str, float]:
    walls, cpus = [], []
    for _ in range(repeat):
        w, c = run_once(cmd)
        walls.append(w)
        cpus.append(c)
    row = {
        "wall_min": min(walls),
        "wall_median": statistics.median(walls),
        "cpu_min": min(cpus),
        "cpu_median": statistics.median(cpus),
    }
    print(
        f"{label:44s} wall {row['wall_min']:.3f} / {row['wall_median']:.3f} s   "
        f"CPU {row['cpu_min']:.3f} / {row['cpu_median']:.3f} s",
        flush=True,
    )
    return row


def one_mb_trace(mb: float) -> Path:
    import gen_large

    folder = HERE / "out" / "traces" / f"gen-1r-{mb:g}MB-startup"
    path = folder / "rank0.pt.trace.json"
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        gen_large.write_rank(path, 0, 1, int(mb * 1_000_000), 0, gen_large.Shape(), False)
    return path


def import_breakdown(cmd: list[str]) -> None:
    """Self import time summed by top-level package, largest first."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", *cmd[1:]], capture_output=True, text=True, cwd=REPO
    )
    by_pkg: dict[str, float] = defaultdict(float)
    for line in out.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+\d+ \|\s+(\S+)", line)
        if m:
            by_pkg[m.group(2).split(".")[0]] += int(m.group(1)) / 1e6
    total = sum(by_pkg.values())
    print(f"\nimports of the analyze command (self time, one run): {total:.3f} s")
    for pkg, s in sorted(by_pkg.items(), key=lambda kv: -kv[1])[:14]:
        print(f"  {pkg:24s} {s:.3f} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--mb", type=float, default=1.0, help="size of the analyzed trace [1]")
    ap.add_argument("--no-compile", action="store_true", help="do not compile the package's bytecode first")
    args = ap.parse_args()
    if not args.no_compile:
        compileall.compile_dir(str(REPO / "gpuprof"), quiet=1)
    trace = one_mb_trace(args.mb)
    out = Path(tempfile.mkdtemp()) / "report.json"
    py = sys.executable
    print(f"load average {os.getloadavg()[0]:.1f} (1 min); fastest / median of {args.repeat} runs")
    measure("python -c pass", [py, "-c", "pass"], args.repeat)
    measure("python -c 'import numpy'", [py, "-c", "import numpy"], args.repeat)
    measure("python -c 'import pandas'", [py, "-c", "import pandas"], args.repeat)
    measure("gpuprof --version", [py, "-m", "gpuprof", "--version"], args.repeat)
    analyze = [py, "-m", "gpuprof", "analyze", str(trace), "--format", "json", "-o", str(out)]
    measure(f"gpuprof analyze ({args.mb:g} MB, 1 rank) --format json", analyze, args.repeat)
    print(f"load average {os.getloadavg()[0]:.1f} (1 min) at the end")
    import_breakdown(analyze)
    return 0


if __name__ == "__main__":
    sys.exit(main())
