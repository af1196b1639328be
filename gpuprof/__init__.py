"""gpuprof: where your GPU training time goes, and what to change."""

__version__ = "0.1.0"
