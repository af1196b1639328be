"""Which global rank a trace belongs to, and checks that ranks are not claimed twice."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from gpuprof.errors import BadTraceError
from gpuprof.model import notice
from gpuprof.model.notice import Notice

# rank-3, rank3, rank_3, _rank_3, worker3, worker_3, worker-3 (case-insensitive). The
# number must not run into more digits or letters of a longer word ("workers" is no hint).
_RANK_IN_NAME = re.compile(r"(?:rank|worker)[-_]?(\d+)(?![0-9])", re.IGNORECASE)
# A rank is a process of a job: below 2**31 (the largest jobs have some 10**5). A longer
# number in a name (rank<245 digits>, worker9223372036854775808) is no rank.
MAX_RANK = 2**31 - 1


# How the warning begins when a trace's rank had to be guessed. A caller that knows the job
# has a single process (gpuprof.torch outside torch.distributed) leaves the warning out by
# its code (gpuprof.model.notice.GUESSED_RANK), not by these words.
GUESSED_RANK = "the trace does not record its rank"


def rank_hint_from_name(path: Path) -> int | None:
    """The rank a file name states (``trace_rank-3.json`` -> 3), else ``None``."""
    matches = _RANK_IN_NAME.findall(path.name)
    if not matches:
        return None
    digits = matches[-1].lstrip("0") or "0"
    if len(digits) > len(str(MAX_RANK)) or int(digits) > MAX_RANK:
        return None
    return int(digits)


def resolve_rank(trace_rank: int | None, hint: int | None, order: int) -> tuple[int, Notice | None]:
    """The rank to use and, when it had to be guessed, a warning saying so (code
    :data:`gpuprof.model.notice.GUESSED_RANK`).

    Precedence: the rank the trace records (``distributedInfo.rank``), then the rank in
    the file name, then the file's position in the sorted listing of its folder.
    """
    if trace_rank is not None and trace_rank >= 0:
        return trace_rank, None
    if hint is not None:
        return hint, None
    text = f"{GUESSED_RANK} and the file name gives none; using {order}, its position in the folder listing"
    return order, Notice(notice.GUESSED_RANK, text, rank=order)


class Ranked(Protocol):
    """A rank read from a file: a :class:`~gpuprof.model.timeline.RankTrace`, or the
    :class:`~gpuprof.accounting.summary.RankSummary` made of it."""

    @property
    def rank(self) -> int: ...

    @property
    def source(self) -> str: ...


def check_ranks(traces: Sequence[Ranked]) -> None:
    """Raise :class:`BadTraceError` when two traces claim the same rank (naming both files),
    or one file holds a rank twice. The one rule: the readers apply it to traces, the
    pipeline to the summaries its executor gives back (read in other processes)."""
    seen: dict[int, str] = {}
    for t in traces:
        other = seen.get(t.rank)
        if other is not None and other != t.source:
            raise BadTraceError(f"rank {t.rank} is claimed by two files: {other} and {t.source}", t.source)
        if other is not None:
            raise BadTraceError(f"rank {t.rank} appears twice in the same file", t.source)
        seen[t.rank] = t.source
