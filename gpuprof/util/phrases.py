"""The one way every report writes a number, a count or a set of ranks in prose.

Advice evidence, the renderers (text, Markdown, HTML), the command line's own lines and the
JSON report's strings all format through these functions, so that one step reads the same
everywhere (``2.21 s``, never ``2,208.6 ms`` in one place and ``2208.9 ms`` in another).
Pure functions of plain values; nothing here knows a report.

- Durations (:func:`duration`): ``850 µs``, ``12.3 ms``, ``2.21 s``: microseconds below a
  millisecond, milliseconds below a second, seconds from there; thousands separators.
- Shares (:func:`pct`): ``39.0%``, no space before the sign; a share that rounds to zero
  never shows a sign (``-0.0`` is ``0.0``). Differences of shares (:func:`pp`):
  ``+2.5 pp``.
- Counts (:func:`count`): ``1 step``, ``3 steps``.
- Ranks (:func:`ranks`): ``rank 3``, ``ranks 0-3, 6``, ``every rank``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

NA = "N/A"


def _clean(value: float, digits: int) -> float:
    """``value`` rounded for display, with a negative zero made positive."""
    v = round(value, digits)
    return 0.0 if v == 0 else v


def duration(value_us: float | None) -> str:
    """A duration with its unit: ``850 µs``, ``3.5 µs``, ``12.3 ms``, and from one second
    on ``2.21 s`` (never ``1,234.5 ms``); ``N/A`` when unknown."""
    if value_us is None or not math.isfinite(value_us):
        return NA
    a = abs(value_us)
    if a < 999.5:
        return f"{_clean(value_us, 0):,.0f} µs" if a >= 10 or a == 0 else f"{_clean(value_us, 1):.1f} µs"
    if a < 999_950.0:
        return f"{_clean(value_us / 1000.0, 1):,.1f} ms"
    return f"{_clean(value_us / 1_000_000.0, 2):,.2f} s"


def duration_pair(a_us: float | None, b_us: float | None) -> tuple[str, str]:
    """Two durations to compare, with the precision that tells them apart: ``1.14 ms`` and
    ``1.07 ms`` where :func:`duration` would print ``1.1 ms`` twice."""
    a, b = duration(a_us), duration(b_us)
    if a != b or a_us is None or b_us is None or a_us == b_us:
        return a, b
    for digits in (2, 3):
        unit, scale = ("µs", 1.0) if abs(a_us) < 999.5 else ("ms", 1e3) if abs(a_us) < 999_950 else ("s", 1e6)
        x, y = f"{a_us / scale:,.{digits}f} {unit}", f"{b_us / scale:,.{digits}f} {unit}"
        if x != y:
            return x, y
    return a, b


def duration_range(lo_us: float, hi_us: float) -> str:
    """``266 ms-293 ms`` -> ``266.3-292.6 ms`` when both ends have the same unit."""
    a, b = duration(lo_us), duration(hi_us)
    if a == b:
        return a
    na, _, ua = a.rpartition(" ")
    nb, _, ub = b.rpartition(" ")
    return f"{na}-{nb} {ua}" if ua == ub else f"{a} to {b}"


def pct(value: float | None, digits: int = 1) -> str:
    """A share in percent: ``39.0%`` (``N/A`` when unknown)."""
    if value is None or not math.isfinite(value):
        return NA
    return f"{_clean(value, digits):.{digits}f}%"


def value_range(lo: float, hi: float, fmt: Callable[[float], str]) -> str:
    """``1.2 ms-3.4 ms``: both ends as ``fmt`` writes them; one when they read the same
    (``15.0 ms``, never ``15.0 ms-15.0 ms``)."""
    a, b = fmt(lo), fmt(hi)
    return a if a == b else f"{a}-{b}"


def pct_range(lo: float, hi: float, digits: int = 0) -> str:
    """``33-69%``; one value when both ends round the same (``58%``, never ``58-58%``)."""
    a, b = f"{_clean(lo, digits):.{digits}f}", f"{_clean(hi, digits):.{digits}f}"
    return f"{a}%" if a == b else f"{a}-{b}%"


def pp(value: float | None, digits: int = 1) -> str:
    """A difference of shares in percentage points, signed: ``+2.5 pp``, ``0.0 pp``."""
    if value is None or not math.isfinite(value):
        return NA
    v = _clean(value, digits)
    return f"{v:+.{digits}f} pp" if v != 0 else f"{0.0:.{digits}f} pp"


def signed_pct(value: float | None, digits: int = 1) -> str:
    """A signed change in percent: ``+12.0%``, ``-3.5%``, ``0.0%``."""
    if value is None or not math.isfinite(value):
        return NA
    v = _clean(value, digits)
    return f"{v:+.{digits}f}%" if v != 0 else f"{0.0:.{digits}f}%"


def count(n: int, singular: str, plural: str | None = None) -> str:
    """``1 step``, ``3 steps`` (``plural`` for words that do not take an s)."""
    return f"{n:,} {singular if n == 1 else (plural or singular + 's')}"


def span_parts(nums: Sequence[int]) -> list[str]:
    """Sorted numbers as compact parts: runs of consecutive numbers as ``0-3``, and a run of
    four or more at a fixed stride as ``4, 8, ..., 60`` (one tensor-parallel rank per
    position: every fourth rank); anything else one by one."""
    values = sorted(set(nums))
    parts: list[str] = []
    i = 0
    while i < len(values):
        j = i
        if i + 1 < len(values):
            d = values[i + 1] - values[i]
            while j + 1 < len(values) and values[j + 1] - values[j] == d:
                j += 1
            if d == 1:
                parts.append(f"{values[i]}-{values[j]}")
                i = j + 1
                continue
            if j - i + 1 >= 4:
                parts.append(f"{values[i]}, {values[i + 1]}, ..., {values[j]}")
                i = j + 1
                continue
        parts.append(str(values[i]))
        i += 1
    return parts


def spans(nums: Sequence[int]) -> str:
    """``0-3, 6``: sorted, runs of consecutive numbers joined (and runs at a fixed stride,
    :func:`span_parts`)."""
    return ", ".join(span_parts(nums))


def ranks(nums: Sequence[int], every: str = "every rank") -> str:
    """``rank 3``, ``ranks 0-3, 6``; ``every`` (default ``every rank``) for an empty set,
    which a recommendation uses for "all ranks"."""
    values = sorted(set(nums))
    if not values:
        return every
    return f"rank {values[0]}" if len(values) == 1 else f"ranks {spans(values)}"


# The summarizer's warning for a window of a single step; the renderers say it once under
# the report's headline instead (gpuprof.render.figures.report_caveats).
ONE_PROFILED_STEP = "only one profiled step: estimates rest on a single step and may not be typical (low confidence)"


def join_words(items: Sequence[str], last: str = "and") -> str:
    """``1``, ``1 and 2``, ``1, 2 and 4``."""
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + f" {last} " + items[-1]


__all__ = [
    "NA",
    "ONE_PROFILED_STEP",
    "count",
    "duration",
    "duration_pair",
    "duration_range",
    "join_words",
    "pct",
    "pct_range",
    "pp",
    "ranks",
    "signed_pct",
    "spans",
]
