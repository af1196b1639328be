"""Recording a run (``gpuprof run``): a training command in, a session folder out.

``runner`` starts the user's command with the torch hooks on its ``PYTHONPATH``
(``hooks/``: injected through ``sitecustomize``, never touching the user's script), the
``sampler`` polls every GPU through a ``backend`` (``nvml`` is the one module that imports
``pynvml``; a fake backend stands in for tests), ``live`` draws the one-line view while the
job runs and ``hooktail`` follows what the hooks write. Everything lands in
:mod:`gpuprof.session` as it happens, so a crash loses at most the last few samples.
"""
