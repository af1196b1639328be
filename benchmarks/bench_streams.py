"""How analysis time grows with the number of distinct CUDA streams (issue 33, item 9).

Writes a single-rank Kineto trace of N kernels, each on a stream of its own (a worst case
a damaged or hostile trace can be, and that a job with per-request streams comes near),
then times ``gpuprof analyze`` on it in this process. Prints one line per N:

    python benchmarks/bench_streams.py --kernels 10000,20000,40000
"""

from __future__ import annotations

import argparse
import gzip
import json
import tempfile
import time
from pathlib import Path


def write_trace(path: Path, kernels: int) -> None:
    events = []
    for i in range(kernels):
        stream = 7 + i
        ts = 1000.0 + i * 10.0
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                       "ts": ts, "dur": 4.0, "args": {"correlation": i + 1}})
        events.append({"ph": "X", "cat": "kernel", "name": f"gemm_{i % 7}", "pid": 0, "tid": stream,
                       "ts": ts + 5.0, "dur": 6.0,
                       "args": {"device": 0, "stream": stream, "correlation": i + 1}})
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}], "traceEvents": events}
    with gzip.open(path, "wt") as fh:
        json.dump(doc, fh)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", default="10000,20000,40000", help="comma-separated kernel counts")
    ap.add_argument("--repeat", type=int, default=1, help="keep the fastest of N runs")
    args = ap.parse_args()
    from gpuprof.api import analyze

    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in args.kernels.split(",")):
            path = Path(tmp) / f"streams{n}.pt.trace.json.gz"
            write_trace(path, n)
            best = float("inf")
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                analyze(path)
                best = min(best, time.perf_counter() - t0)
            print(f"{n:>8} kernels on {n:>8} streams: {best:7.2f} s", flush=True)


if __name__ == "__main__":
    main()
