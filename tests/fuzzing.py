"""Seeded mutations of real and sample traces, run through the gpuprof command line.

The contract under test: whatever the input, gpuprof exits 0 (and then writes a report
whose partition holds) or 2 with exactly one line on stderr; never a traceback, another
exit code, a hang or a crash. ``tests/test_fuzz.py`` runs a bounded set in CI; a longer
campaign runs from the command line and prints its figures::

    python tests/fuzzing.py --cases 3000 --seed 11 --keep /tmp/fuzz-failures

Case ``i`` of seed ``s`` is a pure function of ``(s, i)`` and the source traces: a failure
is reproduced with ``python tests/fuzzing.py --seed s --only i --keep DIR`` (which writes the
input to DIR and prints the command and its output).

Each case runs in a forked child of this process (gpuprof is imported once, before the
fork): a hang is stopped at the per-case limit (CPU time, or ten times as long blocked), a
crash cannot take the harness down, and the child's peak memory (``ru_maxrss``, which
includes the harness it was forked from) and CPU time are measured by the kernel.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import math
import os
import random
import re
import resource
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import msgspec
from clirun import CliResult, run_cli

ROOT = HERE.parent
SAMPLES = ROOT / "sample_traces"
SHARED = ROOT.parent / "shared" / "traces"

# Events kept per trace in a case: mutations act on a trace small enough to analyze in a
# fraction of a second. 0 keeps every event (the long campaign uses some full traces).
DEFAULT_MAX_EVENTS = 3000


# --- sources -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """A job to mutate: one or more trace files read together (a folder)."""

    name: str
    files: tuple[Path, ...]


def sources(shared: Path | None = SHARED) -> list[Source]:
    """Every sample job, and every shared real job when that folder is there."""
    out: list[Source] = []
    roots = [SAMPLES] + ([shared] if shared is not None and shared.is_dir() else [])
    for root in roots:
        for folder in sorted(p for p in root.iterdir() if p.is_dir() and p.name != "LICENSES"):
            files = tuple(sorted(f for f in folder.iterdir() if f.name.endswith((".json", ".json.gz")) and f.name != "ground_truth.json"))
            if files:
                out.append(Source(f"{root.name}/{folder.name}", files))
    return out


def _load(path: Path, max_events: int) -> Any:
    """The trace as Python objects, cut to ``max_events`` events (0: all) before decoding them.

    Metadata events and a contiguous run of the others from a third of the way in are kept
    (a run keeps launches next to their kernels and steps whole). Events are decoded only
    once chosen: building Python objects for 80,000 events would cost more than the case.
    """
    raw = path.read_bytes()
    data = gzip.decompress(raw) if path.name.endswith(".gz") else raw
    if not max_events:
        return msgspec.json.decode(data)
    is_list = data.lstrip()[:1] == b"["
    top: Any = None if is_list else msgspec.json.decode(data, type=dict[str, msgspec.Raw])
    listed = data if is_list else top.get("traceEvents")
    events = msgspec.json.decode(listed, type=list[msgspec.Raw]) if listed is not None else []
    if len(events) > max_events:
        meta = [e for e in events if b'"M"' in bytes(e)[:400] and b'"ph"' in bytes(e)]
        start = len(events) // 3
        events = meta + events[start : start + max_events]
    decoded = [msgspec.json.decode(e) for e in events]
    if is_list:
        return decoded
    doc = {k: msgspec.json.decode(v) for k, v in top.items() if k != "traceEvents"}
    if listed is not None:
        doc["traceEvents"] = decoded
    return doc


def _events(doc: Any) -> list[Any] | None:
    if isinstance(doc, list):
        return doc
    if isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        return doc["traceEvents"]
    return None


# --- mutations ---------------------------------------------------------------------------

WEIRD_VALUES: list[Callable[[random.Random], Any]] = [
    lambda r: None,
    lambda r: "",
    lambda r: "abc",
    lambda r: "²",
    lambda r: "NaN",
    lambda r: "1e3",
    lambda r: True,
    lambda r: -1,
    lambda r: 0,
    lambda r: -r.randint(1, 10**9),
    lambda r: 2**80,
    lambda r: -(2**63) - 1,
    lambda r: 1e308,
    lambda r: -1e308,
    lambda r: 3.5,
    lambda r: r.random() * 1e12,
    lambda r: [],
    lambda r: [1, "x", None],
    lambda r: {},
    lambda r: {"a": {"b": [1, 2]}},
    lambda r: "x" * r.choice([1, 100, 20_000]),
    lambda r: "9" * r.choice([20, 400, 5000]),
    lambda r: "<script>alert(1)</script>",
    lambda r: "\u0000\ud800",
    lambda r: _nested(r.choice([50, 500])),
]


def _nested(depth: int) -> Any:
    v: Any = 1
    for _ in range(depth):
        v = [v]
    return v


def _dicts(doc: Any) -> list[dict[str, Any]]:
    """Candidate objects to mutate: events, their args, and the top level."""
    events = _events(doc) or []
    out: list[dict[str, Any]] = [e for e in events if isinstance(e, dict)]
    out += [e["args"] for e in out if isinstance(e.get("args"), dict)]
    if isinstance(doc, dict):
        out.append(doc)
        for v in doc.values():
            if isinstance(v, dict):
                out.append(v)
            elif isinstance(v, list):
                out += [x for x in v[:50] if isinstance(x, dict)]
    return out


def _pick_key(r: random.Random, d: dict[str, Any]) -> str | None:
    if not d:
        return None
    keys = list(d)
    # The fields readers rely on are chosen more often than chance.
    hot = [k for k in keys if k in ("ts", "dur", "ph", "pid", "tid", "name", "cat", "args", "rank", "traceEvents", "id", "correlation", "External id", "stream", "device")]
    return r.choice(hot) if hot and r.random() < 0.6 else r.choice(keys)


def m_delete(r: random.Random, doc: Any) -> str:
    targets = _dicts(doc)
    if not targets:
        return "delete: nothing"
    d = r.choice(targets)
    k = _pick_key(r, d)
    if k is None:
        return "delete: empty object"
    del d[k]
    return f"delete {k!r}"


def m_retype(r: random.Random, doc: Any) -> str:
    targets = _dicts(doc)
    if not targets:
        return "retype: nothing"
    d = r.choice(targets)
    k = _pick_key(r, d)
    if k is None:
        return "retype: empty object"
    maker = r.choice(WEIRD_VALUES)
    d[k] = maker(r)
    return f"retype {k!r} to {type(d[k]).__name__}"


def m_retype_many(r: random.Random, doc: Any) -> str:
    """The same field made weird in many events (a trace-wide problem, not one event)."""
    events = [e for e in (_events(doc) or []) if isinstance(e, dict)]
    if not events:
        return "retype-many: nothing"
    k = r.choice(["ts", "dur", "pid", "tid", "ph", "name", "cat", "args"])
    maker = r.choice(WEIRD_VALUES)
    share = r.choice([0.01, 0.1, 0.5, 1.0])
    for e in events:
        if k in e and r.random() < share:
            e[k] = maker(r)
    return f"retype {k!r} in {share:.0%} of events"


def m_swap(r: random.Random, doc: Any) -> str:
    targets = _dicts(doc)
    if len(targets) < 2:
        return "swap: nothing"
    a, b = r.choice(targets), r.choice(targets)
    ka, kb = _pick_key(r, a), _pick_key(r, b)
    if ka is None or kb is None:
        return "swap: empty object"
    a[ka], b[kb] = b[kb], a[ka]
    return f"swap {ka!r} and {kb!r}"


def m_events(r: random.Random, doc: Any) -> str:
    """Whole events: duplicate, drop a run, reverse a run, keep only a cut."""
    events = _events(doc)
    if not events:
        return "events: none"
    n = len(events)
    i, j = sorted((r.randrange(n), r.randrange(n + 1)))
    what = r.choice(["duplicate", "drop", "reverse", "cut", "empty", "non-objects"])
    if what == "duplicate":
        events[i:i] = events[i:j][:1000]
    elif what == "drop":
        del events[i:j]
    elif what == "reverse":
        events[i:j] = events[i:j][::-1]
    elif what == "cut":
        del events[i:]
    elif what == "empty":
        events.clear()
    else:
        events[i:i] = [r.choice([1, "x", None, [], True])]
    return f"events {what} [{i}:{j}]"


def m_top(r: random.Random, doc: Any) -> str:
    """Top-level fields: rank, world size, device properties, the event list itself."""
    if not isinstance(doc, dict):
        return "top: not an object"
    key = r.choice(["distributedInfo", "deviceProperties", "schemaVersion", "traceEvents", "displayTimeUnit", "baseTimeNanoseconds"])
    choice = r.random()
    if choice < 0.3:
        doc.pop(key, None)
        return f"top: delete {key}"
    if key == "distributedInfo" and choice < 0.8:
        old = doc.get(key)
        info: dict[str, Any] = old if isinstance(old, dict) else {}
        sub = r.choice(["rank", "world_size", "pg_config", "backend"])
        info[sub] = r.choice(WEIRD_VALUES)(r)
        doc[key] = info
        return f"top: distributedInfo.{sub}"
    doc[key] = r.choice(WEIRD_VALUES)(r)
    return f"top: retype {key}"


JSON_MUTATIONS = [m_delete, m_retype, m_retype_many, m_swap, m_events, m_top]


def b_mutate(r: random.Random, data: bytes) -> tuple[bytes, str]:
    """Byte-level: cut, flip, insert, delete, or replace a digit."""
    if not data:
        return b"\x00", "bytes: empty -> NUL"
    what = r.choice(["cut", "flip", "insert", "delete", "digit"])
    buf = bytearray(data)
    at = r.randrange(len(buf))
    if what == "cut":
        buf = buf[:at]
    elif what == "flip":
        for _ in range(r.randint(1, 8)):
            k = r.randrange(len(buf))
            buf[k] ^= 1 << r.randrange(8)
    elif what == "insert":
        buf[at:at] = bytes(r.randrange(256) for _ in range(r.randint(1, 16)))
    elif what == "delete":
        del buf[at : at + r.randint(1, 64)]
    else:
        digits = [k for k in range(len(buf)) if 48 <= buf[k] <= 57][:100_000]
        if digits:
            buf[r.choice(digits)] = r.choice(b"-.eE+xX ")
    return bytes(buf), f"bytes {what} at {at}"


def gz_mutate(r: random.Random, data: bytes) -> tuple[bytes, str]:
    """gzip-level: a damaged or cut compressed stream."""
    z = bytearray(gzip.compress(data, compresslevel=6, mtime=0))
    what = r.choice(["flip", "cut", "header", "trailer"])
    if what == "flip":
        k = r.randrange(10, max(len(z), 11))
        if k < len(z):
            z[k] ^= 1 << r.randrange(8)
    elif what == "cut":
        z = z[: r.randrange(len(z))]
    elif what == "header":
        z[r.randrange(10)] ^= 0xFF
    else:
        z[-r.randint(1, 8)] ^= 0x55
    return bytes(z), f"gzip {what}"


# --- cases -------------------------------------------------------------------------------


@dataclass
class Case:
    seed: int
    index: int
    source: str
    command: str  # analyze | annotate | check
    mutated: str  # file name of the mutated trace within the job
    steps: list[str] = field(default_factory=list)

    def describe(self) -> str:
        return f"seed {self.seed} case {self.index}: {self.command} {self.source}/{self.mutated}: {'; '.join(self.steps)}"


def build_case(seed: int, index: int, all_sources: Sequence[Source], out_dir: Path, max_events: int = DEFAULT_MAX_EVENTS) -> tuple[Case, list[Path]]:
    """Write case ``index`` into ``out_dir``; returns it and the paths to give gpuprof."""
    r = random.Random(f"{seed}:{index}")
    src = r.choice(all_sources)
    command = r.choices(["analyze", "annotate", "check"], weights=[8, 1, 1])[0]
    # A job of several files: mutate one, keep the others (cross-rank code sees the damage).
    files = list(src.files)
    if command == "annotate" or len(files) > 4:
        files = [r.choice(files)] if command == "annotate" else r.sample(files, 3)
    victim = r.choice(files)
    case = Case(seed, index, src.name, command, victim.name)
    job = out_dir / "job"
    job.mkdir(parents=True, exist_ok=True)
    for f in files:
        if f is not victim:
            shutil.copy(f, job / f.name)
    doc = _load(victim, 0 if r.random() < 0.1 else max_events)
    for _ in range(r.choice([1, 1, 2, 3, 5])):
        case.steps.append(r.choice(JSON_MUTATIONS)(r, doc))
    data = json.dumps(doc, allow_nan=True).encode("utf-8", errors="surrogatepass")
    level = r.random()
    name = victim.name.removesuffix(".gz")
    if level < 0.2:
        data, step = b_mutate(r, data)
        case.steps.append(step)
    if level > 0.75:
        data, step = gz_mutate(r, data)
        case.steps.append(step)
        name += ".gz"
    elif r.random() < 0.3:
        data = gzip.compress(data, compresslevel=1, mtime=0)
        name += ".gz"
    (job / name).write_bytes(data)
    case.mutated = name
    if len(files) == 1:
        return case, [job / name]
    return case, [job]


# --- running -----------------------------------------------------------------------------


@dataclass
class Outcome:
    case: Case
    code: int | None  # None: no result (timeout or crash)
    stderr: str = ""
    traceback: str | None = None
    problem: str | None = None  # why this case breaks the contract; None when it holds
    warning: bool = False  # a Python warning leaked to stderr
    seconds: float = 0.0  # CPU time of the case process (building the case included)
    maxrss_kb: int = 0


def report_problem(doc_text: str) -> str | None:
    """Why the report on stdout is not a valid gpuprof.report/1 partition; None when it is."""
    try:
        doc = json.loads(doc_text)
    except ValueError as exc:
        return f"stdout is not JSON: {exc}"
    for rank in doc.get("ranks", []):
        window = rank.get("window_us")
        compute = rank.get("compute_us")
        lost = rank.get("lost_us", {})
        values = [window, compute, *lost.values()]
        if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
            return f"rank {rank.get('rank')}: a non-finite time in the report"
        if any(v < -1e-6 for v in values):
            return f"rank {rank.get('rank')}: a negative time in the report"
        total = compute + sum(lost.values())
        if abs(total - window) > max(1e-3 * abs(window), 1e-3):
            return f"rank {rank.get('rank')}: compute + lost = {total} != window {window}"
    return None


# Progress lines (shown once reading takes over a second) are not part of an error.
_PROGRESS = re.compile(r"^gpuprof: (reading|read) .* \(\d+/\d+\)$|^gpuprof: analyzing \d+ rank\(s\)$")
_PYTHON_WARNING = re.compile(r"\b\w*Warning: ")


def error_lines(stderr: str) -> list[str]:
    """The stderr lines that are not progress."""
    return [line for line in stderr.splitlines() if line.strip() and not _PROGRESS.match(line)]


def judge(case: Case, result: CliResult, seconds: float) -> Outcome:
    out = Outcome(case, result.code, result.stderr, result.traceback, seconds=seconds)
    out.warning = bool(_PYTHON_WARNING.search(result.stderr))
    if result.traceback is not None:
        out.problem = "traceback"
    elif result.code == 2:
        lines = error_lines(result.stderr)
        if len(lines) != 1:
            out.problem = f"exit 2 with {len(lines)} stderr lines"
    elif result.code == 1 and case.command == "check":
        pass  # the gate failed: compute under 1 % is a finding, not an error
    elif result.code != 0:
        out.problem = f"exit {result.code}"
    elif case.command == "analyze":
        out.problem = report_problem(result.stdout)
    return out


def _argv(case: Case, paths: list[Path], work: Path) -> list[str]:
    if case.command == "annotate":
        return ["annotate", str(paths[0]), "-o", str(work / "annotated.json")]
    if case.command == "check":
        return ["check", *map(str, paths), "--no-config", "--min-compute-pct", "1"]
    return ["analyze", *map(str, paths), "--format", "json"]


# A case is a hang when it uses ``timeout_s`` of CPU time, or sits blocked for this many
# times as long in wall time: on a shared, loaded machine a case may wait far longer for a
# CPU than it computes, and that is no hang.
WALL_FACTOR = 10
_CPU_EXCEEDED, _WALL_EXCEEDED = 71, 72


class _Timeout(BaseException):
    """Raised in the child by its timers; a BaseException so no handler in gpuprof eats it."""

    def __init__(self, code: int) -> None:
        self.code = code


def _on_timer(signum: int, frame: object) -> None:
    raise _Timeout(_CPU_EXCEEDED if signum == signal.SIGPROF else _WALL_EXCEEDED)


def _child(seed: int, index: int, all_sources: Sequence[Source], timeout_s: float, max_events: int, work: Path) -> int:
    """In the forked child: build the case, run it, write the outcome as JSON."""
    signal.signal(signal.SIGPROF, _on_timer)
    signal.signal(signal.SIGALRM, _on_timer)
    signal.setitimer(signal.ITIMER_PROF, timeout_s)  # CPU time of this process
    signal.setitimer(signal.ITIMER_REAL, timeout_s * WALL_FACTOR)
    try:
        case, paths = build_case(seed, index, all_sources, work, max_events)
        t0 = time.monotonic()
        result = run_cli(*_argv(case, paths, work))
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        outcome = judge(case, result, time.monotonic() - t0)
    except _Timeout as exc:
        return exc.code
    (work / "outcome.json").write_text(json.dumps(dataclasses.asdict(outcome)))
    return 0


def run_case(
    seed: int,
    index: int,
    all_sources: Sequence[Source],
    timeout_s: float,
    max_events: int = DEFAULT_MAX_EVENTS,
    keep: Path | None = None,
) -> Outcome:
    """Build and run one case in a forked child; never raises for what the child does."""
    work = Path(tempfile.mkdtemp(prefix=f"gpuprof-fuzz-{seed}-{index}-"))
    started = time.monotonic()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            code = _child(seed, index, all_sources, timeout_s, max_events, work)
        finally:
            os._exit(code)  # no atexit handlers, no pytest teardown in the child
    # The timers cannot interrupt a long call into C code: kill it then.
    deadline = started + timeout_s * WALL_FACTOR + 30
    killed = False
    while True:
        wpid, status, rusage = os.wait4(pid, os.WNOHANG)
        if wpid:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            _, status, rusage = os.wait4(pid, 0)
            killed = True
            break
        time.sleep(0.005)
    cpu_s = rusage.ru_utime + rusage.ru_stime
    result = work / "outcome.json"
    if result.is_file():
        data = json.loads(result.read_text())
        outcome = Outcome(case=Case(**data.pop("case")), **data)
    else:
        case, _ = build_case(seed, index, all_sources, work / "again", max_events)
        exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        if exit_code == _CPU_EXCEEDED:
            why = f"hang: {timeout_s:.0f} s of CPU without a result"
        elif exit_code == _WALL_EXCEEDED or killed:
            why = f"hang: blocked {time.monotonic() - started:.0f} s without a result ({cpu_s:.1f} s of CPU)"
        elif os.WIFSIGNALED(status):
            why = f"crash: killed by signal {os.WTERMSIG(status)}"
        else:
            why = f"crash: harness child exit {exit_code}"
        outcome = Outcome(case, None, problem=why)
    outcome.seconds = cpu_s
    outcome.maxrss_kb = rusage.ru_maxrss
    if keep is not None and outcome.problem:
        _keep(keep, work, outcome)
    shutil.rmtree(work, ignore_errors=True)
    return outcome


def _keep(keep: Path, work: Path, o: Outcome) -> None:
    dest = keep / f"seed{o.case.seed}-case{o.case.index}"
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for job in (work / "job", work / "again" / "job"):  # the child's, or rebuilt after a hang
        if job.is_dir() and any(job.iterdir()):
            shutil.copytree(job, dest / "job")
            break
    (dest / "outcome.txt").write_text(
        f"{o.case.describe()}\nproblem: {o.problem}\nexit: {o.code}\n--- stderr\n{o.stderr}\n--- traceback\n{o.traceback or ''}\n"
    )


def warm_up() -> None:
    """Import everything a case uses before forking, so each child starts warm."""
    run_cli("analyze", str(SAMPLES / "healthy"), "--format", "json")


# --- the campaign --------------------------------------------------------------------------


@dataclass
class Figures:
    cases: int = 0
    exit_codes: Counter[str] = field(default_factory=Counter)
    problems: Counter[str] = field(default_factory=Counter)
    tracebacks: Counter[str] = field(default_factory=Counter)  # last line of each traceback
    warnings: int = 0
    max_case_s: float = 0.0
    slowest: str = ""
    max_rss_kb: int = 0
    harness_rss_kb: int = 0
    elapsed_s: float = 0.0
    failures: list[Outcome] = field(default_factory=list)

    def add(self, o: Outcome) -> None:
        self.cases += 1
        self.exit_codes["none" if o.code is None else str(o.code)] += 1
        if o.problem:
            self.problems[o.problem.split(":")[0]] += 1
            self.failures.append(o)
        if o.traceback:
            self.tracebacks[o.traceback.strip().splitlines()[-1][:160]] += 1
        self.warnings += int(o.warning)
        if o.seconds > self.max_case_s:
            self.max_case_s, self.slowest = o.seconds, o.case.describe()
        self.max_rss_kb = max(self.max_rss_kb, o.maxrss_kb)


def campaign(seed: int, cases: Sequence[int], timeout_s: float, budget_s: float | None = None, max_events: int = DEFAULT_MAX_EVENTS, keep: Path | None = None, shared: Path | None = SHARED, progress: Callable[[int, Figures], None] | None = None) -> Figures:
    all_sources = sources(shared)
    warm_up()
    figures = Figures()
    figures.harness_rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.monotonic()
    for i in cases:
        if budget_s is not None and time.monotonic() - start > budget_s:
            break
        figures.add(run_case(seed, i, all_sources, timeout_s, max_events, keep))
        if progress:
            progress(i, figures)
    figures.elapsed_s = time.monotonic() - start
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--cases", type=int, default=1000, help="number of cases (0 .. N-1)")
    ap.add_argument("--start", type=int, default=0, help="first case index")
    ap.add_argument("--only", type=int, help="run this one case, show its command and output")
    ap.add_argument("--timeout", type=float, default=60.0, help=f"CPU seconds per case (or {WALL_FACTOR} times as long blocked) before it counts as a hang")
    ap.add_argument("--max-events", type=int, default=DEFAULT_MAX_EVENTS, help="events kept per mutated trace (0: all)")
    ap.add_argument("--keep", type=Path, help="write each failing case's input and output here")
    ap.add_argument("--no-shared", action="store_true", help="sample traces only")
    args = ap.parse_args(argv)
    shared = None if args.no_shared else SHARED
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    if args.only is not None:
        o = run_case(args.seed, args.only, sources(shared), args.timeout, args.max_events, args.keep)
        print(o.case.describe())
        print(f"exit {o.code}, problem: {o.problem}\n--- stderr\n{o.stderr}{o.traceback or ''}")
        return 1 if o.problem else 0

    def show(i: int, f: Figures) -> None:
        if f.cases % 100 == 0:
            print(f"  {f.cases} cases, exit codes {dict(f.exit_codes)}, problems {sum(f.problems.values())}", file=sys.stderr, flush=True)

    f = campaign(args.seed, range(args.start, args.start + args.cases), args.timeout, None, args.max_events, args.keep, shared, show)
    print(f"cases tried: {f.cases} (seed {args.seed}, cases {args.start}..{args.start + args.cases - 1}, sources: {len(sources(shared))} jobs)")
    print(f"exit codes: {dict(sorted(f.exit_codes.items()))}")
    print(f"contract broken: {sum(f.problems.values())} {dict(f.problems)}")
    print(f"tracebacks: {sum(f.tracebacks.values())}")
    for line, n in f.tracebacks.most_common():
        print(f"  {n:5d}  {line}")
    print(f"python warnings leaked to stderr: {f.warnings}")
    print(f"slowest case: {f.max_case_s:.2f} s of CPU ({f.slowest}); wall time {f.elapsed_s:.0f} s")
    print(f"peak memory of a case process (ru_maxrss): {f.max_rss_kb / 1024:.0f} MiB (the harness it is forked from: {f.harness_rss_kb / 1024:.0f} MiB)")
    for o in f.failures[:40]:
        print(f"FAIL {o.case.describe()} -> {o.problem}")
    return 1 if f.failures else 0


if __name__ == "__main__":
    sys.exit(main())
