"""Reading a session folder (see :mod:`gpuprof.session.layout`).

Tolerant of the ways a run can end: a torn last line (killed mid-write) is dropped, a
session whose metadata still says ``running`` is reported as interrupted, missing optional
files are empty. A folder that is not a session, or metadata that is not JSON, is a
:class:`~gpuprof.errors.GpuprofError` naming the file.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuprof.errors import GpuprofError
from gpuprof.session.layout import (
    EVENTS_FILE,
    HOOKS_DIR,
    META_FILE,
    PROCESSES_FILE,
    SAMPLE_COLUMNS,
    SAMPLES_FILE,
    SESSION_SCHEMA,
    TRACES_DIR,
)

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


def read_jsonl(path: Path) -> tuple[list[dict[str, Any]], int]:
    """Records of a JSON-lines file and the number of unreadable lines that were skipped.

    Only a torn *last* line is expected (a kill mid-write); a bad line elsewhere is also
    skipped and counted so that one corrupt line never hides a whole run.
    """
    records: list[dict[str, Any]] = []
    bad = 0
    try:
        with open(path, "rb") as fh:
            for raw in fh:
                line = raw.strip()
                if not line:
                    continue
                try:
                    rec = json.loads(line)
                except ValueError:
                    bad += 1
                    continue
                if isinstance(rec, dict):
                    records.append(rec)
                else:
                    bad += 1
    except FileNotFoundError:
        return [], 0
    except OSError as exc:
        raise GpuprofError(f"cannot read session file: {exc.strerror}", path) from None
    return records, bad


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


def _samples_frame(records: list[dict[str, Any]]) -> pd.DataFrame | None:
    import pandas as pd
    if not records:
        return None
    df = pd.DataFrame.from_records(records)
    for col in SAMPLE_COLUMNS:
        if col not in df:
            df[col] = None
    numeric = [c for c in SAMPLE_COLUMNS if c not in ("uuid", "lost", "gpu")]
    for col in numeric:
        # None -> NaN: unknown stays unknown in arithmetic, never turns into 0.
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("float64")
    df["gpu"] = pd.to_numeric(df["gpu"], errors="coerce").fillna(-1).astype("int64")
    df["lost"] = df["lost"].map(lambda v: v is True).astype(bool)
    ordered = list(SAMPLE_COLUMNS) + [c for c in df.columns if c not in SAMPLE_COLUMNS]
    return df[ordered].sort_values(["time_unix_s", "gpu"], kind="stable").reset_index(drop=True)


def read_session(path: str | Path) -> Session:
    """Read a session folder written by ``gpuprof run``, complete or killed at any point."""
    import pandas as pd
    root = Path(path)
    if not root.is_dir():
        raise GpuprofError("not a gpuprof session folder", root)
    meta = _read_meta(root)
    warnings: list[str] = list(meta.get("warnings", []))
    if meta.get("status") != "finished":
        warnings.append(
            "the run did not finish cleanly (gpuprof was killed); data up to the last flush is used"
        )

    sample_recs, bad_samples = read_jsonl(root / SAMPLES_FILE)
    proc_recs, _ = read_jsonl(root / PROCESSES_FILE)
    event_recs, _ = read_jsonl(root / EVENTS_FILE)
    hook_recs: list[dict[str, Any]] = []
    hooks_dir = root / HOOKS_DIR
    if hooks_dir.is_dir():
        for hp in sorted(hooks_dir.glob("*.jsonl")):
            recs, _ = read_jsonl(hp)
            hook_recs.extend(recs)
    if bad_samples > 1:
        warnings.append(f"{bad_samples} unreadable lines skipped in {SAMPLES_FILE}")

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
    hook_df = None
    if hook_recs:
        hook_df = pd.DataFrame.from_records(hook_recs)
        if "time_unix_s" in hook_df:
            hook_df = hook_df.sort_values("time_unix_s", kind="stable").reset_index(drop=True)
    return Session(
        path=root,
        meta=meta,
        samples=_samples_frame(sample_recs),
        processes=pd.DataFrame.from_records(proc_recs) if proc_recs else None,
        events=tuple(event_recs),
        hook_events=hook_df,
        trace_paths=traces,
        warnings=tuple(warnings),
    )
