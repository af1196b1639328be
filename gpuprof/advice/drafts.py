"""Recommendations before their last words: each with the finding it was worded from and
the lines the passes after its advisor add, worded once at the end of
:func:`gpuprof.advice.advise_all`.

The advisors' recommendations are ranked, held back and qualified as recommendations (their
estimate, cause, ranks and what-if decide that, not their words), but the lines added after
an advisor (the saving against its cause's share, :func:`gpuprof.advice.general.disagreement`;
what a fix adds to those above it, the ranking's ``rank.adds``) stay records
(:class:`~gpuprof.advice.finding.Said`) until :func:`word_once` says each recommendation's
evidence: a line a higher-ranked recommendation already gave is left out, the same
finding being the same phrase with the same values (not the same words). A recommendation
an advisor worded itself (no finding: a test's stand-in advisor) keeps its words, and is
de-duplicated on them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpuprof.advice.finding import Finding, Said
from gpuprof.advice.phrasebook import Unit, lines
from gpuprof.model.report import Recommendation


@dataclass(frozen=True)
class Draft:
    """A ranked recommendation before its evidence is said: ``finding`` is what it was
    worded from (``None``: its advisor worded it), ``added`` the lines said after it."""

    recommendation: Recommendation
    finding: Finding | None = None
    added: tuple[Said, ...] = ()


def word_once(drafts: Sequence[Draft], unit: Unit) -> tuple[Recommendation, ...]:
    """The recommendations of ``drafts`` (in rank order) with their evidence said in ``unit``,
    each line once: not again after a higher-ranked recommendation gave it."""
    given: list[Said] = []  # said by a recommendation ranked higher (a list: values may not hash)
    given_words: set[str] = set()
    out: list[Recommendation] = []
    for d in drafts:
        if d.finding is not None:
            records = [s for s in (*d.finding.evidence, *d.added) if s not in given]
            given.extend(records)
            evidence = lines(records, unit)
        else:
            evidence = tuple(x for x in (*d.recommendation.evidence, *lines(d.added, unit)) if x not in given_words)
        given_words.update(evidence)
        out.append(replace(d.recommendation, evidence=evidence))
    return tuple(out)


__all__ = ["Draft", "word_once"]
