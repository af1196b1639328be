"""Per-rank accounting: one rank's trace in, its summary out.

Takes a :class:`gpuprof.model.timeline.RankTrace` (what the readers give) and returns a
:class:`gpuprof.accounting.summary.RankSummary`: the analysis window (``window``), its exact
split into compute and lost time, the local rules' claims on the lost time (``rules``),
measured facts for the advice (``facts``, ``hostfacts``, ``evidence``), the rank's
communication calls (``comms``) and its dependency graph (``graph``), which the job model
couples with the other ranks'. ``attribution`` gives each lost microsecond to one cause by
the documented precedence, once the job-level claims are known. Nothing here looks at
another rank.
"""
