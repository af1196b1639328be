"""Reading a session folder (see :mod:`gpuprof.session.layout`).

Tolerant of the ways a run can end: a torn last line (killed mid-write) is dropped, a
session whose metadata still says ``running`` is reported as interrupted, missing optional
files are empty. The JSON-lines files are untrusted input like traces
(:mod:`gpuprof.session.records`): bad lines are skipped and counted, one warning per kind.
A folder that is not a session, or metadata that is not JSON, is a
:class:`~gpuprof.errors.GpuprofError` naming the file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuprof.errors import GpuprofError
from gpuprof.session.layout import (
    EVENTS_FILE,
    HOOKS_DIR,
    MEMORY_STAT_KEYS,
    META_FILE,
    PROCESSES_FILE,
    SAMPLE_COLUMNS,
    SAMPLES_FILE,
    SESSION_SCHEMA,
    TRACES_DIR,
)
from gpuprof.session.records import BOOL, INDEX, NUMBER, STRING, Field, Problems, read_columns, read_records

if TYPE_CHECKING:  # pandas is imported by the functions that use it
    import pandas as pd


@dataclass(frozen=True)
class Session:
    """A session as read back.

    ``samples`` is the wide NVML table: one row per GPU per poll, the columns of
    :data:`gpuprof.session.layout.SAMPLE_COLUMNS` (units in the names), NaN where a metric
    was unsupported or unreadable -- never 0; ``None`` when no sample was recorded (no GPU,
    no driver). ``hook_events`` has one row per hook record (``kind`` = start / step /
    trace / error) with the memory-stat columns where CUDA was in use.
    """

    path: Path
    meta: Mapping[str, Any]
    samples: pd.DataFrame | None
    processes: pd.DataFrame | None
    events: tuple[Mapping[str, Any], ...]
    hook_events: pd.DataFrame | None
    trace_paths: tuple[Path, ...]
    warnings: tuple[str, ...] = field(default=())

    @property
    def interrupted(self) -> bool:
        """True when gpuprof never wrote the end of the run (it was killed)."""
        return self.meta.get("status") != "finished"

    @property
    def hook_errors(self) -> tuple[str, ...]:
        import pandas as pd
        if self.hook_events is None or "kind" not in self.hook_events:
            return ()
        errs = self.hook_events[self.hook_events["kind"] == "error"]
        col = errs["message"] if "message" in errs else pd.Series([], dtype=object)
        return tuple(str(m) for m in col)


def _read_meta(root: Path) -> dict[str, Any]:
    meta_path = root / META_FILE
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise GpuprofError(f"not a gpuprof session folder (no {META_FILE})", root) from None
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise GpuprofError(f"session metadata is not readable JSON: {exc}", meta_path) from None
    if not isinstance(meta, dict):
        raise GpuprofError("session metadata is not a JSON object", meta_path)
    schema = meta.get("schema")
    if not isinstance(schema, str) or not schema.startswith("gpuprof.session/"):
        raise GpuprofError(f"not a gpuprof session (schema {schema!r})", meta_path)
    if schema != SESSION_SCHEMA:
        raise GpuprofError(f"session schema {schema!r} is not one this gpuprof reads ({SESSION_SCHEMA})", meta_path)
    _check_meta_types(meta, meta_path)
    return meta


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool))


def _is_list_of(kind: type) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, list) and all(isinstance(x, kind) for x in v)


# session.json key -> (test, what it should be). Only keys that are present are checked
# (older sessions may lack some); null is accepted wherever the layout allows "unknown".
_META_TYPES: dict[str, tuple[Callable[[Any], bool], str, bool]] = {
    "status": (lambda v: isinstance(v, str), "a string", False),
    "command": (_is_list_of(str), "a list of strings", False),
    "cwd": (lambda v: isinstance(v, str), "a string", True),
    "host": (lambda v: isinstance(v, str), "a string", True),
    "start_time_unix_s": (_is_number, "a number", True),
    "end_time_unix_s": (_is_number, "a number", True),
    "exit_code": (_is_int, "an integer", True),
    "signal": (_is_int, "an integer", True),
    "pid": (_is_int, "an integer", True),
    "sample_interval_ms": (_is_number, "a number", True),
    "hooks_enabled": (lambda v: isinstance(v, bool), "true or false", False),
    "profile_schedule": (
        lambda v: isinstance(v, dict) and all(_is_int(v.get(k, 0)) for k in ("wait", "warmup", "active")),
        "an object of integer wait, warmup and active steps",
        True,
    ),
    "revision": (_is_int, "an integer", True),
    "windows": (lambda v: isinstance(v, dict), "an object", True),
    "gpus": (_is_list_of(dict), "a list of objects", False),
    "versions": (lambda v: isinstance(v, dict), "an object", False),
    "warnings": (_is_list_of(str), "a list of strings", False),
}


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return f"the number {v!r}"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "a list holding other things" if v else "an empty list"
    return "an object"


def _check_meta_types(meta: Mapping[str, Any], meta_path: Path) -> None:
    """One clear error for a key of the wrong type (``"warnings": 5``), never a TypeError later."""
    for key, (ok, what, nullable) in _META_TYPES.items():
        if key not in meta:
            continue
        value = meta[key]
        if value is None and nullable:
            continue
        if not ok(value):
            raise GpuprofError(f"session metadata: {key!r} should be {what}, not {_json_type(value)}", meta_path)


_SAMPLE_FIELDS: dict[str, Field] = {
    col: Field(NUMBER, required=col == "time_unix_s") for col in SAMPLE_COLUMNS
} | {"gpu": Field(INDEX, required=True), "uuid": Field(STRING), "lost": Field(BOOL)}
_PROCESS_FIELDS = {
    "time_unix_s": Field(NUMBER, required=True),
    "gpu": Field(INDEX),
    "pid": Field(INDEX),
    "mem_used_bytes": Field(NUMBER),
    "util_sm_pct": Field(NUMBER),
    "util_mem_pct": Field(NUMBER),
}
_EVENT_FIELDS = {"time_unix_s": Field(NUMBER, required=True), "kind": Field(STRING, required=True),
                 "message": Field(STRING), "gpu": Field(INDEX)}
_HOOK_FIELDS = {
    "time_unix_s": Field(NUMBER, required=True),
    "kind": Field(STRING, required=True),
    "pid": Field(INDEX),
    "rank": Field(INDEX),
    "step": Field(INDEX),
    "steps": Field(INDEX),
    "signal": Field(INDEX),
    "window": Field(INDEX),
    "backward_unix_s": Field(NUMBER),
    **{col: Field(NUMBER) for col in MEMORY_STAT_KEYS.values()},
    **{key: Field(STRING) for key in ("message", "where", "path", "traceback", "torch_version")},
}


def _samples_frame(columns: dict[str, Any] | None) -> pd.DataFrame | None:
    import numpy as np
    import pandas as pd

    if columns is None:
        return None
    df = pd.DataFrame({col: columns[col] for col in SAMPLE_COLUMNS}, copy=False)
    t, g = columns["time_unix_s"], columns["gpu"]
    if len(t) > 1 and not ((np.diff(t) > 0) | ((np.diff(t) == 0) & (np.diff(g) >= 0))).all():
        df = df.sort_values(["time_unix_s", "gpu"], kind="stable").reset_index(drop=True)
    return df


def _job_traces(hook_recs: list[dict[str, Any]], own: tuple[Path, ...]) -> tuple[tuple[Path, ...], list[str]]:
    """The traces the job's own profiler wrote (``job_trace`` records, see
    :mod:`gpuprof.session.layout`), one per process: the last it wrote, for each process
    gpuprof wrote no trace of its own; and what to say about them."""
    own_pids = {r.get("pid") for r in hook_recs if r.get("kind") == "trace"}
    by_pid: dict[Any, list[str]] = {}
    for r in sorted((r for r in hook_recs if r.get("kind") == "job_trace"), key=lambda r: r["time_unix_s"]):
        if isinstance(r.get("path"), str) and r.get("pid") not in own_pids:
            by_pid.setdefault(r.get("pid"), []).append(r["path"])
    out: list[Path] = []
    notes: list[str] = []
    seen = {p.resolve() for p in own}
    for pid, paths in by_pid.items():
        last = Path(paths[-1])
        if not last.is_file():
            notes.append(f"the job's own profiler wrote {last} (process {pid}), which is no longer there")
            continue
        if last.resolve() in seen:
            continue
        seen.add(last.resolve())
        out.append(last)
        if len(paths) > 1:
            notes.append(
                f"the job's own profiler wrote {len(paths)} traces in process {pid}; the last, {last}, is analyzed"
            )
    if any(r.get("kind") == "note" and r.get("job_profiler") is True for r in hook_recs):
        shown = ", ".join(str(p) for p in out) if out else "none was written"
        notes.append(f"the job ran its own torch.profiler, so gpuprof recorded no trace of its own; the job's traces: {shown}")
    return tuple(out), notes


def job_trace_paths(root: Path) -> tuple[Path, ...]:
    """The job's own traces a session points at (read from its hook records)."""
    return tuple(p for p in read_session(root).trace_paths if p.parent != root / TRACES_DIR)


def _signature(root: Path) -> tuple[Any, ...]:
    """What a session read depends on: its files' names, sizes and times."""
    out: list[Any] = [str(root.resolve())]
    for folder in (root, root / HOOKS_DIR, root / TRACES_DIR):
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        for e in entries:
            try:
                st = e.stat()
            except OSError:
                continue
            out.append((e.path, st.st_size, st.st_mtime_ns))
    return tuple(out)


_CACHE: dict[tuple[Any, ...], Session] = {}


def read_session(path: str | Path) -> Session:
    """Read a session folder written by ``gpuprof run``, complete or killed at any point.

    Every file is checked as untrusted input (:mod:`gpuprof.session.records`): bad lines
    are skipped and counted, one warning per kind of problem. A session read again
    unchanged (``gpuprof run`` reads it for the report, the job summary and the samples)
    is read once.
    """
    root = Path(path)
    if not root.is_dir():
        raise GpuprofError("not a gpuprof session folder", root)
    key = _signature(root)
    cached = _CACHE.get(key)
    if cached is not None:
        return cached
    session = _read_session(root)
    _CACHE.clear()  # one session at a time: its tables may be large
    _CACHE[key] = session
    return session


def _read_session(root: Path) -> Session:
    import pandas as pd

    meta = _read_meta(root)
    warnings: list[str] = list(meta.get("warnings", []))
    if meta.get("status") != "finished":
        warnings.append(
            "the run did not finish cleanly (gpuprof was killed); data up to the last flush is used"
        )
    problems = Problems()
    samples = _samples_frame(read_columns(root / SAMPLES_FILE, _SAMPLE_FIELDS, SAMPLES_FILE, problems))
    processes = read_columns(root / PROCESSES_FILE, _PROCESS_FIELDS, PROCESSES_FILE, problems)
    event_recs = read_records(root / EVENTS_FILE, _EVENT_FIELDS, EVENTS_FILE, problems)
    hook_recs: list[dict[str, Any]] = []
    hooks_dir = root / HOOKS_DIR
    if hooks_dir.is_dir():
        for hp in sorted(hooks_dir.glob("*.jsonl")):
            hook_recs.extend(read_records(hp, _HOOK_FIELDS, f"{HOOKS_DIR}/*.jsonl", problems))
    warnings.extend(problems.warnings())

    traces_dir = root / TRACES_DIR
    traces: tuple[Path, ...] = ()
    if traces_dir.is_dir():
        files = sorted(p for p in traces_dir.iterdir() if p.is_file() and ".json" in p.name)
        traces = tuple(p for p in files if not p.name.startswith("."))
        for p in files:
            if p.name.startswith(".") and ".tmp." in p.name:
                # A process was killed (or ran out of disk) while exporting its trace.
                warnings.append(
                    f"an unfinished trace was skipped: {TRACES_DIR}/{p.name} (its process stopped while writing it)"
                )
    job_traces, notes = _job_traces(hook_recs, traces)
    traces += job_traces
    warnings.extend(notes)
    hook_df = None
    if hook_recs:
        hook_df = pd.DataFrame.from_records(hook_recs)
        hook_df = hook_df.sort_values("time_unix_s", kind="stable").reset_index(drop=True)
    return Session(
        path=root,
        meta=meta,
        samples=samples,
        processes=pd.DataFrame(processes, copy=False) if processes is not None else None,
        events=tuple(event_recs),
        hook_events=hook_df,
        trace_paths=traces,
        warnings=tuple(warnings),
    )
