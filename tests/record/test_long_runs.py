"""Long jobs, live, end to end on CPUs: `gpuprof run` on a training script whose step time
changes mid-run, with one process and with two gloo ranks under torchrun; windows on demand
(`gpuprof trigger`), on a schedule with --keep, and a run killed inside a window.

Each test is one short real run (tiny model, a few seconds of steps); all are marked slow.
The stated bounds under test: a change is declared at most 8 steps after it starts
(gpuprof/record/changepoint.py), and its window starts within about 2.5 s of steps after
that, plus the warm-up and one step (gpuprof/record/windowplan.py; 3.5 s here for a loaded
machine).
"""

from __future__ import annotations

import gzip
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.slow,
              pytest.mark.skipif(os.name != "posix", reason="process groups and signals are POSIX")]

SCRIPT = Path(__file__).resolve().parents[1] / "data" / "shifting_train.py"
GPUPROF = [sys.executable, "-m", "gpuprof"]
DETECT_STEPS = 8
WARMUP = 2
# torch 2.13 on CPUs: a gloo process that ran torch.profiler (gpuprof's first window is
# enough) aborts now and then at interpreter exit, after the job finished, with this line
# (about 1 run in 10 of the two-rank job here; never seen without a profiler). Not gpuprof's
# to fix; the test accepts it only after the job said it was done.
EXIT_ABORT = "terminate called without an active exception"


def torchrun() -> list[str]:
    exe = shutil.which("torchrun") or str(Path(sys.executable).with_name("torchrun"))
    if not Path(exe).exists():
        pytest.skip("torchrun is not installed")
    return [exe, "--nproc-per-node", "2", "--master-port", str(29500 + os.getpid() % 1000)]


def run(session: Path, job: list[str], *opts: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUPROF, "run", "--no-report", "--session-dir", str(session), *opts, "--", *job],
                          capture_output=True, text=True, timeout=timeout, check=False)


def analyze(session: Path) -> dict[str, Any]:
    p = subprocess.run([*GPUPROF, "analyze", str(session), "-f", "json"], capture_output=True, text=True, timeout=240,
                       check=False)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert isinstance(doc, dict)
    return doc


def requests(session: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((session / "windows").glob("[0-9]*/request.json"))]


def hook_records(session: Path, kind: str) -> list[dict[str, Any]]:
    out = []
    for f in (session / "hooks").glob("*.jsonl"):
        for line in f.read_text().splitlines():
            if f'"kind": "{kind}"' in line or f'"kind":"{kind}"' in line:
                out.append(json.loads(line))
    return out


def profiler_steps(trace: Path) -> list[str]:
    with gzip.open(trace, "rt") as fh:
        doc = json.load(fh)
    return sorted({e["name"] for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")})


def assert_triggered_in_time(req: dict[str, Any], change_at: int, slow_step_s: float) -> None:
    """Declared at most DETECT_STEPS after the change (a loaded machine's noise may tip it a
    step or two early), and recording the new level within the stated lead after that."""
    c = req["change"]
    assert req["reason"] == "change" and c["detected_step"] <= change_at + DETECT_STEPS, req
    lead = DETECT_STEPS + WARMUP + 1 + math.ceil(3.5 / slow_step_s)
    assert change_at <= req["start_step"] <= change_at + lead, req


def test_a_slower_dataloader_triggers_a_window_and_analyze_names_it(tmp_path: Path) -> None:
    s = tmp_path / "s"
    # Steps of 40 ms, then 110 ms: long enough that a loaded machine's jitter stays small beside them.
    # The job goes on past step 100 until the window's diagnosis is written (a low-priority
    # process, slow on a busy machine): the test is of the diagnosis made while the job runs.
    diagnosis = s / "windows" / "0001" / "diagnosis.json"
    p = run(s, [sys.executable, str(SCRIPT), "--steps", "100", "--step-ms", "40", "--change-at", "45",
                "--slow-data-ms", "70", "--until-path", str(diagnosis), "--max-steps", "1500"], "--trigger-gap", "0")
    assert p.returncode == 0, p.stderr[-3000:]
    done = p.stdout.strip()  # the job's own output, unchanged: "done STEPS"
    assert done.startswith("done ") and int(done.split()[1]) >= 100, done
    steps = int(done.split()[1])
    [req] = requests(s)
    assert_triggered_in_time(req, 45, 0.11)
    # Diagnosed while the job ran (no terminal: a line on stderr), in the window's folder.
    assert f"gpuprof: window 1 (steps {req['start_step']}-{req['start_step'] + 2}" in p.stderr
    diag = json.loads((s / "windows" / "0001" / "diagnosis.json").read_text())
    assert diag["ok"] and diag["top"][0]["cause"] == "dataloader"
    doc = analyze(s)
    [change] = doc["changes"]
    assert 44 <= change["step"] <= 46 and change["window_before"] == 0 and change["window_after"] == 1
    top = change["causes"][0]
    assert top["cause"] == "dataloader" and 50_000 <= top["delta_us_per_step"] <= 95_000
    assert change["text"].startswith(f"from step {change['step']} the step rose ") and "dataloader +" in change["text"]
    assert [w["status"] for w in doc["windows"]] == ["recorded", "recorded"]
    assert doc["step_clock"]["steps"] == steps - 1 and doc["phases"]["source"] == "steps"
    text = subprocess.run([*GPUPROF, "analyze", str(s)], capture_output=True, text=True, timeout=240, check=True).stdout
    assert change["text"] in text and "Over the run" in text


def test_two_ranks_trigger_records_the_same_steps_and_a_slow_rank_is_named(tmp_path: Path) -> None:
    """torchrun, 2 gloo ranks: `gpuprof trigger` asked for a window as soon as the run starts
    (answered once the first window is over and the hooks' log shows it, at most a second
    later), then rank 1 sleeps 100 ms a step from step 150."""
    s = tmp_path / "s"
    job = [*torchrun(), str(SCRIPT), "--ddp", "--steps", "210", "--step-ms", "30", "--change-at", "150",
           "--slow-rank", "1", "--sleep-ms", "100"]
    with subprocess.Popen([*GPUPROF, "run", "--no-report", "--trigger-gap", "0", "--session-dir", str(s), "--", *job],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        deadline = time.monotonic() + 60
        while not (s / "session.json").is_file() or '"windows"' not in (s / "session.json").read_text():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        trig = subprocess.run([*GPUPROF, "trigger", str(s), "--wait", "90"], capture_output=True, text=True, timeout=120,
                              check=False)
        out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0 or (EXIT_ABORT in err and out.strip() == "done 210"), err[-3000:]
    assert trig.returncode == 0, trig.stderr
    reqs = {r["window"]: r for r in requests(s)}
    demand = reqs[1]
    a, b = demand["start_step"], demand["start_step"] + demand["active"] - 1
    assert b < 140, "the demanded window came too late to leave the change its own window"
    assert trig.stdout == (f"window 1: every rank records optimizer steps {a}-{b} (asked for at step "
                           f"{demand['requested_at_step']}; asked for (gpuprof trigger or SIGRTMIN+1))\n")
    traces = [r for r in hook_records(s, "trace") if r.get("window") == 1]
    assert sorted(r["rank"] for r in traces) == [0, 1]
    assert all(r["window_steps"] == [a, b] for r in traces)  # both ranks recorded the same steps
    t0, t1 = (s / "windows" / "0001" / "traces" / f"rank{r}.pt.trace.json.gz" for r in (0, 1))
    assert profiler_steps(t0) == profiler_steps(t1) and len(profiler_steps(t0)) == 3
    doc = analyze(s)
    [change] = [c for c in doc["changes"] if abs(c["step"] - 150) <= 1]
    after = reqs[change["window_after"]]
    if after["reason"] == "change":
        assert_triggered_in_time(after, 150, 0.135)
    else:  # a loaded machine shifted the step time on its own just before: its window came first
        assert 150 <= after["start_step"] <= change["detected_step"] + WARMUP + 1 + math.ceil(3.5 / 0.135)
    assert change["causes"][0]["cause"] == "host" and change["causes"][0]["rank"] == 1
    assert "on rank 1, which rank 0 waits for (straggler)" in change["text"]
    slow = doc["step_clock"]["slowest_rank"]
    assert slow is not None and slow["rank"] == 1 and slow["excess_us"] > 50_000


def test_profile_every_keeps_the_disk_bounded(tmp_path: Path) -> None:
    s = tmp_path / "s"
    keep = 0
    # The job runs until the third window is asked for: by then the first two are recorded
    # and diagnosed (one window at a time), however long a diagnosis takes on a busy machine.
    p = run(s, [sys.executable, str(SCRIPT), "--steps", "260", "--step-ms", "20",
                "--until-path", str(s / "windows" / "0003"), "--max-steps", "3000"],
            "--profile-every", "25", "--keep", str(keep), "--no-trigger")
    assert p.returncode == 0, p.stderr[-3000:]
    reqs = requests(s)
    # Windows come every 25 steps, or as soon as the one before is diagnosed (a few seconds).
    assert len(reqs) >= 3 and all(r["reason"] == "every" for r in reqs)
    assert all(r["start_step"] % 25 == 0 or r["start_step"] > 25 for r in reqs)
    folders = sorted((s / "windows").glob("[0-9]*"))
    with_traces = [f for f in folders if any((f / "traces").glob("*.json.gz"))]
    diagnosed = [f for f in folders if (f / "diagnosis.json").is_file()]
    # The bound: K windows, the worst one, and at most one still waiting for its diagnosis
    # when the run ended (the first window, traces/, besides them).
    assert len(with_traces) <= keep + 2 and len(diagnosed) >= len(folders) - 1
    sizes = [sum(x.stat().st_size for x in (f / "traces").glob("*")) for f in with_traces]
    assert sum(sizes) <= (keep + 2) * max(sizes)
    doc = analyze(s)
    assert len(doc["windows"]) == len(folders) + 1
    pruned = [w for w in doc["windows"] if w["window"] and w["status"] == "recorded" and not w["traces_kept"]]
    assert pruned and all(w["diagnosis"]["ok"] for w in pruned)
    # The session keeps every window's report: pruning takes the traces only.
    assert all((s / "windows" / f"{w['window']:04d}" / "report.json").is_file() for w in pruned)


def test_a_run_killed_inside_a_window_keeps_every_finished_window(tmp_path: Path) -> None:
    s = tmp_path / "s"
    hold = tmp_path / "holding"
    job = [sys.executable, str(SCRIPT), "--steps", "400", "--step-ms", "20", "--hold-in-window", "3",
           "--hold-file", str(hold)]
    proc = subprocess.Popen([*GPUPROF, "run", "--no-report", "--profile-every", "20", "--no-trigger",
                             "--session-dir", str(s), "--", *job], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not hold.exists():  # the job stopped inside window 2 (its third profiler)
            assert time.monotonic() < deadline and proc.poll() is None, "the job never reached window 2"
            time.sleep(0.05)
        job_pid = json.loads((s / "session.json").read_text())["pid"]
    finally:
        for pgid in (proc.pid, locals().get("job_pid")):
            if pgid:
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        proc.wait(timeout=30)
    assert json.loads((s / "session.json").read_text())["status"] == "running"  # killed, never closed
    doc = analyze(s)
    ws = {w["window"]: w for w in doc["windows"]}
    assert ws[0]["status"] == "recorded" and ws[1]["status"] == "recorded" and ws[1]["traces_kept"]
    assert ws[1]["diagnosis"]["ok"]  # made by the run, or by analyze now
    assert ws[2]["status"] == "unfinished" and not ws[2]["traces"]
    assert any("did not finish cleanly" in w for w in doc["warnings"])
