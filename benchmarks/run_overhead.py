"""Overhead of ``gpuprof run`` on a CPU training loop (a benchmark, not a test).

Runs ``tests/data/tiny_train.py`` once plainly and once under ``gpuprof run`` (hooks on,
NVML sampling as available), and compares steps per second measured by the script itself
from step ``--from-step`` on, i.e. after the profiler's active window (steps 1-11 with the
default schedule) -- the steady state a long training job spends its time in. Also times
the optimizer-step hook alone, in-process.

    python benchmarks/run_overhead.py [--steps 4000] [--hidden 256] [--from-step 500] [--repeats 1]

The figure is one run of each. On shared CPUs the wall-clock rate swings by tens of percent
between identical runs, far more than the effect measured; the rate per CPU second of the
training process (what an in-process hook costs) is much steadier, and the hook is also
timed alone.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "data" / "tiny_train.py"
HOOKS = ROOT / "gpuprof" / "record" / "hooks"


def rates(cmd: list[str]) -> tuple[float, float]:
    """(steps per wall second, steps per CPU second of the training process)."""
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    wall = re.search(r"^steps_per_s=([0-9.]+)", p.stdout, re.M)
    cpu = re.search(r"^cpu_steps_per_s=([0-9.]+)", p.stdout, re.M)
    if not wall or not cpu:
        raise SystemExit(f"no rate in output of {cmd}: {p.stdout!r} {p.stderr[-500:]!r}")
    return float(wall.group(1)), float(cpu.group(1))


class _Cuda:
    @staticmethod
    def is_available() -> bool:
        return False

    @staticmethod
    def is_initialized() -> bool:
        return False


class _Autograd:
    @staticmethod
    def backward(*a: object, **k: object) -> None:
        return None


class FakeTorch:
    """What the step hook and the backward mark touch of torch, on a machine without CUDA."""

    def __init__(self) -> None:
        self.cuda = _Cuda()
        self.autograd = _Autograd()


def hook_cost_us(calls: int = 200_000, windows_polled: bool = False) -> float:
    """Microseconds per optimizer-step hook call outside the profiler window (with
    ``windows_polled``, as under ``--profile-every``: the hook also looks for window requests)."""
    sys.path.insert(0, str(HOOKS))
    import gpuprof_torch_hooks as gh  # noqa: E402  (the injected module, imported like the child does)

    os.environ["GPUPROF_WINDOWS"] = "1" if windows_polled else "0"
    try:
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "windows"))
            h = gh._Hooks(d, (0, 0, 0))  # active=0: no profiler, as outside the window
            h.torch = FakeTorch()
            h._open_log()
            opt = object()
            for _ in range(10):
                h.post_step(opt, (), {})
            t0 = time.perf_counter()
            for _ in range(calls):
                h.post_step(opt, (), {})
            dt = time.perf_counter() - t0
            h.log.close()
    finally:
        os.environ.pop("GPUPROF_WINDOWS", None)
    return dt / calls * 1e6


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--from-step", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=1, help="plain / gpuprof pairs, alternated (default 1)")
    args = ap.parse_args()
    script = [str(TINY), "--steps", str(args.steps), "--hidden", str(args.hidden), "--report-rate", str(args.from_step)]
    pairs = []
    for _ in range(args.repeats):  # alternate, so slow drifts in machine load hit both sides
        plain, plain_cpu = rates([sys.executable, *script])
        with tempfile.TemporaryDirectory() as d:
            under, under_cpu = rates([sys.executable, "-m", "gpuprof", "run", "--no-report", "--out",
                                      os.path.join(d, "s"), "--", sys.executable, *script])
        pairs.append((plain, plain_cpu, under, under_cpu))
    cost = hook_cost_us()
    print(f"load average:    {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    for plain, plain_cpu, under, under_cpu in pairs:
        print(f"plain:           {plain:10.1f} steps/s wall, {plain_cpu:10.1f} steps/CPU-s "
              f"({1e3 / plain_cpu:.3f} ms CPU/step)")
        print(f"gpuprof run:     {under:10.1f} steps/s wall, {under_cpu:10.1f} steps/CPU-s")
        print(f"ratio (wall):    {under / plain:10.4f}  (slowdown {100 * (1 - under / plain):+.2f} %)")
        print(f"ratio (CPU):     {under_cpu / plain_cpu:10.4f}  (slowdown {100 * (1 - under_cpu / plain_cpu):+.2f} %)")
    if len(pairs) > 1:
        wall = statistics.median(u / p for p, _, u, _ in pairs)
        cpu = statistics.median(uc / pc for _, pc, _, uc in pairs)
        print(f"median ratio:    wall {wall:.4f}, CPU {cpu:.4f} over {len(pairs)} pairs")
    plain_cpu = statistics.median(pc for _, pc, _, _ in pairs)
    print(f"hook alone:      {cost:10.2f} us per optimizer step ({100 * cost / (1e6 / plain_cpu):.3f} % of a step)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
