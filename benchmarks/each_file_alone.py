"""Run every test file in a pytest process of its own and print a table: file, result, seconds.

    python benchmarks/each_file_alone.py                    # every tests/**/test_*.py
    python benchmarks/each_file_alone.py tests/job tests/e2e/test_fuzz.py   # some folders or files
    python benchmarks/each_file_alone.py --timeout 300 -- -p no:randomly   # pytest options after --

A test that passes only because another file ran first (a fixture, an import, a cache or a
file on disk left by another test) fails here. The normal suite cannot see that: it runs all
the files in one process. Each file runs as ``python -m pytest -q -x -p no:cacheprovider FILE``
with this interpreter and the environment as given (set ``PYTHONPATH`` to the checkout and
``GPUPROF_SHARED_TRACES`` as for the suite). Exit code 5 (nothing collected) counts as
passed for the one file that holds only CUDA tests, ``tests/record/test_hooks_cuda.py``,
when no GPU is present.

Exits 1 when a file fails, else 0. The table also goes to ``benchmarks/out/each_file_alone.tsv``
(seconds are wall time on this machine: compare runs on the same one).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
OUT = ROOT / "benchmarks" / "out"
# Files made only of tests that need a GPU: with none, pytest collects nothing (exit 5).
GPU_ONLY = {"tests/record/test_hooks_cuda.py"}
NOTHING_COLLECTED = 5


@dataclass(frozen=True)
class Outcome:
    file: str
    exit_code: int | None  # None: killed at the timeout
    seconds: float
    summary: str  # pytest's last line ("12 passed in 3.1s")

    @property
    def passed(self) -> bool:
        return self.exit_code == 0 or (self.exit_code == NOTHING_COLLECTED and self.file in GPU_ONLY)


def _files(given: list[str]) -> list[Path]:
    if not given:
        return sorted(TESTS.rglob("test_*.py"))
    out: list[Path] = []
    for g in given:
        p = Path(g).resolve()
        out += sorted(p.rglob("test_*.py")) if p.is_dir() else [p]
    return out


def run_one(path: Path, timeout_s: float, extra: list[str]) -> Outcome:
    name = path.relative_to(ROOT).as_posix()
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *extra, name]
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return Outcome(name, None, time.perf_counter() - start, f"killed after {timeout_s:.0f} s")
    seconds = time.perf_counter() - start
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    return Outcome(name, proc.returncode, seconds, lines[-1].strip("= ") if lines else "")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    extra: list[str] = []
    if "--" in args:
        cut = args.index("--")
        args, extra = args[:cut], args[cut + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", help="test files or folders (default: every test file)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds a file may take (default 600)")
    opts = parser.parse_args(args)

    files = _files(opts.paths)
    width = max(len(p.relative_to(ROOT).as_posix()) for p in files)
    outcomes: list[Outcome] = []
    print(f"{'file':<{width}}  {'result':<6}  {'seconds':>7}  pytest says")
    for path in files:
        o = run_one(path, opts.timeout, extra)
        outcomes.append(o)
        result = "pass" if o.passed else "FAIL"
        print(f"{o.file:<{width}}  {result:<6}  {o.seconds:7.1f}  {o.summary}", flush=True)

    failed = [o for o in outcomes if not o.passed]
    total_s = sum(o.seconds for o in outcomes)
    print(f"\n{len(outcomes)} files, {len(outcomes) - len(failed)} pass alone, {len(failed)} fail; {total_s:.0f} s in all")
    for o in failed:
        print(f"  FAIL {o.file} (exit {o.exit_code}): {o.summary}")
    OUT.mkdir(parents=True, exist_ok=True)
    rows = [f"{o.file}\t{'pass' if o.passed else 'FAIL'}\t{o.exit_code}\t{o.seconds:.1f}\t{o.summary}" for o in outcomes]
    (OUT / "each_file_alone.tsv").write_text("file\tresult\texit\tseconds\tsummary\n" + "\n".join(rows) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
