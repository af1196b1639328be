"""Run HolisticTraceAnalysis's load + full analysis on one trace folder (inside .venv-hta).

Started by ``bench_analyze.py`` as a subprocess with the interpreter of
``benchmarks/.venv-hta`` (see ``setup_hta.sh``); it never runs in gpuprof's environment.
"Full analysis" is what an HTA user runs to answer the question gpuprof answers: the
temporal breakdown (idle / compute / non-compute time per rank), the idle time breakdown
(host wait, kernel wait, other) and the communication/computation overlap.

Prints one JSON line on stdout: the seconds spent loading and analyzing, the number of
ranks loaded, and which analyses failed (HTA raises on some valid traces; a failed step is
reported, not hidden).
"""

from __future__ import annotations

import json
import logging
import sys
import time
import warnings


def main(trace_dir: str) -> int:
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    t0 = time.perf_counter()
    from hta.trace_analysis import TraceAnalysis

    t_import = time.perf_counter()
    analyzer = TraceAnalysis(trace_dir=trace_dir)
    t_load = time.perf_counter()
    failed: dict[str, str] = {}
    steps = {
        "temporal_breakdown": lambda: analyzer.get_temporal_breakdown(visualize=False),
        "idle_time_breakdown": lambda: analyzer.get_idle_time_breakdown(visualize=False),
        "comm_comp_overlap": lambda: analyzer.get_comm_comp_overlap(visualize=False),
    }
    for name, run in steps.items():
        try:
            run()
        except Exception as exc:  # noqa: BLE001 - we report which analysis HTA could not do
            failed[name] = f"{type(exc).__name__}: {exc}"[:200]
    t_done = time.perf_counter()
    ranks = len(getattr(analyzer.t, "traces", {}) or {})
    print(
        json.dumps(
            {
                "import_s": t_import - t0,
                "load_s": t_load - t_import,
                "analysis_s": t_done - t_load,
                "ranks": ranks,
                "failed": failed,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
