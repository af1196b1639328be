"""Trace files -> :class:`~gpuprof.model.timeline.RankTrace`, whatever format they are in.

Usage::

    sources = discover(["traces/"])       # files and folders -> TraceSource per file
    for src in sources:
        for trace in src.load():          # a timeline file holds many workers
            ...
    traces = load_all(["traces/"])        # the same, plus the duplicate-rank check

The format is told by content, not by file name: a Kineto trace has Kineto ``cat``
values (``kernel``, ``cpu_op``, ``Kernel``, ``Operator``, ...) or Kineto top-level keys
(``schemaVersion``, ``deviceProperties``); any other Chrome trace-event file with complete
events is read as an op-level timeline of framework timer ops.

Rank of a Kineto trace: ``distributedInfo.rank``, else the rank in the file name
(``rank-3``, ``rank3``, ``_rank_3``, ``worker3``), else the file's position in the sorted
folder listing (with a warning in ``RankTrace.warnings``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuprof.errors import BadTraceError
from gpuprof.model.notice import Notice
from gpuprof.model.timeline import RankTrace
from gpuprof.readers.jsonio import NotATraceError, RawTrace, decode_trace
from gpuprof.readers.kineto import KINETO_HOLDS, looks_like_kineto, read_kineto
from gpuprof.readers.limits import ReadLimits
from gpuprof.readers.merged import merged_form, mixed_ranks, refuse_mixed, split_ranks
from gpuprof.readers.optimeline import looks_like_timeline, read_timeline
from gpuprof.readers.ranks import check_ranks, rank_hint_from_name, resolve_rank
from gpuprof.readers.textstream import text_blocks
from gpuprof.session.layout import META_FILE

__all__ = [
    "NotATraceError",
    "ReadLimits",
    "TraceSource",
    "check_ranks",
    "discover",
    "is_trace_name",
    "load_all",
    "load_file",
    "not_a_trace",
]

_TRACE_SUFFIXES = (".json", ".json.gz")
# Files of a ``gpuprof run`` session folder that are not traces.
_NOT_TRACES = ("session.json", "gpuprof-session.json", "ground_truth.json")  # metadata beside traces
_NOT_TRACE_PREFIXES = ("samples",)
_NOT_TRACE_SUFFIXES = (".gpuprof.json",)  # reports gpuprof.torch.trace_handler saves beside traces
# A file found in a folder whose start does not look like a trace is read while
# discovering, up to this size, to skip JSON that is not a trace (configs, stamp files,
# all small). Larger files are taken as traces.
_SCREEN_MAX_BYTES = 1 << 20
_PEEK_BYTES = 1 << 16  # text looked at first: a trace names "traceEvents" / "ph" early


@dataclass(frozen=True)
class TraceSource:
    """One trace file to read; picklable so that ranks can be read in worker processes."""

    path: Path
    rank_hint: int | None  # from the file name (rank-3, rank3, worker3, _rank_3 ...)
    order: int  # position in the sorted folder listing (among all inputs, in order)
    limits: ReadLimits = field(default_factory=ReadLimits)
    # Found in a folder (not named on the command line): when it cannot be read, the other
    # files of the job are analyzed without it, with a warning (unless --strict).
    in_folder: bool = False

    def load(self) -> list[RankTrace]:
        """Read the file: one RankTrace (Kineto) or one per worker (op-level timeline)."""
        return load_file(self.path, self.rank_hint, self.order, self.limits)


def load_file(
    path: Path, rank_hint: int | None = None, order: int = 0, limits: ReadLimits | None = None
) -> list[RankTrace]:
    """Read one trace file into its rank(s); raises :class:`BadTraceError` when unreadable.

    ``rank_hint`` defaults to the rank stated in the file name.
    """
    if rank_hint is None:
        rank_hint = rank_hint_from_name(path)
    return _read(decode_trace(path, limits), path, rank_hint, order, limits)


def _read(
    raw: RawTrace, path: Path, rank_hint: int | None, order: int, limits: ReadLimits | None = None
) -> list[RankTrace]:
    if looks_like_kineto(raw):
        form = merged_form(raw.first)
        if form is not None:
            return [_kineto(p.raw, path, p.rank, None, 0, p.warnings)[0] for p in split_ranks(raw, form, path)]
        trace, gpus = _kineto(raw, path, None, rank_hint, order)
        why = mixed_ranks(trace.host_cols, gpus)
        if why is not None:
            return _split_later(path, why, limits)
        return [trace]
    if looks_like_timeline(raw):
        return read_timeline(raw, path)
    raise NotATraceError("JSON is not a trace (no complete 'X' or begin 'B' events of a known kind)", path)


def _kineto(
    raw: RawTrace,
    path: Path,
    rank: int | None,
    rank_hint: int | None,
    order: int,
    notes: tuple[str, ...] = (),
) -> tuple[RankTrace, dict[Any, int]]:
    """One rank's Kineto trace (``rank`` given for a rank split out of a merged file), and
    its device events per GPU pid."""
    device, host, steps, memory, facts = read_kineto(raw)
    warnings = list(facts.warnings) + list(notes)
    guessed: tuple[Notice, ...] = ()
    if rank is None:
        rank, warning = resolve_rank(facts.rank, rank_hint, order)
        if warning is not None:
            guessed = (warning,)
    trace = RankTrace(
        rank=rank,
        source=str(path),
        fmt="kineto",
        device=device,
        host=host,
        steps=steps,
        device_name=facts.device_name,
        device_memory_bytes=facts.device_memory_bytes,
        world_size=facts.world_size,
        process_groups=facts.process_groups,
        memory=memory,
        warnings=tuple(warnings),
        notices=guessed,
        device_index=facts.device_index,
        truncated=raw.cut_off_at_bytes is not None,
        python_stacks=facts.python_stacks,
        step_marker=facts.step_marker,
        holds=KINETO_HOLDS,
    )
    return trace, facts.device_pids


def _split_later(path: Path, why: str, limits: ReadLimits | None) -> list[RankTrace]:
    """A file that mixes ranks: split it when its rank marks only come later than its
    first piece (e.g. on metadata events at the end), else refuse it.

    Splitting reads the file a second time: a named pipe, read once as a stream, cannot
    be (reading it again would wait for a writer that is gone), so such a file is refused."""
    if not path.is_file():
        raise refuse_mixed(why + "; a named pipe cannot be read twice to split it", path)
    raw = decode_trace(path, limits)
    events = [e for piece in raw.pieces() for e in piece]
    form = merged_form(events)
    if form is None:
        raise refuse_mixed(why, path)
    raw.first, raw.rest = events, iter(())
    return [_kineto(p.raw, path, p.rank, None, 0, p.warnings)[0] for p in split_ranks(raw, form, path)]


def not_a_trace(path: Path) -> str | None:
    """Why a small file is valid JSON but not a trace; ``None`` when it is a trace, is too
    large to check here, or is unreadable (reading it then fails, naming the file)."""
    try:
        blocks = text_blocks(path, [], _PEEK_BYTES)
        head = next(blocks, b"")[:_PEEK_BYTES]
        blocks.close()
        start = head.lstrip()[:1]
        if (start == b"{" and b'"traceEvents"' in head) or (start == b"[" and b'"ph"' in head):
            return None  # looks like a trace: read once, later
        if path.stat().st_size > _SCREEN_MAX_BYTES:
            return None
        raw = decode_trace(path)
        if looks_like_kineto(raw) or looks_like_timeline(raw):
            return None
        return "JSON is not a trace (no complete 'X' or begin 'B' events of a known kind)"
    except NotATraceError as exc:
        return exc.message
    except (OSError, BadTraceError):
        return None


def is_trace_name(path: Path) -> bool:
    """True for file names a folder scan treats as traces (``*.json``, ``*.json.gz``)."""
    name = path.name
    if name in _NOT_TRACES or name.startswith(_NOT_TRACE_PREFIXES) or name.startswith("."):
        return False
    if name.endswith(_NOT_TRACE_SUFFIXES):
        return False
    return name.endswith(_TRACE_SUFFIXES)


def _scan_folder(folder: Path, skipped: list[str] | None = None) -> list[Path]:
    try:
        entries = sorted(folder.iterdir(), key=lambda p: p.name)
    except OSError as exc:
        raise BadTraceError(f"cannot list folder: {exc.strerror or exc}", folder) from None
    if (folder / META_FILE).is_file():
        # A gpuprof run session knows where its traces are (gpuprof.session.layout): the
        # files beside them (report.json, samples) are its own, never traces; the traces a
        # job's own torch.profiler wrote were brought into traces/job/ when the run ended.
        # Only files inside the folder are read (gpuprof.session.trust).
        from gpuprof.session.reader import session_traces

        own, job, notes = session_traces(folder)
        if skipped is not None:
            skipped.extend(notes)
        return [p for p in own if is_trace_name(p)] + job
    files = [p for p in entries if p.is_file() and is_trace_name(p)]
    if files:
        return files
    # Other folders may keep their traces one level down, as a session does.
    by_sub: dict[str, list[Path]] = {}
    for sub in (p for p in entries if p.is_dir() and not p.name.startswith(".")):
        try:
            found = sorted(
                (p for p in sub.iterdir() if p.is_file() and is_trace_name(p)), key=lambda p: p.name
            )
        except OSError:
            continue
        if found:
            by_sub[sub.name] = found
    if len(by_sub) > 1:
        # Each subfolder is most likely a job of its own (a folder of collected traces):
        # reading them all would only end in ranks claimed twice, after reading them all.
        names = list(by_sub)
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        raise BadTraceError(
            f"holds {len(names)} separate trace folders ({shown}): analyze one job at a time, "
            f"e.g. gpuprof analyze {folder / names[0]}",
            folder,
        )
    return [f for found in by_sub.values() for f in found]


def discover(
    paths: Sequence[str | Path], skipped: list[str] | None = None, limits: ReadLimits | None = None
) -> list[TraceSource]:
    """Trace sources for files and folders; raises :class:`BadTraceError` naming a bad path.

    Files are taken as given (whatever their name); folders contribute their ``*.json`` and
    ``*.json.gz`` files (``session.json``, ``samples*`` and non-JSON files are skipped),
    and when they hold none at top level (or are a ``gpuprof run`` session), those one
    level down, e.g. in ``traces/``. A folder (not a session) with no traces at top level
    and traces in several subfolders is a collection of jobs: :class:`BadTraceError`.

    A file found in a folder that is valid JSON but not a trace (a config, a stamp file)
    is left out, with a line saying so appended to ``skipped``; a file named in ``paths``
    is always read (and fails when it is not a trace), as is a damaged file. ``limits``
    bound what reading each file may cost (default: :class:`ReadLimits`).
    """
    limits = ReadLimits() if limits is None else limits
    if not paths:
        raise BadTraceError("no trace path given")
    sources: list[TraceSource] = []
    for raw in paths:
        if not str(raw).strip():  # Path("") is the current folder: an unset "$TRACES" would analyze it
            raise BadTraceError("an empty path was given (an unset variable?): name a trace file or folder")
        p = Path(raw)
        if p.is_dir():
            files = _scan_folder(p, skipped)
            if not files:
                raise BadTraceError("folder holds no trace files (*.json, *.json.gz)", p)
            strays = {f: why for f in files if (why := not_a_trace(f)) is not None}
            if len(strays) == len(files):
                shown = "; ".join(f"{f.name}: {why}" for f, why in list(strays.items())[:3])
                raise BadTraceError(f"folder holds no traces ({shown})", p)
            if skipped is not None:
                skipped.extend(f"skipped {f}: {why}" for f, why in strays.items())
            files = [f for f in files if f not in strays]
            base = len(sources)
            sources.extend(
                TraceSource(f, rank_hint_from_name(f), base + i, limits, in_folder=True) for i, f in enumerate(files)
            )
        elif p.exists():
            sources.append(TraceSource(p, rank_hint_from_name(p), len(sources), limits))
        else:
            raise BadTraceError("no such file or folder", p)
    _refuse_repeats(sources)
    return sources


def _refuse_repeats(sources: Sequence[TraceSource]) -> None:
    """The same file named twice, or by two paths (a symlink, a folder and a file in it),
    would be read as two ranks and its time counted twice: refuse it, naming it."""
    seen: dict[object, Path] = {}
    for src in sources:
        try:
            st = src.path.stat()
        except OSError:
            continue  # reading it will say what is wrong
        key: object = (st.st_dev, st.st_ino) if st.st_ino else src.path.resolve()
        first = seen.setdefault(key, src.path)
        if first is not src.path:
            how = "given twice" if first == src.path else f"the same file as {first}"
            raise BadTraceError(f"{how}: give each trace once (it would be counted as two ranks)", src.path)


def load_all(paths: Sequence[str | Path]) -> list[RankTrace]:
    """Discover, read and rank-check: every rank of every trace, sorted by rank."""
    traces: list[RankTrace] = []
    for src in discover(paths):
        traces.extend(src.load())
    check_ranks(traces)
    return sorted(traces, key=lambda t: t.rank)
