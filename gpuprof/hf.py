"""Public import path of the Hugging Face callback: ``gpuprof.hf.GpuprofCallback``
(:mod:`gpuprof.integrations.hf`)."""

from gpuprof.integrations.hf import *  # noqa: F401,F403
from gpuprof.integrations.hf import __all__  # noqa: F401
