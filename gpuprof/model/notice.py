"""A warning as data: a code a program decides by, and the words a person reads.

Warnings are made where their facts are (a reader that had to guess a rank, the accounting
that found the host slowed by the profiler, the pipeline that left out a file of a
folder, the runner whose NVML failed to start) and travel through the analysis as
:class:`Notice` records. They become strings once, where the :class:`~gpuprof.model.report.Report`
is made: the report's ``warnings`` (in the JSON contract and the public API) stay a list of
strings, each the ``text`` of one notice, in order.

Code that must recognise a warning (drop it, count it, put a caveat beside a saving)
compares its ``code`` with one of the constants below, never its words: rewording a
warning changes its ``text`` only. A warning nobody needs to recognise has the code
:data:`TEXT`. A report read back from JSON keeps the words alone (no codes are saved).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# --- codes --------------------------------------------------------------------------------
# A code is a stable, dotted name: ``<where it is made>.<what it says>``. Add one only for
# a warning some code has to recognise; the rest are TEXT.

TEXT = "text"
"""A warning no code recognises: its words are all there is to it."""

GUESSED_RANK = "rank.guessed"
"""readers.ranks.resolve_rank: the trace records no rank and its file name gives none; the
rank is the file's position in its folder's listing (``rank``: the rank used)."""

PYTHON_STACKS = "trust.python_stacks"
"""accounting.hostfacts.trust_warnings: the trace recorded Python stacks (with_stack=True)."""

SLOW_HOST = "trust.slow_host"
"""accounting.hostfacts.trust_warnings: host ops run slow under the profiler (median
``aten::empty`` over :data:`gpuprof.accounting.hostfacts.SLOW_EMPTY_US`)."""

FILTERED_TRACE = "trust.filtered"
"""accounting.hostfacts.trust_warnings: every runtime call launched device work (filtered or sampled)."""

FEW_LAUNCHES = "trust.few_launches"
"""accounting.hostfacts.trust_warnings: under half of the device work has its launch call."""

SKIPPED_UNREADABLE = "input.skipped_unreadable"
"""pipeline: a file found in a folder could not be read and was left out (``path``: the file)."""

NO_SAMPLING = "session.no_sampling"
"""record.runner / session.reader: NVML could not start, so no GPU was sampled."""

CODES = (TEXT, GUESSED_RANK, PYTHON_STACKS, SLOW_HOST, FILTERED_TRACE, FEW_LAUNCHES, SKIPPED_UNREADABLE, NO_SAMPLING)


@dataclass(frozen=True)
class Notice:
    """One warning: ``code`` (one of :data:`CODES`) and ``text``, its words as the report
    shows them; ``rank`` the rank it is about and ``path`` the file, where it has one."""

    code: str
    text: str
    rank: int | None = None
    path: str | None = None


def said(text: str) -> Notice:
    """A warning no code needs to recognise (code :data:`TEXT`)."""
    return Notice(TEXT, text)


def said_all(texts: Iterable[str]) -> tuple[Notice, ...]:
    return tuple(Notice(TEXT, t) for t in texts)


def words(notices: Iterable[Notice]) -> tuple[str, ...]:
    """The notices as the report's warnings: their texts, in order."""
    return tuple(n.text for n in notices)


def of_code(notices: Iterable[Notice], code: str) -> tuple[Notice, ...]:
    """The notices with ``code``, in order."""
    return tuple(n for n in notices if n.code == code)


def without(notices: Iterable[Notice], code: str) -> tuple[Notice, ...]:
    """The notices but those with ``code``, in order."""
    return tuple(n for n in notices if n.code != code)


__all__ = [
    "CODES",
    "FEW_LAUNCHES",
    "FILTERED_TRACE",
    "GUESSED_RANK",
    "NO_SAMPLING",
    "PYTHON_STACKS",
    "SKIPPED_UNREADABLE",
    "SLOW_HOST",
    "TEXT",
    "Notice",
    "of_code",
    "said",
    "said_all",
    "without",
    "words",
]
