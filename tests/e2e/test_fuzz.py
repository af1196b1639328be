"""Seeded fuzzing of the readers and the analysis through the command line (see fuzzing.py).

Bounded for CI: ``GPUPROF_FUZZ_CASES`` cases (default 80) or ``GPUPROF_FUZZ_SECONDS`` of
wall time (default 60), whichever ends first; the cases are the same on every run. Each
attack class beyond damaged traces (fuzzing.KINDS) also gets ``GPUPROF_FUZZ_KIND_CASES``
cases of its own (default 5). The long campaign behind docs/reliability.md is
``python tests/fuzzing.py --cases 3000``.
"""

from __future__ import annotations

import os
import sys

import fuzzing
import fuzzing_round3
import pytest


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


@pytest.mark.parametrize("kind", [k for k in fuzzing.KINDS if k != "trace"])
def test_each_attack_class_holds_the_contract(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 20's classes, a few seeded cases each whatever the draws above give: closed,
    full and broken streams; outputs onto inputs; damaged, swollen and hostile saved
    reports; session files of the wrong types; control characters in names and strings."""
    cases = int(os.environ.get("GPUPROF_FUZZ_KIND_CASES", "5"))
    seed = int(os.environ.get("GPUPROF_FUZZ_SEED", "20261"))
    monkeypatch.setattr(fuzzing, "KINDS", {kind: 1})
    figures = fuzzing.campaign(seed, range(cases), timeout_s=30.0)
    assert figures.kinds[kind] == cases
    lines = [
        f"{o.case.describe()}\n  -> {o.problem}; rerun: python tests/fuzzing.py --kinds {kind} --seed {seed} --only {o.case.index} --keep /tmp/fuzz"
        for o in figures.failures
    ]
    assert not lines, f"{len(lines)} of {figures.cases} {kind} cases broke the contract:\n" + "\n".join(lines)


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/PID/status")
def test_signal_dispositions_hold_the_rule(tmp_path: object) -> None:
    """Issue 33: ``gpuprof run`` started with random signals ignored and sent one; the job
    sees the same ones ignored, outlives an ignored one and dies of another."""
    from pathlib import Path

    cases = int(os.environ.get("GPUPROF_FUZZ_KIND_CASES", "5"))
    seed = int(os.environ.get("GPUPROF_FUZZ_SEED", "20261"))
    problems = []
    for i in range(min(cases, 3)):
        work = Path(str(tmp_path)) / str(i)
        work.mkdir()
        problem = fuzzing_round3.disposition_case(seed, i, work)
        if problem:
            problems.append(f"case {i}: {problem}")
    assert not problems, "\n".join(problems)


def test_scheduler_addresses_hold_the_rule() -> None:
    """Issue 33: malformed addresses and servers on 127.0.0.1 that are no Dask scheduler."""
    cases = int(os.environ.get("GPUPROF_FUZZ_KIND_CASES", "5"))
    seed = int(os.environ.get("GPUPROF_FUZZ_SEED", "20261"))
    problems = [p for i in range(cases * 2) if (p := fuzzing_round3.dask_address_case(seed, i))]
    assert not problems, "\n".join(problems)
