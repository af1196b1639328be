"""gpuprof's ``sitecustomize``: put on ``PYTHONPATH`` by ``gpuprof run`` for Python children.

It first runs any ``sitecustomize`` that would have run without gpuprof (the next one on
``sys.path``), then, when ``GPUPROF_SESSION_DIR`` is set and ``GPUPROF_HOOKS`` is not
``0``, arms the torch hooks in :mod:`gpuprof_torch_hooks`. Arming costs a dictionary
lookup per import; torch is never imported here -- the hooks install themselves when the
user's code imports torch. This folder must stay importable without gpuprof installed
(the child may run another interpreter), so it uses the standard library only.

Any interpreter may run this file: a job's script may start ``python2.7`` or a
``python3.6`` of its own. So it is written in the Python every one of them reads (no
f-strings, no annotations), runs the user's own ``sitecustomize`` on each of them, and arms
the hooks only on the versions they support (:data:`HOOKS_MIN_VERSION`); older ones are
left alone, silently, as they would be without gpuprof.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
HOOKS_MIN_VERSION = (3, 7)  # what the hook modules are written for (from __future__ import annotations)


def _run_next_sitecustomize():
    # type: () -> None
    """Run the ``sitecustomize`` that ours shadows, exactly as ``site`` would have."""
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    try:
        import importlib.machinery
        import importlib.util

        module_from_spec = importlib.util.module_from_spec
        find_spec = importlib.machinery.PathFinder.find_spec
    except (ImportError, AttributeError):  # Python 2 and before 3.5: the imp module
        _run_next_with_imp(path)
        return
    spec = find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # what site.py does for a failing sitecustomize
        sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n%s: %s\n"
                         % (type(exc).__name__, exc))


def _run_next_with_imp(path):
    # type: (list) -> None
    import imp  # the only way on Python 2

    try:
        found = imp.find_module("sitecustomize", path)
    except ImportError:
        return
    try:
        imp.load_module("sitecustomize", found[0], found[1], found[2])  # type: ignore[arg-type]
    except Exception as exc:
        sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n%s: %s\n"
                         % (type(exc).__name__, exc))
    finally:
        if found[0] is not None:
            found[0].close()


def _arm_gpuprof_hooks():
    # type: () -> None
    if not os.environ.get("GPUPROF_SESSION_DIR") or os.environ.get("GPUPROF_HOOKS", "1") == "0":
        return
    if sys.version_info[:2] < HOOKS_MIN_VERSION:
        return  # an interpreter the hooks are not written for: it runs as without gpuprof
    if _HERE not in sys.path:
        sys.path.append(_HERE)
    try:
        import gpuprof_torch_hooks

        gpuprof_torch_hooks.arm()
    except Exception as exc:  # a hook problem never stops the user's program
        sys.stderr.write("gpuprof: torch hooks not installed: %r\n" % (exc,))


_run_next_sitecustomize()
_arm_gpuprof_hooks()
