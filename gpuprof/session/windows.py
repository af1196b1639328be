"""The profiling windows of a session after the first: their files, written and read back.

Layout (revision 2 of ``gpuprof.session/1``, see :mod:`gpuprof.session.layout`)::

    <session>/windows/0001/request.json      which steps every rank records, and why
    <session>/windows/0001/traces/rank<R>.pt.trace.json.gz
    <session>/windows/0001/diagnosis.json    the window's diagnosis, made while the job runs
    <session>/windows/0001/report.json       the window's full report (both kept when traces are pruned)
    <session>/control/demand-<ns>-<pid>.json a window asked for by ``gpuprof trigger``

A window folder appears whole: ``gpuprof run`` writes ``request.json`` into a hidden folder
(``windows/.0001.tmp``) and renames it, so a rank that lists ``windows/`` never sees a
folder without its request. Every path is inside the session folder and relative to it; a
reader takes only plain files and folders there (never a symbolic link), and every value it
reads is checked, as for every session file (untrusted input).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpuprof.session.layout import CONTROL_DIR, TRACES_DIR, WINDOWS_DIR
from gpuprof.session.writer import write_json_atomic
from gpuprof.util.jsontypes import JsonMapping, JsonObject

REQUEST_FILE = "request.json"
DIAGNOSIS_FILE = "diagnosis.json"
WINDOW_REPORT_FILE = "report.json"
DEMAND_PREFIX = "demand-"
REASONS = ("every", "change", "demand")
MAX_JSON_BYTES = 4 << 20  # a request or diagnosis is a few KB; anything larger is not ours


def window_name(window: int) -> str:
    """The folder of window ``window`` (1, 2, ...; the first window, 0, is ``traces/``)."""
    return f"{window:04d}"


def window_dir(root: Path, window: int) -> Path:
    return root / WINDOWS_DIR / window_name(window)


@dataclass(frozen=True)
class WindowRequest:
    """What every rank records: optimizer steps ``start_step`` to ``start_step + active - 1``,
    after ``warmup`` steps of profiler warm-up."""

    window: int
    start_step: int
    warmup: int
    active: int
    reason: str  # one of REASONS
    detail: str  # one line for a person: "every 500 steps", "step time rose 31 % at step 1200"
    requested_unix_s: float
    requested_at_step: int  # the furthest step any rank had logged when it was asked for
    change: JsonMapping | None = None  # the change that triggered it (Change.to_dict())
    demand: str | None = None  # the demand file it answers

    @property
    def last_step(self) -> int:
        return self.start_step + self.active - 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"change": dict(self.change) if self.change is not None else None}


def _int(v: Any, lo: int = 0) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and lo <= v < 2**53 else None


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if abs(f) <= 1e18 else None


def request_from_dict(doc: Any) -> WindowRequest | None:
    """A request read back, or ``None`` when it is not one (a damaged or foreign file)."""
    if not isinstance(doc, dict):
        return None
    window, start = _int(doc.get("window"), 1), _int(doc.get("start_step"), 1)
    warmup, active = _int(doc.get("warmup")), _int(doc.get("active"), 1)
    reason, detail = doc.get("reason"), doc.get("detail")
    t, at = _num(doc.get("requested_unix_s")), _int(doc.get("requested_at_step"))
    if None in (window, start, warmup, active, t, at) or reason not in REASONS or not isinstance(detail, str):
        return None
    change = doc.get("change")
    demand = doc.get("demand")
    return WindowRequest(
        window=window, start_step=start, warmup=warmup, active=active, reason=reason, detail=detail,  # type: ignore[arg-type]
        requested_unix_s=t, requested_at_step=at,  # type: ignore[arg-type]
        change=change if isinstance(change, dict) else None, demand=demand if isinstance(demand, str) else None,
    )


def _ranks(v: Any) -> list[int] | None:
    if not isinstance(v, list):
        return None
    out = [_int(x) for x in v]
    return [x for x in out if x is not None] if None not in out else None


def diagnosis_from_dict(doc: Any) -> JsonObject | None:
    """A window's diagnosis (:mod:`gpuprof.pipeline.windowdiag`) as a report may carry it:
    every key checked, a value of the wrong type left out (read as unknown), the per-rank
    rows left in the window's folder. ``None`` when it is not a diagnosis at all."""
    if not isinstance(doc, dict) or not isinstance(doc.get("ok"), bool):
        return None
    out: dict[str, Any] = {"ok": doc["ok"]}
    for key in ("error",):
        out[key] = doc.get(key) if isinstance(doc.get(key), str) else None
    if isinstance(doc.get("cpu_only"), bool):
        out["cpu_only"] = doc["cpu_only"]
    for key in ("step_us",):
        v = _num(doc.get(key))
        out[key] = v if v is not None and v >= 0 else None
    out["critical_rank"] = _int(doc.get("critical_rank"))
    out["waiting_ranks"] = _ranks(doc.get("waiting_ranks")) or []
    out["profiled_steps"] = _int(doc.get("profiled_steps")) or 0
    parts = doc.get("breakdown_us_per_step")
    if isinstance(parts, dict):
        out["breakdown_us_per_step"] = {str(k): v for k, v in parts.items() if isinstance(k, str) and _num(v) is not None}
    top = []
    raw = doc.get("top")
    for t in raw if isinstance(raw, list) else []:
        if not isinstance(t, dict) or not isinstance(t.get("cause"), str):
            continue
        row: dict[str, Any] = {"cause": t["cause"]}
        for key in ("us_per_step", "pct_of_step", "saved_us_per_step", "savings_pct"):
            if key in t:
                row[key] = _num(t.get(key))
        if isinstance(t.get("title"), str):
            row["title"] = t["title"]
        if (ranks := _ranks(t.get("ranks"))) is not None:
            row["ranks"] = ranks
        top.append(row)
    out["top"] = top
    return out


def write_request(root: Path, req: WindowRequest) -> Path:
    """Make the window's folder with its request, whole (see the module docstring).
    Raises ``OSError``; a folder of that number already there is ``FileExistsError``."""
    final = window_dir(root, req.window)
    tmp = root / WINDOWS_DIR / f".{window_name(req.window)}.tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    write_json_atomic(tmp / REQUEST_FILE, req.to_dict())
    if final.exists():
        raise FileExistsError(final)
    os.rename(tmp, final)
    return final


def read_json_small(path: Path) -> Any:
    """A small JSON file of the session, or ``None`` when it is missing, not a plain file,
    too large or not JSON (each of which a reader treats as "not there")."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    import stat

    if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_JSON_BYTES:
        return None
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def _plain_dirs(folder: Path) -> list[os.DirEntry[str]]:
    try:
        return [e for e in os.scandir(folder) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


@dataclass(frozen=True)
class WindowFiles:
    """One window folder as found on disk. Paths are relative to the session folder."""

    window: int
    request: WindowRequest | None
    traces: tuple[str, ...] = ()
    unfinished: tuple[str, ...] = ()  # traces whose process stopped while writing them
    diagnosis: JsonMapping | None = None
    report: str | None = None  # report.json, when the window was diagnosed
    problems: tuple[str, ...] = field(default=())


def _trace_files(root: Path, folder: Path) -> tuple[list[str], list[str]]:
    done: list[str] = []
    unfinished: list[str] = []
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return done, unfinished
    for e in entries:
        if not e.is_file(follow_symlinks=False) or ".json" not in e.name:
            continue
        rel = str(Path(e.path).relative_to(root))
        if e.name.startswith("."):
            if ".tmp." in e.name:
                unfinished.append(rel)
            continue
        done.append(rel)
    return done, unfinished


def read_window_files(root: Path) -> tuple[WindowFiles, ...]:
    """Every window folder of the session, by number (the first window is not among them)."""
    out: list[WindowFiles] = []
    for entry in _plain_dirs(root / WINDOWS_DIR):
        if not entry.name.isdigit():
            continue
        folder = Path(entry.path)
        n = int(entry.name)
        problems: list[str] = []
        raw = read_json_small(folder / REQUEST_FILE)
        req = request_from_dict(raw)
        if req is None:
            problems.append(f"{WINDOWS_DIR}/{entry.name}/{REQUEST_FILE} is missing or not a window request")
        elif req.window != n:
            problems.append(f"{WINDOWS_DIR}/{entry.name}/{REQUEST_FILE} names window {req.window}")
            req = None
        traces, unfinished = _trace_files(root, folder / TRACES_DIR)
        diag = read_json_small(folder / DIAGNOSIS_FILE)
        report = folder / WINDOW_REPORT_FILE
        out.append(WindowFiles(
            window=n, request=req, traces=tuple(traces), unfinished=tuple(unfinished),
            diagnosis=diag if isinstance(diag, dict) else None,
            report=str(report.relative_to(root)) if report.is_file() and not report.is_symlink() else None,
            problems=tuple(problems),
        ))
    return tuple(sorted(out, key=lambda w: w.window))


# -- demands (gpuprof trigger) ------------------------------------------------------------


def running_with_windows(root: Path) -> None:
    """``None`` when ``root`` is a session whose ``gpuprof run`` is running and follows windows;
    otherwise a :class:`GpuprofError` saying why a demand would go unanswered."""
    from gpuprof.errors import GpuprofError
    from gpuprof.session.layout import META_FILE

    meta = read_json_small(root / META_FILE)
    if not isinstance(meta, dict) or not str(meta.get("schema", "")).startswith("gpuprof.session/"):
        raise GpuprofError("not a gpuprof session folder", root)
    if meta.get("status") != "running":
        raise GpuprofError(f"the run has ended (status {meta.get('status')!r}): a window is recorded only while it runs",
                           root)
    if not isinstance(meta.get("windows"), dict):
        raise GpuprofError("this run takes no windows after the first (an older gpuprof, --no-hooks or "
                           "--profile-active 0)", root)



@dataclass(frozen=True)
class Demand:
    name: str  # the file's name in control/
    requested_unix_s: float
    at_step: int | None = None  # record exactly from this step (several nodes, one step)


def write_demand(root: Path, at_step: int | None = None, now: float | None = None) -> str:
    """Ask the running ``gpuprof run`` for a window; returns the demand's name. Raises ``OSError``."""
    t = time.time() if now is None else now
    name = f"{DEMAND_PREFIX}{time.time_ns()}-{os.getpid()}.json"
    folder = root / CONTROL_DIR
    folder.mkdir(exist_ok=True)
    write_json_atomic(folder / name, {"requested_unix_s": t, "at_step": at_step})
    return name


def read_demands(root: Path) -> list[Demand]:
    """Demands not yet answered, oldest first; a damaged one is read as a plain demand."""
    try:
        entries = [e for e in os.scandir(root / CONTROL_DIR)
                   if e.name.startswith(DEMAND_PREFIX) and e.name.endswith(".json") and e.is_file(follow_symlinks=False)]
    except OSError:
        return []
    out = []
    for e in entries:
        doc = read_json_small(Path(e.path))
        doc = doc if isinstance(doc, dict) else {}
        t = _num(doc.get("requested_unix_s"))
        out.append(Demand(e.name, t if t is not None else 0.0, _int(doc.get("at_step"), 1)))
    return sorted(out, key=lambda d: (d.requested_unix_s, d.name))


def take_demand(root: Path, demand: Demand) -> None:
    """The demand is answered: remove its file (already gone is fine)."""
    try:
        os.unlink(root / CONTROL_DIR / demand.name)
    except OSError:
        pass


__all__ = [
    "DIAGNOSIS_FILE",
    "REQUEST_FILE",
    "WINDOW_REPORT_FILE",
    "Demand",
    "WindowFiles",
    "WindowRequest",
    "diagnosis_from_dict",
    "read_demands",
    "read_json_small",
    "read_window_files",
    "request_from_dict",
    "running_with_windows",
    "take_demand",
    "window_dir",
    "window_name",
    "write_demand",
    "write_request",
]
