#!/usr/bin/env bash
# Creates benchmarks/.venv-hta: a separate environment holding HolisticTraceAnalysis, the
# tool users have today, so the benchmark can run it beside gpuprof on the same traces.
# HTA is never a dependency of gpuprof itself; keeping it in its own venv also keeps its
# pandas/numpy pins from touching the project's environment.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="$here/.venv-hta"
python="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --upgrade pip
"$venv/bin/pip" install --quiet "holistictraceanalysis>=0.5"
"$venv/bin/python" -c "import hta; from hta.trace_analysis import TraceAnalysis; print('HTA ready:', '$venv')"
