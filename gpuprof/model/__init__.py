"""The data that crosses stages: the timeline model going in, the report coming out.

Readers give a :class:`~gpuprof.model.timeline.RankTrace` per rank (``timeline``: kernels,
copies, host ops, collectives, columns of numbers, with their ``classify`` categories and
``dtypes``); the accounting takes it. At the other end the pipeline gives a
:class:`~gpuprof.model.report.Report` (``report``) and the renderers, the CI gate and the
API take it; ``schema`` and ``validate`` are the versioned JSON form of that report and its
checker, and ``figures`` the numbers every reader of a report shows (shares, step times,
the slowest rank; ``sample_figures`` those of the NVML samples, ``palette`` the charts'
colours), computed once so that the text, HTML and CI outputs agree.
Interval and grouping helpers (``intervals``, ``grouping``, ``table``) are shared by
every stage above. This package imports no other stage of gpuprof: a report prints through
the renderers that :mod:`gpuprof.render` installs when it is imported.
"""
