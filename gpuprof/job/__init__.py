"""The job model: every rank's summary in, job-level claims, findings and what-ifs out.

Takes the :class:`gpuprof.accounting.summary.RankSummary` of every rank and gives a
:class:`gpuprof.job.cross_rank.CrossRankResult`: collectives matched across ranks and the
clocks aligned on them (``collectives``), the waits for late ranks (straggler claims),
pipeline stages and their bubbles (``pipeline_parallel``), link speeds (``linkspeed``), and
the ranks' graphs coupled into one job model that is replayed unchanged and once per
what-if (``whatifs``, ``replay``); ``critical`` walks the critical path of a step and
``stepview`` lays out one step per rank for the HTML timeline.
"""
