"""The data that crosses stages: the timeline model going in, the report coming out.

Readers give a :class:`~gpuprof.model.timeline.RankTrace` per rank (``timeline``: kernels,
copies, host ops, collectives, columns of numbers, with their ``classify`` categories and
``dtypes``); the accounting takes it. At the other end the pipeline gives a
:class:`~gpuprof.model.report.Report` (``report``) and the renderers, the CI gate and the
API take it; ``schema`` and ``validate`` are the versioned JSON form of that report and its
checker, ``causes`` the declaration of each cause of lost time. How a report is shown
(its figures, the charts' colours) is :mod:`gpuprof.render`'s.
Interval and grouping helpers (``intervals``, ``grouping``, ``table``) are shared by
every stage above. This package imports no other stage of gpuprof: a report prints through
the renderers that :mod:`gpuprof.render` installs when it is imported.
"""
