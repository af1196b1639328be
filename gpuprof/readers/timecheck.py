"""Which events have times that can be times; the others are dropped, counted and named.

A trace is untrusted input. An event whose ``ts`` is missing would otherwise sit at time 0
(a window of 52 days beside real timestamps), and a corrupted duration (``2**80``,
``1e308``, an 11.6-day kernel from a broken GPU clock) would swallow every other event.
Such events are dropped before any analysis, and the trace gets one warning per kind
saying how many were skipped ("412 events without a timestamp ('ts') were skipped").

What is usable:

* ``ts`` (microseconds): a number with ``|ts| <= 2**53`` (about 285 years: any clock's
  microseconds fit, and every such value is exact in a float).
* ``dur`` of a complete (``X``) event, or the span of a begin/end pair: a number from 0 to
  :data:`MAX_EVENT_DURATION_US` (24 hours). No single op, kernel or copy of a profiled
  window runs that long (a profiler trace covers seconds to minutes of a job; even a
  collective hung until NCCL's timeout stays under an hour), so a longer duration can only
  be a broken clock or a corrupted file.

A missing value is NaN (see :mod:`gpuprof.readers.events`); a value that is not a number
(``"abc"``, ``"NaN"``) is infinite there, so the two are told apart here.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

MAX_ABS_TS_US = float(2**53)
MAX_EVENT_DURATION_US = 24 * 3600 * 1e6

F64 = npt.NDArray[np.float64]
_KINDS = (
    ("no_ts", "without a timestamp ('ts')"),
    ("bad_ts", "whose timestamp ('ts') is not a time (not a number, or beyond 2**53 us)"),
    ("no_dur", "without a duration ('dur')"),
    ("negative", "with a negative duration"),
    ("too_long", "whose duration is not a number or longer than 24 hours (a broken clock?)"),
)


class TimeChecks:
    """Counts, per kind, of the events of one trace dropped for unusable times."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def usable(self, ts: F64, dur: F64 | None = None) -> npt.NDArray[np.bool_] | None:
        """Mask of the rows whose ``ts`` (and ``dur``, when given) are usable, counting
        the others; ``None`` when every row is (the common case: nothing to filter)."""
        ok = np.abs(ts) <= MAX_ABS_TS_US  # NaN compares false
        if dur is not None:
            ok &= (dur >= 0.0) & (dur <= MAX_EVENT_DURATION_US)
        if bool(ok.all()):
            return None
        bad = ~ok
        no_ts = bad & np.isnan(ts)
        bad_ts = bad & ~no_ts & ~(np.abs(ts) <= MAX_ABS_TS_US)
        self._add("no_ts", no_ts)
        self._add("bad_ts", bad_ts)
        if dur is not None:
            rest = bad & ~no_ts & ~bad_ts
            no_dur = rest & np.isnan(dur)
            negative = rest & (dur < 0.0)
            self._add("no_dur", no_dur)
            self._add("negative", negative)
            self._add("too_long", rest & ~no_dur & ~negative)
        return ok

    def _add(self, kind: str, mask: npt.NDArray[np.bool_]) -> None:
        n = int(np.count_nonzero(mask))
        if n:
            self.counts[kind] = self.counts.get(kind, 0) + n

    def warnings(self) -> list[str]:
        """One line per kind of dropped events, in a fixed order."""
        out = []
        for kind, text in _KINDS:
            n = self.counts.get(kind, 0)
            if n:
                out.append(f"{n} event {text} was skipped" if n == 1 else f"{n} events {text} were skipped")
        return out
