"""Recording a run: NVML backend, sampler, runner and torch hooks (``gpuprof run``)."""
