"""Public import path of the Lightning callback: ``gpuprof.lightning.GpuprofCallback``
(:mod:`gpuprof.integrations.lightning`)."""

from gpuprof.integrations.lightning import *  # noqa: F401,F403
from gpuprof.integrations.lightning import __all__  # noqa: F401
