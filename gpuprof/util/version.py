"""The package's version, in one place (``gpuprof.__version__``, ``gpuprof --version``, the
session's record and the Dask workers' check)."""

__version__ = "0.1.0"
