"""gpuprof's ``sitecustomize``: put on ``PYTHONPATH`` by ``gpuprof run`` for Python children.

It first runs any ``sitecustomize`` that would have run without gpuprof (the next one on
``sys.path``), then, when ``GPUPROF_SESSION_DIR`` is set and ``GPUPROF_HOOKS`` is not
``0``, arms the torch hooks in :mod:`gpuprof_torch_hooks`. Arming costs a dictionary
lookup per import; torch is never imported here -- the hooks install themselves when the
user's code imports torch. This folder must stay importable without gpuprof installed
(the child may run another interpreter), so it uses the standard library only.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _run_next_sitecustomize() -> None:
    """Run the ``sitecustomize`` that ours shadows, exactly as ``site`` would have."""
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # what site.py does for a failing sitecustomize
        print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(exc).__name__}: {exc}",
              file=sys.stderr)


def _arm_gpuprof_hooks() -> None:
    if not os.environ.get("GPUPROF_SESSION_DIR") or os.environ.get("GPUPROF_HOOKS", "1") == "0":
        return
    if _HERE not in sys.path:
        sys.path.append(_HERE)
    try:
        import gpuprof_torch_hooks

        gpuprof_torch_hooks.arm()
    except Exception as exc:  # a hook problem never stops the user's program
        print(f"gpuprof: torch hooks not installed: {exc!r}", file=sys.stderr)


_run_next_sitecustomize()
_arm_gpuprof_hooks()
