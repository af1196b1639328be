#!/usr/bin/env bash
# One command that proves gpuprof on a real GPU (issue 24); benchmarks/gpu_check.py says what
# it checks and what it writes. Results go to $OUT when set, else --out DIR, else
# benchmarks/out/gpu-check-<time>/. Runs what it can without a GPU, and says what it skipped.
#
#   bash benchmarks/gpu_check.sh [--cpu] [--out DIR] [--steps N] [--repeats N] [--budget-s S] [--skip STEP,...]
#
# Runtime dependencies a machine lacks (the GPU machine has no network) travel as wheels in
# benchmarks/gpu_check_wheels/ (git-ignored); the check installs the ones the machine is
# missing, and gpuprof itself from this working tree, with `pip install --no-deps --no-index
# --target` into a private folder of its own work directory: nothing of the machine changes.
# Refresh the wheels where PyPI is reachable (x86-64, CPython 3.12, manylinux: the GPU image):
#
#   bash benchmarks/gpu_check.sh --download-wheels
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
py=${PYTHON:-python3}
if [ "${1:-}" = "--download-wheels" ]; then
    # msgspec and jsonschema are gpuprof's runtime dependencies missing from the GPU image;
    # pip resolves their own (jsonschema-specifications, referencing, rpds-py, attrs,
    # typing-extensions). zlib-ng is the fast inflater the readers use when present (they
    # fall back to the standard library's zlib), so it is fetched too. The check installs
    # only the wheels of what the machine does not have.
    dest="$here/gpu_check_wheels"
    rm -rf "$dest" && mkdir -p "$dest" || exit 1
    exec "$py" -m pip download --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$dest" msgspec jsonschema zlib-ng
fi
export PYTHONUNBUFFERED=1
exec "$py" "$here/gpu_check.py" "$@"
