"""Seeded fuzzing of the readers and the analysis through the command line (see fuzzing.py).

Bounded for CI: ``GPUPROF_FUZZ_CASES`` cases (default 80) or ``GPUPROF_FUZZ_SECONDS`` of
wall time (default 60), whichever ends first; the cases are the same on every run. The long
campaign behind docs/reliability.md is ``python tests/fuzzing.py --cases 3000``.
"""

from __future__ import annotations

import os
import sys

import fuzzing


def test_mutated_traces_exit_0_with_a_valid_report_or_2_with_one_line() -> None:
    cases = int(os.environ.get("GPUPROF_FUZZ_CASES", "80"))
    budget_s = float(os.environ.get("GPUPROF_FUZZ_SECONDS", "60"))
    seed = int(os.environ.get("GPUPROF_FUZZ_SEED", "20261"))
    figures = fuzzing.campaign(seed, range(cases), timeout_s=30.0, budget_s=budget_s)
    print(
        f"fuzz: {figures.cases} cases in {figures.elapsed_s:.0f} s, exit codes {dict(figures.exit_codes)}, "
        f"peak case memory {figures.max_rss_kb // 1024} MiB",
        file=sys.stderr,
    )
    assert figures.cases >= min(cases, 10), "the time budget ran out before 10 cases: is the machine overloaded?"
    assert figures.exit_codes["0"] and figures.exit_codes["2"], "mutations should give both readable and unreadable inputs"
    lines = [
        f"{o.case.describe()}\n  -> {o.problem}; rerun: python tests/fuzzing.py --seed {seed} --only {o.case.index} --keep /tmp/fuzz\n"
        f"  {(o.traceback or o.stderr).strip().splitlines()[-1] if (o.traceback or o.stderr).strip() else ''}"
        for o in figures.failures
    ]
    assert not lines, f"{len(lines)} of {figures.cases} cases broke the contract:\n" + "\n".join(lines)
