"""Names a user typed (causes, scenarios, knobs, formats): lenient matching, and "did you
mean ...?" for a near miss."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def canonical(word: str) -> str:
    """How names compare: trimmed, lower case, ``-`` read as ``_`` (``dp-exposed``)."""
    return word.strip().lower().replace("-", "_")


def match_name(word: str, choices: Iterable[str]) -> str | None:
    """The choice ``word`` names, up to case and ``-``/``_``; ``None`` when none."""
    w = canonical(word)
    return next((c for c in choices if canonical(c) == w), None)


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The choice nearest to a mistyped ``word``, or ``None`` when none is close."""
    by_canon = {canonical(c): c for c in choices}
    w = canonical(word)
    if w in by_canon:
        return by_canon[w]
    match = difflib.get_close_matches(w, list(by_canon), n=1, cutoff=0.6)
    if match:
        return by_canon[match[0]]
    # A prefix that names one choice only (``pipe`` -> ``pipeline_bubble``).
    starts = [c for k, c in by_canon.items() if k.startswith(w)] if len(w) >= 3 else []
    return starts[0] if len(starts) == 1 else None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``" (did you mean 'straggler'?)"`` for a near miss, else ``""`` (for error messages)."""
    best = closest(word, choices)
    return f" (did you mean {best!r}?)" if best is not None else ""
