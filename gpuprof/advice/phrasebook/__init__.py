"""The phrasebook: findings in, the words of recommendations out.

Advisors measure and return :class:`~gpuprof.advice.finding.Finding` records; this package
is the one place in :mod:`gpuprof.advice` that writes a sentence a user reads: titles,
evidence, actions, the caveats beside a saving, the general advice and the line for advice
held back. :func:`recommendation` turns a finding into the report's
:class:`~gpuprof.model.report.Recommendation`, its facts carried beside the prose.

Each family of findings has its module of phrases, registered by name in the index
(:mod:`~gpuprof.advice.phrasebook.book`): ``replays`` (the savings every family shares),
``inputs`` (the local findings' common lines, the DataLoader, syncs), ``memory``, ``host``,
``stragglers``, ``communication``, ``pipeline``, ``samples`` and ``general`` (general advice,
caveats, the final pass's words). A title is the phrase ``title.<id>`` unless the finding
names another. Numbers are written through :mod:`gpuprof.util.phrases`. The unit a report
measures in (a step, or the window without step markers) is said as each finding is
worded (:mod:`~gpuprof.advice.phrasebook.unit`).
"""

from __future__ import annotations

from gpuprof.advice.finding import Finding
from gpuprof.advice.phrasebook import (  # noqa: F401 -- importing a family registers its phrases
    communication,
    general,
    host,
    inputs,
    memory,
    pipeline,
    replays,
    samples,
    slowpaths,
    stragglers,
)
from gpuprof.advice.phrasebook.book import PHRASES, lines, sentence, words
from gpuprof.advice.phrasebook.unit import Unit
from gpuprof.model.report import Recommendation


def recommendation(f: Finding, unit: Unit = Unit.STEP) -> Recommendation:
    """The recommendation a finding reads as, its title and evidence measured in ``unit``
    (its actions say what to do in a step, whatever the report measures in)."""
    return Recommendation(
        id=f.id,
        category=f.cause,
        title=sentence(f.title, unit),
        estimated_savings_pct=f.saving_pct,
        ranks=f.ranks,
        evidence=lines(f.evidence, unit),
        actions=lines(f.actions),
        whatif=f.whatif,
        savings_low_pct=f.savings_low_pct,
        savings_high_pct=f.savings_high_pct,
        facts=dict(f.facts),
    )


__all__ = ["PHRASES", "Unit", "lines", "recommendation", "sentence", "words"]
