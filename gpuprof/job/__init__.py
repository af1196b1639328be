"""The job model: every rank's summary in, job-level claims, findings and what-ifs out.

Takes the :class:`gpuprof.accounting.summary.RankSummary` of every rank and gives a
:class:`gpuprof.job.cross_rank.CrossRankResult` (``cross_rank``, which runs the rest):

* collectives matched across ranks and the waits in them (``collectives``), the clocks
  aligned on them (``clocks``), the untimed waits of op-level timelines (``untimed``) and
  their barriers (``barriers``); the ranks the others wait for (``stragglers``); pipeline
  stages and their bubbles (``pipeline_parallel``); link speeds (``linkspeed``);
* the job model: the ranks' graphs coupled by collectives, point-to-point pairs and
  barriers (``coupling``) into a :class:`~gpuprof.job.whatifs.JobModel` (``assemble``),
  replayed unchanged and once per what-if (``whatifs``: the names, what each changes and
  the savings; ``samework``: the factors that even out the work; ``schedule``: the
  pipeline schedule model). The replay is ``replay`` (``replay_types``: what it takes and
  gives; ``replay_rank``, ``replay_compile``, ``replay_run``: one rank's static part, the
  order compiled once, and the run per what-if);
* ``critical`` walks the critical path of a step on the job model and ``stepview`` lays
  out one step per rank for the HTML timeline.
"""
