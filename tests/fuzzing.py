"""Seeded mutations of real and sample traces, run through the gpuprof command line.

The contract under test: whatever the input, gpuprof exits 0 (and then writes a report
whose partition holds) or 2 with exactly one line on stderr; never a traceback, another
exit code, a hang or a crash. ``tests/e2e/test_fuzz.py`` runs a bounded set in CI; a longer
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
SHARED = Path(os.environ.get("GPUPROF_SHARED_TRACES") or ROOT.parent / "shared" / "traces")  # as tests/conftest.py

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
    command: str  # analyze | annotate | check | diff | schema
    mutated: str  # file name of the mutated trace within the job
    steps: list[str] = field(default_factory=list)
    # What the case attacks (see KINDS): a damaged trace, the standard streams, outputs onto
    # inputs, a saved report, a session's files, control characters in names and strings.
    kind: str = "trace"
    argv: list[str] = field(default_factory=list)  # the command line, when not the default one
    stdout_mode: str = "capture"  # capture | closed | full | broken
    stderr_mode: str = "capture"  # capture | closed
    protected: list[str] = field(default_factory=list)  # inputs that must come out unchanged
    env: dict[str, str] = field(default_factory=dict)
    # sessionpaths (fuzzing_round3): a rank only a file outside the session claims; a report
    # that holds it read that file.
    forbidden_rank: int | None = None

    def describe(self) -> str:
        where = f"{self.source}/{self.mutated}"
        streams = "" if (self.stdout_mode, self.stderr_mode) == ("capture", "capture") else f" [stdout {self.stdout_mode}, stderr {self.stderr_mode}]"
        return f"seed {self.seed} case {self.index} ({self.kind}): {self.command} {where}{streams}: {'; '.join(self.steps)}"


# Kinds of case and their weights. The kind is drawn from a generator of its own, so that a
# trace case draws exactly what it drew before the other kinds existed.
KINDS = {"trace": 60, "streams": 8, "outputs": 8, "report": 8, "session": 8, "names": 8}


def build_case(seed: int, index: int, all_sources: Sequence[Source], out_dir: Path, max_events: int = DEFAULT_MAX_EVENTS) -> tuple[Case, list[Path]]:
    """Write case ``index`` into ``out_dir``; returns it and the paths to give gpuprof."""
    kind = random.Random(f"{seed}:{index}:kind").choices(list(KINDS), weights=list(KINDS.values()))[0]
    if kind != "trace":
        return EXTRA_BUILDERS[kind](seed, index, all_sources, out_dir, max_events)
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


# --- the other kinds of case (issue 20's classes) ------------------------------------------

# Strings that must never reach a terminal as they are: OSC 52 (clipboard), clear screen,
# a forged line, CR, a C1 CSI, a bidirectional override, a NUL.
CONTROL_STRINGS = [
    "\x1b]52;c;SGFjaw==\x07",
    "\x1b[2J\x1b[H",
    "\ngpuprof: all checks passed",
    "\rOVERWRITTEN",
    "\x9b31m",
    "\u202egnp.",
    "\x00",
    "\x1b]0;title\x07",
]
# What a terminal must never receive from gpuprof (gpuprof/util/safetext.py's rule): C0 controls
# but tab and newline, DEL, C1, line and paragraph separators, bidirectional controls.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def unsafe_text(text: str) -> str | None:
    """The first character a terminal would obey, shown, or ``None``."""
    m = _UNSAFE.search(text)
    return None if m is None else repr(m.group(0))


def m_control_strings(r: random.Random, doc: Any) -> str:
    """Control characters in the strings a report shows: names, devices, process groups."""
    n = 0
    for d in _dicts(doc):
        for key in ("name", "cat", "Process Group Name", "Collective name"):
            if isinstance(d.get(key), str) and r.random() < 0.3:
                d[key] = d[key] + r.choice(CONTROL_STRINGS)
                n += 1
    if isinstance(doc, dict) and isinstance(doc.get("deviceProperties"), list):
        for dev in doc["deviceProperties"]:
            if isinstance(dev, dict):
                dev["name"] = str(dev.get("name", "")) + r.choice(CONTROL_STRINGS)
                n += 1
    return f"control characters in {n} strings"


def _trace_source(r: random.Random, all_sources: Sequence[Source]) -> Source:
    """A job whose files are traces (not a session's metadata, which the trace cases damage)."""
    usable = [s for s in all_sources if any(f.name != "session.json" for f in s.files)]
    src = r.choice(usable)
    return Source(src.name, tuple(f for f in src.files if f.name != "session.json"))


def _job_files(r: random.Random, src: Source, job: Path, limit: int = 3) -> list[Path]:
    job.mkdir(parents=True, exist_ok=True)
    files = list(src.files) if len(src.files) <= limit else r.sample(list(src.files), limit)
    out = []
    for f in files:
        shutil.copy(f, job / f.name)
        out.append(job / f.name)
    return out


def _streams_case(seed: int, index: int, all_sources: Sequence[Source], out_dir: Path, max_events: int) -> tuple[Case, list[Path]]:
    """A command whose stdout is closed, full or a pipe nobody reads, or whose stderr is closed."""
    r = random.Random(f"{seed}:{index}")
    src = _trace_source(r, all_sources)
    files = _job_files(r, src, out_dir / "job")
    command = r.choice(["analyze", "analyze", "check", "schema"])
    stdout_mode, stderr_mode = r.choice(
        [("closed", "capture"), ("full", "capture"), ("broken", "capture"), ("capture", "closed"), ("broken", "closed")]
    )
    case = Case(seed, index, src.name, command, files[0].name, kind="streams", stdout_mode=stdout_mode, stderr_mode=stderr_mode)
    if r.random() < 0.3:  # sometimes the input is bad too: its error line must still be the one line
        files[0].write_bytes(b_mutate(r, files[0].read_bytes())[0])
        case.steps.append("input damaged at byte level")
    target = [str(files[0])] if len(files) == 1 else [str(files[0].parent)]
    if command == "analyze":
        case.argv = ["analyze", *target, "--format", r.choice(["json", "text", "markdown"])]
    elif command == "check":
        case.argv = ["check", *target, "--no-config", "--min-compute-pct", r.choice(["1", "99"])]
    else:
        case.argv = ["schema"]
    return case, files


def _outputs_case(seed: int, index: int, all_sources: Sequence[Source], out_dir: Path, max_events: int) -> tuple[Case, list[Path]]:
    """An output onto an input, or two outputs onto one file: refused, every input unchanged."""
    r = random.Random(f"{seed}:{index}")
    src = _trace_source(r, all_sources)
    job = out_dir / "job"
    files = _job_files(r, src, job)
    first = files[0]
    other = job / "other.json"
    shutil.copy(first, other)
    alias = job / "alias.json"
    alias.symlink_to(first.name)  # the same file by another name
    pattern = r.choice(["analyze-onto-input", "analyze-onto-folder-trace", "baseline-junit", "save-and-junit", "diff-onto-base"])
    fmt = ["--format", "json"]
    argv = {
        "analyze-onto-input": ["analyze", str(first), "-o", str(r.choice([first, alias])), *fmt],
        "analyze-onto-folder-trace": ["analyze", str(job), "-o", str(first), *fmt],
        "baseline-junit": ["check", str(first), "--no-config", "--baseline", str(other), "--junit", str(r.choice([other, other]))],
        "save-and-junit": ["check", str(first), "--no-config", "--min-compute-pct", "1", "--save-report", str(job / "x.json"), "--junit", str(job / "x.json")],
        "diff-onto-base": ["diff", str(other), str(first), "-o", str(other), *fmt],
    }[pattern]
    case = Case(seed, index, src.name, argv[0], first.name, [pattern], kind="outputs", argv=argv)
    case.protected = [str(f) for f in [*files, other]]
    return case, files


def _saved_report(src_paths: list[Path]) -> dict[str, Any]:
    r = run_cli("analyze", *map(str, src_paths), "--format", "json")
    if r.code != 0:
        raise RuntimeError(f"the unmutated source does not analyze: {r.stderr}")
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def _all_dicts(doc: Any, limit: int = 2000) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    stack = [doc]
    while stack and len(out) < limit:
        v = stack.pop()
        if isinstance(v, dict):
            out.append(v)
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v[:200])
    return out


def _report_case(seed: int, index: int, all_sources: Sequence[Source], out_dir: Path, max_events: int) -> tuple[Case, list[Path]]:
    """A saved report, damaged, swollen or carrying control characters, read back."""
    r = random.Random(f"{seed}:{index}")
    src = _trace_source(r, all_sources)
    files = _job_files(r, src, out_dir / "job")
    target = [str(files[0])] if len(files) == 1 else [str(files[0].parent)]
    doc = _saved_report([Path(t) for t in target])
    case = Case(seed, index, src.name, "analyze", "report.json", kind="report")
    gz = False
    for _ in range(r.choice([1, 1, 2, 3])):
        what = r.choice(["retype", "delete", "numbers", "bomb", "control"])
        targets = _all_dicts(doc)
        if what == "retype" and targets:
            d = r.choice(targets)
            if d:
                k = r.choice(list(d))
                d[k] = r.choice(WEIRD_VALUES)(r)
                case.steps.append(f"retype {k!r}")
        elif what == "delete" and targets:
            d = r.choice(targets)
            if d:
                k = r.choice(list(d))
                del d[k]
                case.steps.append(f"delete {k!r}")
        elif what == "numbers" and doc.get("ranks"):
            rank = r.choice(doc["ranks"])
            n = r.choice([17, 1000, 200_000])
            values: list[Any] = [r.random() * 1e5 for _ in range(n)]
            if r.random() < 0.5:
                values[r.randrange(n)] = r.choice(WEIRD_VALUES)(r)
            rank["step_times_us"] = values
            case.steps.append(f"{n} step times")
        elif what == "bomb":
            doc["warnings"] = ["a" * 3_000_000]
            case.env["GPUPROF_MAX_EVENT_MB"] = "1"
            gz = True
            case.steps.append("a 3 MB string, limit 1 MB, gzipped")
        elif targets:
            for d in targets:
                for k, v in d.items():
                    if isinstance(v, str) and r.random() < 0.2:
                        d[k] = v + r.choice(CONTROL_STRINGS)
                    elif isinstance(v, list) and v and all(isinstance(x, str) for x in v) and r.random() < 0.3:
                        d[k] = [x + r.choice(CONTROL_STRINGS) for x in v]
            case.steps.append("control characters in strings")
    data = json.dumps(doc, allow_nan=True).encode("utf-8", errors="surrogatepass")
    report = out_dir / "job" / ("report.json.gz" if gz else "report.json")
    report.write_bytes(gzip.compress(data, compresslevel=6) if gz else data)
    case.mutated = report.name
    how = r.choice(["analyze", "analyze", "baseline", "check"])
    if how == "analyze":
        case.argv = ["analyze", str(report), "--format", r.choice(["text", "markdown", "json", "html"])]
    elif how == "baseline":
        case.command = "check"
        case.argv = ["check", *target, "--no-config", "--baseline", str(report)]
    else:
        case.command = "check"
        case.argv = ["check", str(report), "--no-config", "--min-compute-pct", "1", "--junit", str(out_dir / "junit.xml")]
    return case, [report]


def _session_case(seed: int, index: int, all_sources: Sequence[Source], out_dir: Path, max_events: int) -> tuple[Case, list[Path]]:
    """A session folder whose JSON-lines files hold lines of the wrong types or no JSON."""
    from gpuprof.record.backend import GpuSample
    from gpuprof.session.layout import SESSION_SCHEMA

    r = random.Random(f"{seed}:{index}")
    src = _trace_source(r, all_sources)
    sess = out_dir / "job"
    files = _job_files(r, src, sess / "traces", limit=1)
    meta: dict[str, Any] = {"schema": SESSION_SCHEMA, "status": r.choice(["finished", "running"]), "command": ["python", "train.py"],
                            "gpus": [], "hooks_enabled": True, "warnings": [], "start_time_unix_s": 1.7e9}
    n = r.choice([10, 500, 5000])
    samples = [
        GpuSample(gpu=i % 2, uuid=f"GPU-{i % 2}", util_gpu_pct=float(r.randrange(101)), mem_used_bytes=1e9 + i,
                  mem_total_bytes=8e10, power_w=300.0).to_record(1.7e9 + (i // 2) * 0.1)
        for i in range(n)
    ]
    hooks: list[dict[str, Any]] = [{"time_unix_s": 1.7e9, "kind": "start", "rank": 0, "pid": 7}]
    hooks += [{"time_unix_s": 1.7e9 + s * 0.05, "kind": "step", "rank": 0, "pid": 7, "step": s} for s in range(1, 60)]
    hooks.append({"time_unix_s": 1.7e9 + 3.0, "kind": "trace", "rank": 0, "pid": 7, "path": f"traces/{files[0].name}"})
    case = Case(seed, index, src.name, "analyze", "samples.jsonl", kind="session")
    lines = {"samples.jsonl": [json.dumps(x) for x in samples], "hooks/rank0-7.jsonl": [json.dumps(x) for x in hooks]}
    for _ in range(r.choice([1, 2, 3, 5])):
        name = r.choice(list(lines))
        rows = lines[name]
        i = r.randrange(len(rows))
        what = r.choice(["retype", "retype", "garbage", "not-an-object", "huge", "meta"])
        try:
            rec = json.loads(rows[i])
        except ValueError:
            rec = None
        if what in ("retype", "huge") and not (isinstance(rec, dict) and rec):
            what = "garbage"  # an earlier mutation left no record on this line
        if what == "retype":
            assert isinstance(rec, dict)
            key = r.choice(list(rec))
            rec[key] = r.choice(WEIRD_VALUES)(r)
            rows[i] = json.dumps(rec, allow_nan=True)
            case.steps.append(f"{name}: line {i} {key!r} retyped")
        elif what == "garbage":
            rows[i] = rows[i][: r.randrange(len(rows[i]) + 1)] + "\x00\xff garbage"
            case.steps.append(f"{name}: line {i} cut and garbage")
        elif what == "not-an-object":
            rows[i] = r.choice(["5", "[1, 2]", "null", '"x"'])
            case.steps.append(f"{name}: line {i} not an object")
        elif what == "huge":
            assert isinstance(rec, dict)
            rec[r.choice(list(rec))] = r.choice([1e20, -(2**70), 10**400 if r.random() < 0.5 else 2**64])
            rows[i] = json.dumps(rec)
            case.steps.append(f"{name}: line {i} a huge number")
        else:
            key = r.choice(list(meta))
            meta[key] = r.choice(WEIRD_VALUES)(r)
            case.steps.append(f"session.json {key!r} retyped")
    (sess / "hooks").mkdir(parents=True, exist_ok=True)
    (sess / "session.json").write_text(json.dumps(meta, allow_nan=True))
    for name, rows in lines.items():
        (sess / name).write_bytes(("\n".join(rows) + "\n").encode("utf-8", errors="surrogatepass"))
    case.argv = ["analyze", str(sess), "--format", "json"]
    return case, [sess]


def _names_case(seed: int, index: int, all_sources: Sequence[Source], out_dir: Path, max_events: int) -> tuple[Case, list[Path]]:
    """A trace whose file name and strings hold control characters (or bytes that are not
    UTF-8): whatever gpuprof says about it reaches the terminal escaped."""
    r = random.Random(f"{seed}:{index}")
    src = _trace_source(r, all_sources)
    victim = r.choice(src.files)
    doc = _load(victim, max_events)
    case = Case(seed, index, src.name, "analyze", victim.name, [m_control_strings(r, doc)], kind="names")
    data = json.dumps(doc, allow_nan=True).encode("utf-8", errors="surrogatepass")
    if r.random() < 0.4:
        data, step = b_mutate(r, data)  # damaged: the error line names the file
        case.steps.append(step)
    raw_name = b"bad" + r.choice([s.encode("utf-8", "surrogatepass") for s in CONTROL_STRINGS if "\x00" not in s and "/" not in s] + [b"\xff\xfe"]) + b".json"
    job = out_dir / "job"
    job.mkdir(parents=True, exist_ok=True)
    path = job / os.fsdecode(raw_name)
    path.write_bytes(data)
    case.mutated = repr(path.name)
    fmt = r.choice(["text", "text", "markdown", "json"])
    case.argv = r.choice([["analyze", str(path), "--format", fmt], ["check", str(path), "--no-config", "--min-compute-pct", "1"]])
    case.command = case.argv[0]
    return case, [path]


EXTRA_BUILDERS: dict[str, Callable[..., tuple[Case, list[Path]]]] = {
    "streams": _streams_case,
    "outputs": _outputs_case,
    "report": _report_case,
    "session": _session_case,
    "names": _names_case,
}
# Issue 33's classes that run through the same harness: sessions pointing outside
# themselves, hostile numbers and depth in inputs that are not traces (fuzzing_round3.py).
sys.path.insert(0, str(Path(__file__).resolve().parent))
import fuzzing_round3  # noqa: E402

KINDS.update(fuzzing_round3.KINDS)
EXTRA_BUILDERS.update(fuzzing_round3.BUILDERS)


def run_with_streams(args: Sequence[str], stdout_mode: str, stderr_mode: str, work: Path) -> CliResult:
    """``gpuprof ARGS`` with descriptors 1 and 2 as asked (in a forked child only: it
    changes this process's descriptors): closed (as ``>&-``), ``/dev/full``, a pipe whose
    reader is gone, or a file that is read back."""
    import io
    import traceback

    from gpuprof.cli import main

    out_path, err_path = work / "stdout.bin", work / "stderr.bin"
    if stderr_mode == "closed":
        os.close(2)
        sys.stderr = None  # type: ignore[assignment]  # what the interpreter does at start
    else:
        fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 2)
        os.close(fd)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace", line_buffering=True)
    if stdout_mode == "closed":
        os.close(1)
        sys.stdout = None  # type: ignore[assignment]
    else:
        if stdout_mode == "full":
            fd = os.open("/dev/full", os.O_WRONLY)
        elif stdout_mode == "broken":
            rd, fd = os.pipe()
            os.close(rd)
        else:
            fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.close(fd)
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="backslashreplace")
    saved_argv = sys.argv
    sys.argv = ["gpuprof", *args]
    code, tb = 0, None
    try:
        main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Exception:  # noqa: BLE001 - exactly what the harness looks for
        code, tb = 1, traceback.format_exc()
    finally:
        sys.argv = saved_argv
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
    read = lambda p: p.read_bytes().decode("utf-8", "backslashreplace") if p.is_file() else ""  # noqa: E731
    return CliResult(code, read(out_path), read(err_path), tb)


def _digest(paths: Sequence[str]) -> dict[str, str]:
    import hashlib

    return {p: hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in paths}


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


# Progress lines (shown once reading takes over a second), and the warning naming a file of a
# folder that was left out, are not part of an error.
_PROGRESS = re.compile(
    r"^gpuprof: (reading|read) .* \(\d+/\d+\)$|^gpuprof: analyzing \d+ rank\(s\)$"
    r"|^gpuprof: warning: skipped .*, which cannot be read: "  # a file of a folder left out, said before
)
_PYTHON_WARNING = re.compile(r"\b\w*Warning: ")


def error_lines(stderr: str) -> list[str]:
    """The stderr lines that are not progress."""
    return [line for line in stderr.splitlines() if line.strip() and not _PROGRESS.match(line)]


def _stdout_format(case: Case) -> str:
    """What the case's command writes on stdout: a report format, or json for none."""
    argv = case.argv
    if "--format" in argv:
        return argv[argv.index("--format") + 1]
    return {"check": "text", "diff": "text"}.get(case.command, "json")


def judge(case: Case, result: CliResult, seconds: float, changed: list[str] | None = None) -> Outcome:
    out = Outcome(case, result.code, result.stderr, result.traceback, seconds=seconds)
    out.warning = bool(_PYTHON_WARNING.search(result.stderr))
    lines = error_lines(result.stderr)
    unsafe = unsafe_text(result.stderr) or (
        unsafe_text(result.stdout) if _stdout_format(case) in ("text", "markdown") else None
    )
    if result.traceback is not None:
        out.problem = "traceback"
    elif unsafe is not None:
        out.problem = f"control character {unsafe} reached the terminal"
    elif changed:
        out.problem = f"an input was changed: {changed[0]}"
    elif case.forbidden_rank is not None and result.code == 0 and _has_rank(result.stdout, case.forbidden_rank):
        out.problem = f"read a file outside the session folder (its rank {case.forbidden_rank} is in the report)"
    elif case.kind == "outputs":
        if result.code != 2 or len(lines) != 1:
            out.problem = f"an output onto an input was not refused (exit {result.code}, {len(lines)} stderr lines)"
    elif case.kind == "streams":
        out.problem = _streams_problem(case, result, lines)
    elif case.kind == "report" and result.code in (0, 1):
        if result.code == 1 and case.command != "check":
            out.problem = "exit 1"
    elif result.code == 2:
        lines = error_lines(result.stderr)
        if len(lines) != 1:
            out.problem = f"exit 2 with {len(lines)} stderr lines"
    elif result.code == 1 and case.command == "check":
        pass  # the gate failed: compute under 1 % is a finding, not an error
    elif result.code != 0:
        out.problem = f"exit {result.code}"
    elif case.command == "analyze" and _stdout_format(case) == "json":
        out.problem = report_problem(result.stdout)
    return out


def _has_rank(stdout: str, rank: int) -> bool:
    try:
        return any(r.get("rank") == rank for r in json.loads(stdout).get("ranks", []))
    except (ValueError, AttributeError):
        return False


def _streams_problem(case: Case, result: CliResult, lines: list[str]) -> str | None:
    """The rule of docs/reliability.md "Standard streams"."""
    code, seen = result.code, case.stderr_mode == "capture"
    if code == 2:  # bad input, or stdout that cannot take the result: one line (when stderr is open)
        if seen and len(lines) != 1:
            return f"exit 2 with {len(lines)} stderr lines"
        if case.stderr_mode == "closed" and result.stdout.strip():
            return "with stderr closed, something was written on stdout instead"
        return None
    if case.stdout_mode in ("closed", "full"):
        return f"stdout {case.stdout_mode}: exit {code}, not 2"
    if case.stdout_mode == "broken":
        wanted = (0, 1) if case.command == "check" else (141,)
        if code not in wanted:
            return f"stdout a closed pipe: exit {code}, not {' or '.join(map(str, wanted))}"
        if seen and lines:
            return f"stdout a closed pipe: {len(lines)} stderr lines"
        return None
    if code == 1 and case.command == "check":
        return None
    if code != 0:
        return f"exit {code}"
    if case.command == "analyze" and _stdout_format(case) == "json":
        return report_problem(result.stdout)
    return None


def _argv(case: Case, paths: list[Path], work: Path) -> list[str]:
    if case.argv:
        return case.argv
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
        os.environ.update(case.env)
        before = _digest(case.protected)
        t0 = time.monotonic()
        if (case.stdout_mode, case.stderr_mode) == ("capture", "capture"):
            result = run_cli(*_argv(case, paths, work))
        else:
            result = run_with_streams(_argv(case, paths, work), case.stdout_mode, case.stderr_mode, work)
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        after = _digest(case.protected)
        outcome = judge(case, result, time.monotonic() - t0, [p for p in before if before[p] != after.get(p)])
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
    kinds: Counter[str] = field(default_factory=Counter)
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
        self.kinds[o.case.kind] += 1
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
    ap.add_argument("--kinds", help=f"only these kinds of case, comma-separated ({', '.join(KINDS)}); give the same to --only")
    args = ap.parse_args(argv)
    if args.kinds:
        only = {k: KINDS[k] for k in args.kinds.split(",")}
        KINDS.clear()
        KINDS.update(only)
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
    print(f"cases by kind: {dict(sorted(f.kinds.items()))}")
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
