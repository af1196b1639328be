"""Trace decoders side by side: MB/s of uncompressed Kineto JSON per core, CPU time.

    python benchmarks/bench_decoders.py [FILE_OR_FOLDER ...] [--repeat 3]

Default inputs: every trace of ``../shared/traces`` (decompressed, concatenated per file)
plus ``benchmarks/out/traces/gen-1r-50MB`` when present (``bench_analyze.py`` makes it).
Each candidate decodes the same bytes already in memory; the figure is the best of
``--repeat`` runs of CPU time (user + system of this process: steadier than wall time
on a shared machine). Candidates that need a package not installed are listed as such
(``pip install pyarrow numba`` in a scratch virtualenv to measure them; they are not
dependencies of gpuprof).

* ``gpuprof read``: what ``gpuprof analyze`` spends reading: decode + columns + tables
  (``gpuprof.readers.load_file`` on the file itself, so gunzip is included for .gz);
* ``msgspec structs``: ``msgspec`` into the reader's typed ``Event`` structs (decode only);
* ``msgspec skim``: ``msgspec`` validating the whole text while keeping nothing per event
  (the event list as ``msgspec.Raw``): the floor of any msgspec-based reader;
* ``json.loads``: the standard library into dicts;
* ``numpy scan``: one pass of a vectorized byte scanner (locate quotes and brackets:
  ``np.flatnonzero`` over a byte-class mask), the first step of a scanner that would
  decode straight into columns;
* ``pyarrow.json``: Arrow's C++ reader on the event list, typed as the reader needs;
* ``numba``: its import alone (a jitted scanner would pay it on every run).
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from measure import best_cpu

HERE = Path(__file__).resolve().parent
REAL = HERE.parent.parent / "shared" / "traces"
GEN = HERE / "out" / "traces" / "gen-1r-50MB"
MB = 1_000_000


def text_of(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def inputs(args: list[str]) -> list[tuple[str, Path]]:
    if args:
        paths = [Path(a) for a in args]
    else:
        paths = sorted(p for p in REAL.iterdir() if p.is_dir() and p.name != "LICENSES") if REAL.is_dir() else []
        if GEN.is_dir():
            paths.append(GEN)
    out = []
    for p in paths:
        files = sorted(f for f in p.iterdir() if f.name.endswith((".json", ".json.gz"))) if p.is_dir() else [p]
        out += [(f"{p.name}/{f.name}" if p.is_dir() else p.name, f) for f in files]
    return out


def candidates() -> dict[str, Callable[[Path, bytes], Callable[[], Any]] | str]:
    found: dict[str, Callable[[Path, bytes], Callable[[], Any]] | str] = {}
    if importlib.util.find_spec("gpuprof") is not None:
        from gpuprof.readers import load_file

        found["gpuprof read"] = lambda path, text: lambda: load_file(path)
    if importlib.util.find_spec("msgspec") is not None:
        import msgspec

        if importlib.util.find_spec("gpuprof") is not None:
            from gpuprof.readers.events import Event

            doc = msgspec.defstruct("Doc", [("traceEvents", list[Event] | None, None)])

            def structs(path: Path, text: bytes) -> Callable[[], Any]:
                if text.lstrip()[:1] == b"[":
                    return lambda: msgspec.json.decode(text, type=list[Event])
                return lambda: msgspec.json.decode(text, type=doc)

            found["msgspec structs"] = structs

        skim = msgspec.defstruct("Skim", [("traceEvents", msgspec.Raw, msgspec.Raw(b"null"))])
        found["msgspec skim"] = lambda path, text: lambda: msgspec.json.decode(text, type=skim)
    found["json.loads"] = lambda path, text: lambda: json.loads(text)
    if importlib.util.find_spec("numpy") is not None:
        import numpy as np

        def scan(path: Path, text: bytes) -> Callable[[], Any]:
            def run() -> Any:
                a = np.frombuffer(text, np.uint8)
                mask = (a == 34) | (a == 92) | (a == 123) | (a == 125) | (a == 91) | (a == 93)
                return np.flatnonzero(mask)

            return run

        found["numpy scan"] = scan
    found["pyarrow.json"] = _pyarrow() if importlib.util.find_spec("pyarrow") else "not installed"
    found["numba import"] = _import_cost("numba") if importlib.util.find_spec("numba") else "not installed"
    return found


def _import_cost(module: str) -> str:
    import subprocess

    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True)
    return f"import alone: {time.perf_counter() - t0:.2f} s wall"


def _pyarrow() -> Callable[[Path, bytes], Callable[[], Any]]:
    import pyarrow as pa
    import pyarrow.json as pj

    args = pa.struct([("correlation", pa.int64()), ("stream", pa.int64()), ("bytes", pa.int64())])
    event = pa.struct(
        [("ph", pa.string()), ("cat", pa.string()), ("name", pa.string()), ("ts", pa.float64()),
         ("dur", pa.float64()), ("pid", pa.int64()), ("tid", pa.int64()), ("args", args)]
    )
    schema = pa.schema([("traceEvents", pa.list_(event))])

    def make(path: Path, text: bytes) -> Callable[[], Any]:
        def run() -> Any:
            opts = pj.ReadOptions(use_threads=False, block_size=len(text) + 16)
            parse = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore", newlines_in_values=True)
            return pj.read_json(pa.BufferReader(text), read_options=opts, parse_options=parse)

        return run

    return make


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="*")
    ap.add_argument("--repeat", type=int, default=3)
    ns = ap.parse_args()
    cands = candidates()
    import os

    print(f"load average {os.getloadavg()[0]:.1f}; MB/s of uncompressed JSON per core (CPU time, best of {ns.repeat})")
    names = list(cands)
    print("| trace | MB | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    totals: dict[str, list[float]] = {n: [0.0, 0.0] for n in names}
    for label, path in inputs(ns.paths):
        text = text_of(path)
        row = [label, f"{len(text) / MB:.1f}"]
        for name in names:
            cand = cands[name]
            if isinstance(cand, str):
                row.append(cand)
                continue
            try:
                s = best_cpu(cand(path, text), ns.repeat)
            except Exception as exc:  # noqa: BLE001 -- a candidate that cannot read the trace says why
                row.append(f"fails: {str(exc).splitlines()[0][:70]}")
                continue
            totals[name][0] += len(text)
            totals[name][1] += s
            row.append(f"{len(text) / MB / s:.0f}" if s > 0 else "-")
        print("| " + " | ".join(row) + " |")
    row = ["all read", ""]
    for name in names:
        size, s = totals[name]
        row.append(f"{size / MB / s:.0f}" if s > 0 else "-")
    print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
