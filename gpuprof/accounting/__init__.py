"""Per-rank accounting: one rank's trace in, its summary out.

Takes a :class:`gpuprof.model.timeline.RankTrace` (what the readers give) and returns a
:class:`gpuprof.accounting.summary.RankSummary` (``summarize``): the analysis window
(``window``), its exact split into compute and lost time, the local rules' claims on the
lost time (``rules``), measured facts for the advice (``facts``, a typed
:class:`~gpuprof.accounting.factrecord.RankFacts`; the host's own in
``hostfacts``, where lost time sits by enclosing op in ``enclosing``; ``evidence``: what
the trace lacks), the rank's communication calls (``comms``) and its dependency graph
(``graph``, its host side in ``graph_host``), which the job model couples with the other
ranks'. ``attribution`` gives each lost microsecond to one cause by the documented
precedence, once the job-level claims are known. Nothing here looks at another rank.
"""
