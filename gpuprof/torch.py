"""Public import path of the torch profiler handler: ``gpuprof.torch.trace_handler``
(:mod:`gpuprof.integrations.torch`)."""

from gpuprof.integrations.torch import *  # noqa: F401,F403
from gpuprof.integrations.torch import __all__  # noqa: F401
