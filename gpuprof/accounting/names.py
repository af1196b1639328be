"""What ran when, by name: the answer to "what is this?" for a stretch of a rank's timeline.

Two tracks per rank, each a set of named spans on the rank's own clock inside its window:

- ``device``: the device work (kernels, copies, memsets; an op-level timeline's timer ops),
  on every stream;
- ``host``: the top-level operators and annotations of the host thread that launches the
  device work (the thread with the most launch calls, else the most operator time), i.e.
  the outermost call the host was in (``Optimizer.step#AdamW.step``, ``## forward ##``,
  ``enumerate(DataLoader)#...``); step markers are not operators.

:meth:`NameTrack.name_over` gives the name that covers most of an interval, which the
report's timeline (:mod:`gpuprof.job.stepview`) puts beside each segment: compute and
communication under the device work they are, time the device lost under what the host
was doing meanwhile. Pure: a trace in, small arrays out (a name index per span; the names
once).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from gpuprof.model.grouping import by_start
from gpuprof.model.table import one_of
from gpuprof.model.timeline import Category, Kind, RankTrace

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

DEVICE_KINDS = (int(Kind.KERNEL), int(Kind.MEMCPY), int(Kind.MEMSET), int(Kind.TIMER))
HOST_KINDS = (int(Kind.OP), int(Kind.ANNOTATION))


def _empty() -> tuple[FloatArray, FloatArray, IntArray]:
    return np.empty(0), np.empty(0), np.empty(0, dtype=np.int64)


@dataclass(frozen=True)
class NameTrack:
    """Named spans ``(start_us, end_us, name index)`` sorted by start, per track."""

    names: tuple[str, ...] = ()
    device: tuple[FloatArray, FloatArray, IntArray] = field(default_factory=_empty)
    host: tuple[FloatArray, FloatArray, IntArray] = field(default_factory=_empty)

    def name_over(self, track: str, lo_us: float, hi_us: float) -> str | None:
        """The name whose spans cover most of ``[lo_us, hi_us)`` on ``track`` (``device`` or
        ``host``), as a person reads it (:func:`short_name`); ``None`` when nothing of that
        track runs there."""
        starts, ends, idx = self.device if track == "device" else self.host
        if starts.size == 0 or hi_us <= lo_us:
            return None
        longest = float(np.max(ends - starts))
        a = int(np.searchsorted(starts, lo_us - longest, side="left"))
        b = int(np.searchsorted(starts, hi_us, side="left"))
        if b <= a:
            return None
        s, e, k = starts[a:b], ends[a:b], idx[a:b]
        overlap = np.minimum(e, hi_us) - np.maximum(s, lo_us)
        keep = overlap > 0
        if not keep.any():
            return None
        weight = np.bincount(k[keep], weights=overlap[keep], minlength=len(self.names))
        return short_name(self.names[int(np.argmax(weight))])


_TEMPLATE = re.compile(r"<[^<>]*>")
_ANON = re.compile(r"\(anonymous namespace\)::")
_FUNCTION = re.compile(r"^(?:void )?([\w:~]+)\(")  # a C++ function signature: the name before its parameters
MAX_NAME = 80


def short_name(name: str) -> str:
    """A kernel's name as a person reads it: ``void at::native::(anonymous
    namespace)::CatArrayBatchedCopy<float, ...>(float*, ...)`` is
    ``at::native::CatArrayBatchedCopy``; other names are kept (cut at :data:`MAX_NAME`)."""
    text = str(name)
    if "(" in text:
        bare = _ANON.sub("", text)
        while (shorter := _TEMPLATE.sub("", bare)) != bare:
            bare = shorter
        m = _FUNCTION.match(bare)
        if m and bare.rstrip().endswith(")"):
            text = m.group(1)
    return text if len(text) <= MAX_NAME else text[: MAX_NAME - 1] + "…"


@dataclass(frozen=True)
class NameTotal:
    """One name's device time inside a window: calls that started there and their time (µs)."""

    name: str
    calls: int
    total_us: float

    def to_dict(self) -> dict[str, str | int | float]:
        """The row of a rank's ``kernels`` table in the report's JSON."""
        return {"name": self.name, "calls": self.calls, "total_us": self.total_us}


def top_names(track: NameTrack, lo_us: float, hi_us: float, n: int = 20) -> list[NameTotal]:
    """The ``n`` names of the device track with the most time inside ``[lo_us, hi_us]``:
    most time first (a rank's per-kernel table)."""
    starts, ends, idx = track.device
    if starts.size == 0:
        return []
    dur = np.clip(np.minimum(ends, hi_us) - np.maximum(starts, lo_us), 0.0, None)
    total = np.bincount(idx, weights=dur, minlength=len(track.names))
    calls = np.bincount(idx, minlength=len(track.names))
    order = [int(i) for i in np.argsort(-total, kind="stable") if total[i] > 0][:n]
    return [NameTotal(track.names[i], int(calls[i]), round(float(total[i]), 3)) for i in order]


def _names_of(table: object, rows: npt.NDArray[np.bool_]) -> tuple[IntArray, list[str]]:
    codes = np.asarray(table.codes("name"))[rows].astype(np.int64)  # type: ignore[attr-defined]
    labels = table.labels("name")  # type: ignore[attr-defined]
    return codes, [str(x) for x in labels]


def _top_level(start: FloatArray, end: FloatArray) -> npt.NDArray[np.bool_]:
    """Spans (sorted by start, longest first at equal starts) not inside an earlier one."""
    if start.size == 0:
        return np.zeros(0, dtype=bool)
    reach = np.maximum.accumulate(end)
    before = np.concatenate(([-np.inf], reach[:-1]))
    return start >= before


def name_track(trace: RankTrace, lo_us: float, hi_us: float) -> NameTrack:
    """The rank's named spans that overlap its window ``[lo_us, hi_us]``."""
    index: dict[str, int] = {}

    def intern(codes: IntArray, labels: list[str]) -> IntArray:
        remap = np.empty(len(labels) + 1, dtype=np.int64)
        for i, lab in enumerate(labels):
            remap[i] = index.setdefault(lab, len(index))
        remap[-1] = index.setdefault("", len(index))  # a missing name (code -1)
        return remap[codes]

    dev = trace.device_cols
    device = _empty()
    if len(dev):
        ds, de = dev["start_us"], dev["end_us"]
        rows = one_of(dev["kind"], DEVICE_KINDS) & (de > lo_us) & (ds < hi_us)
        codes, labels = _names_of(dev, rows)
        order = np.argsort(ds[rows], kind="stable")
        device = (ds[rows][order], de[rows][order], intern(codes, labels)[order])
    host_cols = trace.host_cols
    host = _empty()
    if len(host_cols):
        hs, he, tid = host_cols["start_us"], host_cols["end_us"], host_cols["tid"]
        cat = host_cols["category"]
        launches = cat == int(Category.LAUNCH)
        ops = one_of(host_cols["kind"], HOST_KINDS) & (cat != int(Category.STEP))
        counts: Any = np.empty(0)
        tids: Any = np.empty(0, dtype=np.int64)
        if launches.any():
            tids, counts = np.unique(tid[launches], return_counts=True)
        elif ops.any():
            tids, inv = np.unique(tid[ops], return_inverse=True)
            counts = np.bincount(inv, weights=(he - hs)[ops])
        if tids.size:
            main = tids[int(np.argmax(counts))]
            rows = ops & (tid == main) & (he > lo_us) & (hs < hi_us)
            codes, labels = _names_of(host_cols, rows)
            s, e = hs[rows], he[rows]
            order = by_start(s, -(e - s))  # np.lexsort((-(e - s), s)), the rows being sorted
            s, e, k = s[order], e[order], intern(codes, labels)[order]
            top = _top_level(s, e)
            host = (s[top], e[top], k[top])
    return NameTrack(names=tuple(sorted(index, key=index.__getitem__)), device=device, host=host)


__all__ = ["NameTotal", "NameTrack", "name_track", "top_names"]
