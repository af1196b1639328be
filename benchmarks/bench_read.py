"""Reading alone: MB/s of uncompressed trace JSON per core, CPU time, file by file.

    python benchmarks/bench_read.py [FILE_OR_FOLDER ...] [--repeat 3] [--min-mb 0]

Default inputs: every trace file of ``../shared/traces`` plus the generated ranks of
``benchmarks/out/traces`` named by ``--gen`` (default ``gen-1r-200MB-10steps``) when
present (``bench_analyze.py`` makes them). For each file, in this process, best of
``--repeat`` runs of CPU time (user + system: steadier than wall time on a shared
machine):

* ``gunzip``: the text blocks alone (``gpuprof.readers.textstream.text_blocks``), the
  inflate a ``.json.gz`` costs before any decoding (0 for a plain file);
* ``read``: what ``gpuprof analyze`` spends reading one file:
  ``gpuprof.readers.load_file`` (gunzip, decode, columns, tables, steps).

The last lines sum the files (MB over CPU seconds), over all files and over the real
traces above 10 MB, the files the reading target of issue 22 is set for.
"""

from __future__ import annotations

import argparse
import gzip
import os
import sys
from pathlib import Path

from measure import best_cpu

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
REAL = REPO.parent / "shared" / "traces"
MB = 1_000_000
sys.path.insert(0, str(REPO))


def json_bytes(path: Path) -> int:
    with path.open("rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    if not gz:
        return path.stat().st_size
    n = 0
    with gzip.open(path, "rb") as fh:
        while chunk := fh.read(1 << 24):
            n += len(chunk)
    return n


def inputs(args: list[str], gen: list[str]) -> list[Path]:
    if args:
        paths = [Path(a) for a in args]
    else:
        paths = []
        if REAL.is_dir():
            paths = sorted(p for p in REAL.iterdir() if p.is_dir() and p.name != "LICENSES")
        paths += [d for g in gen if (d := HERE / "out" / "traces" / g).is_dir()]
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out += sorted(f for f in p.iterdir() if f.name.endswith((".json", ".json.gz")))
        else:
            out.append(p)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="*")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--min-mb", type=float, default=0.0, help="leave out files below this many JSON MB")
    ap.add_argument("--gen", default="gen-1r-200MB-10steps", help="generated folders to add, comma-separated")
    a = ap.parse_args()

    from gpuprof.readers import load_file
    from gpuprof.readers.textstream import text_blocks

    files = [(f, json_bytes(f)) for f in inputs(a.paths, [g for g in a.gen.split(",") if g])]
    files = [(f, n) for f, n in files if n >= a.min_mb * MB]
    print(f"load average {os.getloadavg()[0]:.1f} (1 min); best of {a.repeat} runs, CPU seconds")
    print(f"{'file':60s} {'JSON MB':>8s} {'gunzip s':>9s} {'MB/s':>6s} {'read s':>8s} {'MB/s':>6s}")
    total: dict[str, list[float]] = {"all": [0, 0, 0], "real traces above 10 MB": [0, 0, 0]}
    for f, n in files:
        gz = best_cpu(lambda f=f: sum(len(b) for b in text_blocks(f, [])), a.repeat)
        rd = best_cpu(lambda f=f: load_file(f), a.repeat)
        name = f"{f.parent.name}/{f.name}"[-60:]
        gz_rate = f"{n / MB / gz:6.0f}" if gz > 0.002 else "     -"
        print(f"{name:60s} {n / MB:8.1f} {gz:9.3f} {gz_rate} {rd:8.3f} {n / MB / rd:6.0f}", flush=True)
        for key in total:
            if key == "all" or (n > 10 * MB and REAL in f.parents):
                total[key][0] += n
                total[key][1] += gz
                total[key][2] += rd
    for key, (n, gz, rd) in total.items():
        if rd:
            print(
                f"{key}: {n / MB:.0f} MB, read {rd:.2f} s CPU = {n / MB / rd:.0f} MB/s per core "
                f"(gunzip {gz:.2f} s of it)"
            )
    print(f"load average {os.getloadavg()[0]:.1f} (1 min) at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
