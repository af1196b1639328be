"""Columns of Kineto host and device events, accumulated piece by piece.

Each piece of decoded events is turned into numpy arrays and integer codes at once (the
structs are then dropped); strings are coded through dicts shared by all pieces, so a
name held by a million events is stored once. :meth:`finish` joins the pieces.

Attribute access goes through ``map`` + ``attrgetter`` (C speed); no per-event dict is
ever built.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np
import numpy.typing as npt

from gpuprof.model import classify as cl
from gpuprof.model.dtypes import input_bytes, message_bytes
from gpuprof.model.table import Cat
from gpuprof.model.timeline import Category, Kind
from gpuprof.readers.columns import as_int, int_column, str_column
from gpuprof.readers.events import Event, raw_value
from gpuprof.readers.timecheck import TimeChecks

_NAME = attrgetter("name")
_CAT = attrgetter("cat")
_TID = attrgetter("tid")
_PID = attrgetter("pid")
_ARGS = attrgetter("args")
_CORRELATION = attrgetter("args.correlation")
_STREAM = attrgetter("args.stream")
_NBYTES = attrgetter("args.nbytes")

I8 = npt.NDArray[np.int8]
I32 = npt.NDArray[np.int32]
_COMM = (Category.COLLECTIVE, Category.P2P)
_RUNTIME = int(Kind.RUNTIME)
_DRIVER = int(Kind.DRIVER)
_KERNEL = int(Kind.KERNEL)


def values(items: Sequence[Any], field: str) -> list[Any]:
    """One attribute of every item."""
    return list(map(attrgetter(field), items))


def floats(items: Sequence[Any], field: str) -> npt.NDArray[np.float64]:
    return np.fromiter(map(attrgetter(field), items), np.float64, len(items))


def pick(items: Sequence[Any], rows: npt.NDArray[np.intp]) -> Sequence[Any]:
    """The items at ``rows`` (one ``itemgetter`` call: C speed, no per-row bytecode)."""
    idx = rows.tolist()
    if len(idx) > 1:
        return itemgetter(*idx)(items)  # type: ignore[no-any-return]
    return [items[i] for i in idx]


def timed(
    evs: list[Event], checks: TimeChecks, with_dur: bool = True
) -> tuple[list[Event], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """The events whose ``ts`` (and ``dur``) are usable, with their starts and durations;
    the others are counted in ``checks`` (see :mod:`gpuprof.readers.timecheck`)."""
    start = floats(evs, "ts")
    dur = floats(evs, "dur") if with_dur else np.zeros(len(evs))
    keep = checks.usable(start, dur if with_dur else None)
    if keep is None:
        return evs, start, dur
    rows = np.flatnonzero(keep)
    return [evs[i] for i in rows.tolist()], start[rows], dur[rows]


def timed_piece(
    evs: list[Event], checks: TimeChecks
) -> tuple[list[Event], npt.NDArray[np.float64], npt.NDArray[np.float64], list[Any]] | None:
    """:func:`timed` for a piece of events, with their ``args``; ``None`` when no event of
    the piece is usable (then there is nothing to add)."""
    if not evs:
        return None
    evs, start, dur = timed(evs, checks)
    if not evs:
        return None
    return evs, start, dur, list(map(_ARGS, evs))


def message_sizes(args: Sequence[Any]) -> npt.NDArray[np.int64]:
    """Message bytes of communication events from their ``args`` (-1 where unknown): from
    nelems and dtype, else from the largest input's ``Input Dims`` and ``Input type``."""
    return np.array([_message_bytes(a) for a in args], np.int64)


def _message_bytes(a: Any) -> int:
    size = message_bytes(a.in_nelems, a.out_nelems, a.dtype)
    if size is not None:
        return size
    size = input_bytes(raw_value(a.input_dims), raw_value(a.input_type))
    return -1 if size is None else size


class _Index(dict[Any, int]):
    """value -> code; a value not seen before gets the next code on lookup, so that a
    column is coded in one pass of ``map(index.__getitem__, values)`` at C speed (each
    value hashed once: hashing fresh strings is most of the cost)."""

    def __missing__(self, key: Any) -> int:
        code = self[key] = len(self)
        return code


class Coder:
    """Integer codes for values (strings, ids), shared by all pieces of a trace."""

    def __init__(self) -> None:
        self.index: dict[Any, int] = _Index()

    def encode(self, vals: Sequence[Any]) -> I32:
        try:
            return np.fromiter(map(self.index.__getitem__, vals), np.int32, len(vals))
        except TypeError:  # an unhashable value (a list where a name belongs)
            return self.encode(str_column(vals))

    def encode_attr(self, items: Sequence[Any], get: Callable[[Any], Any]) -> I32:
        """:meth:`encode` of ``map(get, items)``, in one pass when every value is hashable
        (no list of the values is built: each pass over a piece's events costs ~40 ns an
        event)."""
        try:
            return np.fromiter(map(self.index.__getitem__, map(get, items)), np.int32, len(items))
        except TypeError:
            return self.encode(list(map(get, items)))

    def labels(self) -> list[Any]:
        return list(self.index)


def str_categorical(codes: I32, coder: Coder) -> Cat:
    """Categorical of string labels; ``None`` and non-strings become ``""`` / ``str(v)``."""
    labels = str_column(coder.labels())
    merged: dict[str, int] = {}
    remap = np.array([merged.setdefault(s, len(merged)) for s in labels] or [0], np.int32)
    cats = list(merged) or [""]
    return Cat(remap[codes] if len(codes) else codes, cats)


def name_categorical(codes: I32, coder: Coder) -> Cat:
    """Categorical of names (always strings in decoded events) from their codes."""
    return Cat(codes, coder.labels() or [""])


def tid_values(codes: I32, coder: Coder) -> npt.NDArray[np.int64]:
    """Thread / stream ids as int64; old-schema strings ("4093687616", "stream 7") parsed."""
    out = []
    for t in coder.labels():
        v = as_int(t)
        if v is None and isinstance(t, str):
            v = as_int(t.rsplit(" ", 1)[-1])
        out.append(-1 if v is None or not -(2**63) <= v < 2**63 else v)
    table = np.array(out or [-1], np.int64)
    return table[codes] if len(codes) else np.zeros(0, np.int64)


class Parts:
    """Lists of per-piece arrays, one list per column."""

    def __init__(self, columns: Sequence[str]) -> None:
        self.parts: dict[str, list[np.ndarray]] = {c: [] for c in columns}

    def add(self, **arrays: np.ndarray) -> None:
        for name, arr in arrays.items():
            self.parts[name].append(arr)

    def joined(self, name: str, dtype: Any) -> np.ndarray:
        parts = self.parts[name]
        return np.concatenate(parts) if parts else np.zeros(0, dtype)


class _EventColumns:
    """What host and device columns share: the pieces' arrays, names coded with each new
    name classified once (communication or not, by ``is_comm``), and the collective name,
    process group and message size read for the communication rows alone."""

    def __init__(
        self, kind_codes: dict[str, int], checks: TimeChecks, is_comm: Callable[[str], bool], columns: Sequence[str]
    ) -> None:
        self.kind_codes = kind_codes
        self.checks = checks
        self.names, self.colls, self.pgs = Coder(), Coder(), Coder()
        self.colls.index[None] = 0  # code 0: no collective name
        self.pgs.index[None] = 0
        self._is_comm = is_comm
        self._comm_name: list[bool] = []  # per name code: a communication op / kernel?
        self._p = Parts(columns)

    def add(self, evs: list[Event]) -> None:
        """Add a piece of events: the columns every event has (start, end, kind, name)
        here, the others by :meth:`_add_more`, for the events with a usable time."""
        if not evs:
            return
        evs, start, dur = timed(evs, self.checks)
        if not evs:
            return
        kind = np.fromiter(map(self.kind_codes.__getitem__, map(_CAT, evs)), np.int8, len(evs))
        name = self.names.encode_attr(evs, _NAME)
        labels = self.names.labels() if len(self._comm_name) < len(self.names.index) else []
        for label in labels[len(self._comm_name) :]:
            self._comm_name.append(self._is_comm(label))
        self._p.add(start=start, end=start + dur, kind=kind, name=name)
        self._add_more(evs, kind, name)

    def _add_more(self, evs: list[Event], kind: I8, name: I32) -> None:
        """The columns of a piece beyond the shared ones; ``args`` are read only for the
        rows that use them."""
        raise NotImplementedError

    def _comm_name_rows(self, name: I32) -> npt.NDArray[np.bool_]:
        """Per row: its name is a communication op's / kernel's."""
        return np.array(self._comm_name, bool)[name]

    def _comm_columns(self, evs: list[Event], comm: npt.NDArray[np.intp], nbytes: npt.NDArray[np.int64]) -> tuple[I32, I32]:
        """Collective name and process group codes of the rows ``comm`` (0 elsewhere); their
        message sizes go into ``nbytes``."""
        coll = np.zeros(len(evs), np.int32)
        pg = np.zeros(len(evs), np.int32)
        if comm.size:
            comm_args = list(map(_ARGS, pick(evs, comm)))
            coll[comm] = self.colls.encode(values(comm_args, "coll_name"))
            pg[comm] = self.pgs.encode(values(comm_args, "pg_name"))
            nbytes[comm] = message_sizes(comm_args)
        return coll, pg


def _host_comm(label: str) -> bool:
    return cl.classify_host(Kind.OP, label) in _COMM


def _kernel_comm(label: str) -> bool:
    return cl.classify(Kind.KERNEL, label) in _COMM


class HostColumns(_EventColumns):
    """Host events (ops, runtime/driver calls, annotations, frames) of all pieces.

    Only runtime/driver calls carry a correlation id and only communication ops (as
    classified by name: ``record_param_comms``, ``nccl:*``, ``c10d::*``...) carry a
    collective name, process group and message size, so those ``args`` are read for
    those rows alone:
    each pass over a piece's events costs about as much as decoding them.
    """

    def __init__(self, kind_codes: dict[str, int], checks: TimeChecks) -> None:
        columns = ("start", "end", "kind", "name", "tid", "corr", "coll", "pg", "bytes")
        super().__init__(kind_codes, checks, _host_comm, columns)
        self.tids = Coder()

    def _add_more(self, evs: list[Event], kind: I8, name: I32) -> None:
        n = len(evs)
        corr = np.full(n, -1, np.int64)
        launches = np.flatnonzero((kind == _RUNTIME) | (kind == _DRIVER))
        if launches.size:
            corr[launches] = int_column(list(map(_CORRELATION, pick(evs, launches))))
        nbytes = np.full(n, -1, np.int64)
        coll, pg = self._comm_columns(evs, np.flatnonzero(self._comm_name_rows(name)), nbytes)
        self._p.add(tid=self.tids.encode_attr(evs, _TID), corr=corr, coll=coll, pg=pg, bytes=nbytes)

    def finish(self) -> dict[str, Any]:
        """Columns for :func:`make_table` (``category`` still to be filled)."""
        p = self._p
        return {
            "start_us": p.joined("start", np.float64),
            "end_us": p.joined("end", np.float64),
            "kind": p.joined("kind", np.int8),
            "tid": tid_values(p.joined("tid", np.int32), self.tids),
            "correlation": p.joined("corr", np.int64),
            "name": name_categorical(p.joined("name", np.int32), self.names),
            "coll_name": str_categorical(p.joined("coll", np.int32), self.colls),
            "pg": str_categorical(p.joined("pg", np.int32), self.pgs),
            "bytes": p.joined("bytes", np.int64),
        }


class DeviceColumns(_EventColumns):
    """Device events (kernels, copies, memsets) of all pieces, with their GPU (``pid``).

    As for host events, ``args`` read by few rows are read for those rows alone: byte
    counts of copies and memsets, collective names and message sizes of communication
    kernels (newer traces copy them from ``record_param_comms``), and the row
    (``tid``) of events whose ``args`` lack a stream.
    """

    def __init__(self, kind_codes: dict[str, int], checks: TimeChecks) -> None:
        columns = ("start", "end", "kind", "name", "pid", "tid", "stream", "corr", "bytes", "coll", "pg")
        super().__init__(kind_codes, checks, _kernel_comm, columns)
        self.pids, self.tids = Coder(), Coder()
        self.tids.index[None] = 0  # code 0: not read

    def _add_more(self, evs: list[Event], kind: I8, name: I32) -> None:
        n = len(evs)
        stream = int_column(list(map(_STREAM, evs)))
        tid = np.zeros(n, np.int32)
        no_stream = np.flatnonzero(stream < 0)
        if no_stream.size:
            tid[no_stream] = self.tids.encode_attr(pick(evs, no_stream), _TID)
        nbytes = np.full(n, -1, np.int64)
        transfers = np.flatnonzero(kind != _KERNEL)
        if transfers.size:
            nbytes[transfers] = int_column(list(map(_NBYTES, pick(evs, transfers))))
        coll, pg = self._comm_columns(evs, np.flatnonzero((kind == _KERNEL) & self._comm_name_rows(name)), nbytes)
        pid = self.pids.encode_attr(evs, _PID)
        corr = int_column(list(map(_CORRELATION, evs)))
        self._p.add(pid=pid, tid=tid, stream=stream, corr=corr, bytes=nbytes, coll=coll, pg=pg)

    def pid_counts(self) -> dict[Any, int]:
        """Device events per GPU ``pid``."""
        codes = self._p.joined("pid", np.int32)
        if not len(codes):
            return {}
        counts = np.bincount(codes, minlength=len(self.pids.index))
        return {pid: int(n) for pid, n in zip(self.pids.labels(), counts)}

    def finish(self, keep_pid: Any = None) -> dict[str, Any]:
        """Columns of the events of GPU ``keep_pid`` (all when ``None``).

        ``coll_name``/``pg`` are :class:`RowStrings` here: the launch-context resolution
        fills them in for communication kernels before the table is made.
        """
        p = self._p
        cols: dict[str, Any] = {
            "start_us": p.joined("start", np.float64),
            "end_us": p.joined("end", np.float64),
            "kind": p.joined("kind", np.int8),
            "stream": p.joined("stream", np.int64),
            "correlation": p.joined("corr", np.int64),
            "bytes": p.joined("bytes", np.int64),
        }
        name = p.joined("name", np.int32)
        tid = p.joined("tid", np.int32)
        coll = p.joined("coll", np.int32)
        pg = p.joined("pg", np.int32)
        if keep_pid is not None and len(self.pids.index) > 1:
            mask = p.joined("pid", np.int32) == self.pids.index[keep_pid]
            cols = {k: v[mask] for k, v in cols.items()}
            name, tid, coll, pg = name[mask], tid[mask], coll[mask], pg[mask]
        stream = cols["stream"]
        if (stream < 0).any():
            # Old traces and some ROCm events carry the stream only as the row (tid).
            cols["stream"] = np.where(stream < 0, tid_values(tid, self.tids), stream)
        cols["name"] = name_categorical(name, self.names).remove_unused()
        cols["coll_name"] = RowStrings(coll, str_column(self.colls.labels()))
        cols["pg"] = RowStrings(pg, str_column(self.pgs.labels()))
        return cols


class RowStrings:
    """A string per row, kept as codes into labels, read and written by row like a list;
    :meth:`to_cat` gives what :meth:`Cat.from_values` of every row's string gives, without
    making a string per row (the launch-context resolution changes a few rows)."""

    def __init__(self, codes: I32, labels: list[str]) -> None:
        self.codes = codes
        self.labels = labels
        self.changed: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, row: int) -> str:
        got = self.changed.get(row)
        return self.labels[self.codes[row]] if got is None else got

    def __setitem__(self, row: int, value: str) -> None:
        self.changed[row] = value

    def to_cat(self) -> Cat:
        rows = list(self.changed)
        codes = self.codes
        if rows:
            kept = np.ones(len(codes), bool)
            kept[rows] = False
            codes = codes[kept]
        distinct = {self.labels[c] for c in np.unique(codes).tolist()} | set(self.changed.values())
        uniq = sorted(distinct)  # as from_values sorts them
        index = {v: i for i, v in enumerate(uniq)}
        remap = np.array([index.get(v, -1) for v in self.labels] or [-1], np.int64)
        out = remap[self.codes] if len(self.codes) else np.zeros(0, np.int64)
        if rows:
            out[rows] = [index[v] for v in self.changed.values()]
        return Cat(out, uniq)
