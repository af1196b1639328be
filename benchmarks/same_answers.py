"""Same answers before and after a speed change: the JSON report of every sample and shared
trace folder, saved and compared within float rounding.

    python benchmarks/same_answers.py save /tmp/before          # on the old code
    python benchmarks/same_answers.py save /tmp/after           # on the new code
    python benchmarks/same_answers.py compare /tmp/before /tmp/after

``save`` analyzes each folder of ``sample_traces/`` and ``../shared/traces`` in this
process (as ``gpuprof analyze FOLDER --format json`` does) and writes one report per
folder, plus the CPU seconds each took (``timings.json``). ``compare`` lists every value
that differs: numbers by more than ``--rel`` relative (and ``--abs`` absolute), anything
else at all. It exits 1 when something differs, so a script can rely on it.
``--ignore KEY`` (repeatable) leaves out every value under a key of that name, so that a
change that only adds a key (a recommendation's ``facts``) can show that nothing else moved:

    python benchmarks/same_answers.py compare /tmp/before /tmp/after --ignore facts
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Iterator

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SAMPLES = REPO / "sample_traces"
SHARED = Path(os.environ.get("GPUPROF_SHARED_TRACES") or REPO.parent / "shared" / "traces")


def folders() -> list[tuple[str, Path]]:
    out: list[tuple[str, Path]] = []
    for prefix, root in (("sample", SAMPLES), ("shared", SHARED)):
        if not root.is_dir():
            print(f"note: {root} is absent; its folders are left out", file=sys.stderr)
            continue
        for d in sorted(p for p in root.iterdir() if p.is_dir() and p.name != "LICENSES"):
            out.append((f"{prefix}-{d.name}", d))
    return out


def save(dest: Path, only: str | None) -> int:
    from gpuprof.model.report import report_to_dict
    from gpuprof.pipeline import run_analysis

    dest.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    for name, path in folders():
        if only and only not in name:
            continue
        t0 = time.process_time()
        try:
            doc: Any = report_to_dict(run_analysis([path]).report)
        except Exception as exc:  # a report that cannot be made is an answer too
            doc = {"error": f"{type(exc).__name__}: {exc}"}
        timings[name] = round(time.process_time() - t0, 3)
        (dest / f"{name}.json").write_text(json.dumps(doc, indent=1, sort_keys=True, allow_nan=True))
        print(f"{name:45s} {timings[name]:7.3f} s CPU", flush=True)
    (dest / "timings.json").write_text(json.dumps(timings, indent=1))
    print(f"total {sum(timings.values()):.2f} s CPU")
    return 0


def _walk(a: Any, b: Any, path: str, rel: float, abs_: float, ignore: frozenset[str] = frozenset()) -> Iterator[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted((set(a) | set(b)) - ignore):
            if k not in a or k not in b:
                yield f"{path}/{k}: only in {'before' if k in a else 'after'}"
            else:
                yield from _walk(a[k], b[k], f"{path}/{k}", rel, abs_, ignore)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            yield f"{path}: {len(a)} items before, {len(b)} after"
        for i, (x, y) in enumerate(zip(a, b)):
            yield from _walk(x, y, f"{path}[{i}]", rel, abs_, ignore)
    elif isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        fa, fb = float(a), float(b)
        if math.isnan(fa) and math.isnan(fb):
            return
        if not math.isclose(fa, fb, rel_tol=rel, abs_tol=abs_):
            yield f"{path}: {a} before, {b} after"
    elif a != b:
        yield f"{path}: {a!r} before, {b!r} after"


def compare(before: Path, after: Path, rel: float, abs_: float, ignore: frozenset[str] = frozenset()) -> int:
    names = sorted(p.name for p in before.glob("*.json") if p.name != "timings.json")
    bad = 0
    for n in names:
        other = after / n
        if not other.is_file():
            print(f"{n}: missing after")
            bad += 1
            continue
        diffs = list(_walk(json.loads((before / n).read_text()), json.loads(other.read_text()), "", rel, abs_, ignore))
        if diffs:
            bad += 1
            print(f"{n}: {len(diffs)} difference(s)")
            for d in diffs[:20]:
                print(f"   {d}")
    extra = sorted({p.name for p in after.glob("*.json")} - set(names) - {"timings.json"})
    for n in extra:
        print(f"{n}: only after")
    t0 = json.loads((before / "timings.json").read_text()) if (before / "timings.json").is_file() else {}
    t1 = json.loads((after / "timings.json").read_text()) if (after / "timings.json").is_file() else {}
    if t0 and t1:
        print(f"CPU: {sum(t0.values()):.2f} s before, {sum(t1.values()):.2f} s after")
    left_out = f" (leaving out {', '.join(sorted(ignore))})" if ignore else ""
    print(f"{len(names) - bad} of {len(names)} reports the same{left_out}" + ("" if not bad else f"; {bad} differ"))
    return 1 if bad or extra else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("save", help="write the report of every sample and shared trace folder")
    s.add_argument("dest", type=Path)
    s.add_argument("--only", help="folders whose name contains this text")
    c = sub.add_parser("compare", help="compare two saved sets of reports")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    c.add_argument("--rel", type=float, default=1e-6, help="relative tolerance on numbers [1e-6]")
    c.add_argument("--abs", type=float, default=1e-6, help="absolute tolerance on numbers [1e-6]")
    c.add_argument("--ignore", action="append", default=[], metavar="KEY",
                   help="leave out the values under every key of this name (repeatable)")
    args = ap.parse_args()
    if args.cmd == "save":
        return save(args.dest, args.only)
    return compare(args.before, args.after, args.rel, args.abs, frozenset(args.ignore))


if __name__ == "__main__":
    sys.exit(main())
