"""gpuprof: where your GPU training time goes, and what to change.

The public Python API is what ``__all__`` lists::

    import gpuprof

    report = gpuprof.analyze("traces/", steps="10:12", jobs=4)   # -> gpuprof.Report
    report.recommendations, report.to_dict(), report.to_json(), report.to_dataframe()
    checks = gpuprof.check(report, baseline="ci/baseline.json", min_compute_pct=60)
    checks.passed, checks.verdict                                # the gate, the step's verdict
    d = gpuprof.diff("base.json", report)                        # -> gpuprof.ReportDiff
    report = gpuprof.load_report("report.json")                  # saved with --format json

Integrations, each imported on its own: :mod:`gpuprof.torch` (``trace_handler``, a
``torch.profiler`` ``on_trace_ready`` handler), :mod:`gpuprof.lightning` (a Lightning
callback) and :mod:`gpuprof.hf` (a Hugging Face ``TrainerCallback``).

Importing the package is cheap: the names are loaded on first use (module ``__getattr__``),
so ``gpuprof --version`` and the command line never pay for pandas, numpy or torch here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from gpuprof.util.version import __version__

# name -> module that defines it
_PUBLIC = {
    "analyze": "gpuprof.api",
    "check": "gpuprof.api",
    "diff": "gpuprof.api",
    "load_report": "gpuprof.api",
    "Report": "gpuprof.model.report",
    "RankReport": "gpuprof.model.report",
    "Recommendation": "gpuprof.model.report",
    "Cause": "gpuprof.model.report",
    "CheckResult": "gpuprof.ci.gate",
    "CheckResults": "gpuprof.ci.gate",
    "Verdict": "gpuprof.ci.verdict",
    "ReportDiff": "gpuprof.ci.diff",
    "GpuprofError": "gpuprof.errors",
}
_INTEGRATIONS = ("torch", "lightning", "hf")

# A literal list, for type checkers and linters (a test checks it names exactly _PUBLIC).
__all__ = [
    "__version__",
    "analyze",
    "check",
    "diff",
    "load_report",
    "Report",
    "RankReport",
    "Recommendation",
    "Cause",
    "CheckResult",
    "CheckResults",
    "Verdict",
    "ReportDiff",
    "GpuprofError",
]

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ loads these
    from gpuprof.api import analyze, check, diff, load_report
    from gpuprof.ci.diff import ReportDiff
    from gpuprof.ci.gate import CheckResult, CheckResults
    from gpuprof.ci.verdict import Verdict
    from gpuprof.errors import GpuprofError
    from gpuprof.model.report import Cause, RankReport, Recommendation, Report


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
        globals()[name] = value  # later lookups skip this function
        return value
    if name in _INTEGRATIONS:  # gpuprof.torch after a plain `import gpuprof`
        return importlib.import_module(f"gpuprof.{name}")
    raise AttributeError(f"module 'gpuprof' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
