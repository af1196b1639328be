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
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuprof.errors import GpuprofError
from gpuprof.session.layout import (
    EVENTS_FILE,
    HOOKS_DIR,
    JOB_TRACES_DIR,
    MEMORY_STAT_KEYS,
    META_FILE,
    PROCESSES_FILE,
    SAMPLE_COLUMNS,
    SAMPLES_FILE,
    SESSION_SCHEMA,
    TRACES_DIR,
)
from gpuprof.session.records import BOOL, INDEX, NUMBER, STRING, Field, Problems, read_columns, read_records
from gpuprof.session.trust import files_inside, real_root, session_subfolder, why_not_readable
from gpuprof.util.jsontypes import JsonMapping

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
    meta: JsonMapping
    samples: pd.DataFrame | None
    processes: pd.DataFrame | None
    events: tuple[JsonMapping, ...]
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


# session.json holds a command line, a few paths and warnings: kilobytes. Anything near
# this is not one gpuprof wrote, and is refused before it is held or parsed.
MAX_META_BYTES = 16 << 20


def _read_meta(root: Path) -> dict[str, Any]:
    meta_path = root / META_FILE
    why = why_not_readable(real_root(root), meta_path)
    if why is not None:
        raise GpuprofError(f"session metadata not read: {why}", meta_path)
    try:
        with open(meta_path, "rb") as fh:
            data = fh.read(MAX_META_BYTES + 1)
    except FileNotFoundError:
        raise GpuprofError(f"not a gpuprof session folder (no {META_FILE})", root) from None
    except OSError as exc:
        raise GpuprofError(f"session metadata is not readable: {exc.strerror or exc}", meta_path) from None
    if len(data) > MAX_META_BYTES:
        raise GpuprofError(f"session metadata is larger than {MAX_META_BYTES >> 20} MiB: not one gpuprof wrote",
                           meta_path)
    try:
        meta = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise GpuprofError(f"session metadata is not readable JSON: {exc}", meta_path) from None
    except RecursionError:
        raise GpuprofError("session metadata is not readable JSON: nested too deeply", meta_path) from None
    if not isinstance(meta, dict):
        raise GpuprofError("session metadata is not a JSON object", meta_path)
    schema = meta.get("schema")
    if not isinstance(schema, str) or not schema.startswith("gpuprof.session/"):
        raise GpuprofError("not a gpuprof session (its schema is not gpuprof.session/N)", meta_path)
    if schema != SESSION_SCHEMA:
        # Named only when it has the shape of one: the file is untrusted, its strings not echoed.
        named = f"{schema} " if re.fullmatch(r"gpuprof\.session/[0-9]{1,6}", schema) else ""
        raise GpuprofError(f"session schema {named}is not one this gpuprof reads ({SESSION_SCHEMA})", meta_path)
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
                 "message": Field(STRING), "gpu": Field(INDEX), "code": Field(STRING)}
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
    df: pd.DataFrame = pd.DataFrame({col: columns[col] for col in SAMPLE_COLUMNS}, copy=False)
    t, g = columns["time_unix_s"], columns["gpu"]
    if len(t) > 1 and not ((np.diff(t) > 0) | ((np.diff(t) == 0) & (np.diff(g) >= 0))).all():
        df = df.sort_values(["time_unix_s", "gpu"], kind="stable").reset_index(drop=True)
    return df


def job_traces_by_process(hook_recs: list[dict[str, Any]]) -> dict[Any, list[str]]:
    """The traces the job's own profiler wrote (``job_trace`` records, see
    :mod:`gpuprof.session.layout`), in order, for each process gpuprof wrote no trace of
    its own. These paths are the job's word: they are brought into the session when the run
    ends (:mod:`gpuprof.session.adopt`) and never opened by a reader."""
    own_pids = {r.get("pid") for r in hook_recs if r.get("kind") == "trace"}
    by_pid: dict[Any, list[str]] = {}
    for r in sorted((r for r in hook_recs if r.get("kind") == "job_trace"), key=lambda r: r["time_unix_s"]):
        if isinstance(r.get("path"), str) and r.get("pid") not in own_pids:
            by_pid.setdefault(r.get("pid"), []).append(r["path"])
    return by_pid


def adopted_name(pid: Any, path: str) -> str:
    """The name a job's trace gets in ``traces/job/``: its process and its own name."""
    return f"pid{pid}-{Path(path).name}"


def _job_trace_notes(hook_recs: list[dict[str, Any]], adopted: list[Path]) -> list[str]:
    """What to say about the job's own traces: which one of several was analyzed, and
    those left outside the folder (a session recorded before they were brought in)."""
    names = {p.name for p in adopted}
    notes: list[str] = []
    for pid, paths in job_traces_by_process(hook_recs).items():
        last = paths[-1]
        if adopted_name(pid, last) not in names:
            notes.append(f"the job's own profiler wrote {last} (process {pid}), outside the session folder: "
                         "not read (a session is read only from inside itself; give the file on the command "
                         "line to analyze it)")
        elif len(paths) > 1:
            notes.append(
                f"the job's own profiler wrote {len(paths)} traces in process {pid}; the last, {last}, is analyzed"
            )
    if any(r.get("kind") == "note" and r.get("job_profiler") is True for r in hook_recs):
        shown = ", ".join(str(p) for p in adopted) if adopted else "none was written"
        notes.append(f"the job ran its own torch.profiler, so gpuprof recorded no trace of its own; the job's traces: {shown}")
    return notes


def session_traces(root: Path) -> tuple[list[Path], list[Path], list[str]]:
    """The session's traces -- gpuprof's own in ``traces/``, the job's own brought into
    ``traces/job/`` -- as regular files inside the folder (:mod:`gpuprof.session.trust`),
    and the warnings about what was left out."""
    notes: list[str] = []
    traces_dir, note = session_subfolder(root, TRACES_DIR)
    if note:
        notes.append(note)
    if traces_dir is None:
        return [], [], notes
    try:
        names = os.listdir(traces_dir)
    except OSError:
        names = []
    files, refused = files_inside(root, traces_dir, [n for n in names if ".json" in n])
    notes.extend(refused)
    own = [p for p in files if not p.name.startswith(".")]
    for p in files:
        if p.name.startswith(".") and ".tmp." in p.name:
            # A process was killed (or ran out of disk) while exporting its trace.
            notes.append(f"an unfinished trace was skipped: {TRACES_DIR}/{p.name} (its process stopped while writing it)")
    job: list[Path] = []
    job_dir, note = session_subfolder(root, JOB_TRACES_DIR)
    if note:
        notes.append(note)
    if job_dir is not None:
        try:
            job_names = [n for n in os.listdir(job_dir) if not n.startswith(".")]
        except OSError:
            job_names = []
        job, refused = files_inside(root, job_dir, job_names)
        notes.extend(refused)
    return own, job, notes


def hook_records(root: Path, problems: Problems) -> tuple[list[dict[str, Any]], list[str]]:
    """Every record of ``hooks/*.jsonl`` (files inside the session only), and what was left out."""
    hooks_dir, note = session_subfolder(root, HOOKS_DIR)
    notes = [note] if note else []
    recs: list[dict[str, Any]] = []
    if hooks_dir is None:
        return recs, notes
    try:
        names = [n for n in os.listdir(hooks_dir) if n.endswith(".jsonl")]
    except OSError:
        names = []
    files, refused = files_inside(root, hooks_dir, names)
    notes.extend(refused)
    for hp in files:
        recs.extend(read_records(hp, _HOOK_FIELDS, f"{HOOKS_DIR}/*.jsonl", problems))
    return recs, notes


def job_trace_paths(root: Path) -> tuple[Path, ...]:
    """The job's own traces, as brought into the session (``traces/job/``)."""
    return tuple(session_traces(root)[1])


def _signature(root: Path) -> tuple[Any, ...]:
    """What a session read depends on: its files' names, sizes and times."""
    out: list[Any] = [str(root.resolve())]
    for folder in (root, root / HOOKS_DIR, root / TRACES_DIR, root / JOB_TRACES_DIR):
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
    base = real_root(root)

    def usable(name: str) -> Path | None:
        why = why_not_readable(base, root / name)
        if why is None:
            return root / name
        warnings.append(f"{name} not read: {why}")
        return None

    samples_path, processes_path, events_path = usable(SAMPLES_FILE), usable(PROCESSES_FILE), usable(EVENTS_FILE)
    samples = _samples_frame(read_columns(samples_path, _SAMPLE_FIELDS, SAMPLES_FILE, problems)
                             if samples_path else None)
    processes = read_columns(processes_path, _PROCESS_FIELDS, PROCESSES_FILE, problems) if processes_path else None
    event_recs = read_records(events_path, _EVENT_FIELDS, EVENTS_FILE, problems) if events_path else []
    hook_recs, notes = hook_records(root, problems)
    warnings.extend(notes)
    warnings.extend(problems.warnings())

    own, job, notes = session_traces(root)
    warnings.extend(notes)
    warnings.extend(_job_trace_notes(hook_recs, job))
    traces = tuple(own) + tuple(job)
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
