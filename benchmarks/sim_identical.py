"""The simulator writes the same bytes before and after a change that should not move them.

    python benchmarks/sim_identical.py save /tmp/sim-before      # on the old code
    python benchmarks/sim_identical.py save /tmp/sim-after       # on the new code
    python benchmarks/sim_identical.py compare /tmp/sim-before /tmp/sim-after

The script runs the code of the checkout it sits in (it puts that checkout first on
``sys.path``, whatever ``PYTHONPATH`` says): to save the old code's output, copy the script
into a worktree of the old commit and run it there.

``save`` runs ``gpuprof.simulate.generate`` for every scenario with its defaults and two
seeds, on both platforms, with ``whatif=all`` and (for the quick scenarios) each what-if
fix alone, with knob variants that reach each branch of the pipeline scenario (schedules,
data parallelism, the distributed optimizer, tied embeddings, uneven data, the megatron
layout, batched exchanges, tensor parallelism) and every entry of
``sample_traces/make_samples.py``. Each case is written under ``DIR/cases/<case>/``; the
SHA-256 of every file (of its decompressed content for ``.gz``) goes into
``DIR/hashes.json``, together with the text ``gpuprof simulate --help`` and ``--list``
print, every scenario's knobs, and the one-line message of each of a set of bad inputs.

``compare`` lists every case whose files, text or message differ and exits 1 if any do
(after a ``save --only TEXT``, only the cases both saved are compared):
use it for a change that must leave what the simulator writes alone (a refactor, a speed
change). A change that means to move the traces shows here which cases it moved.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib.util
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


# Pipeline knob sets that reach the branches of the pipeline program.
PIPELINE_VARIANTS: dict[str, dict[str, Any]] = {
    "gpipe": {"schedule": "gpipe"},
    "interleaved": {"schedule": "interleaved", "chunks": 2},
    "dp2-distopt-tied": {"dp": 2, "dist_opt": True, "tied_embeddings": True, "microbatches": 4},
    "dp2-seqcv": {"dp": 2, "seq_cv": 0.3, "microbatches": 4},
    "dp3-spread-slowrank": {"dp": 3, "replica_spread": 0.4, "slow_rank": 4, "microbatches": 4},
    "unannotated": {"annotate": False, "microbatches": 4},
    "slow-stage": {"slow_stage": 1, "slowdown": 2.0},
    "megatron": {"layout": "megatron"},
    "megatron-batched": {"layout": "megatron", "batched_p2p": True, "dp": 2, "microbatches": 4},
    "megatron-tp2": {"layout": "megatron", "tp": 2, "dp": 2, "microbatches": 4, "dist_opt": True},
    "megatron-interleaved-batched": {
        "layout": "megatron",
        "schedule": "interleaved",
        "batched_p2p": True,
        "microbatches": 8,
    },
    "no-grad": {"dp": 2, "grad_mb": 0.0, "microbatches": 4},
}
OTHER_VARIANTS: list[tuple[str, str, dict[str, Any]]] = [
    ("healthy", "ranks2", {"ranks": 2}),
    ("memory_pressure", "no-flush", {"flush": False, "mallocs": 0, "offload_mb": 0.0, "pageable_mb": 0.0}),
    ("sync_heavy", "long-python", {"python_ms": 2.0, "items_per_layer": 1}),
    ("input_bound", "no-wait", {"batch_ms": 0.0}),
    ("alloc_churn", "no-frees", {"frees_per_layer": 0}),
    ("straggler", "no-slowdown", {"slowdown": 1.0}),
    ("imbalance", "ranks3", {"ranks": 3, "seq_min": 100, "seq_max": 200}),
    ("rl_post_training", "ranks3", {"ranks": 3, "steps": 2}),
    ("dp_exposed", "fast", {"link_gbs": 400.0}),
    ("launch_bound", "cheap-ops", {"op_us": 2.0}),
]
# Inputs that must be refused, each with the one line it is refused with.
BAD_INPUTS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("nonesuch", {}, {}),
    ("healthy", {"nonesuch": 1}, {}),
    ("healthy", {"steps": "many"}, {}),
    ("healthy", {"steps": 0}, {}),
    ("pipeline", {"schedule": "zigzag"}, {}),
    ("pipeline", {"stages": 1}, {}),
    ("pipeline", {"schedule": "interleaved", "microbatches": 6}, {}),
    ("pipeline", {"slow_stage": 9}, {}),
    ("pipeline", {"batched_p2p": True}, {}),
    ("pipeline", {"tp": 2}, {}),
    ("healthy", {}, {"layout": "megatron"}),
    ("healthy", {}, {"layout": "chrome"}),
    ("healthy", {}, {"platform": "tpu"}),
    ("healthy", {}, {"whatif": "free_host"}),
    ("healthy", {}, {"whatif": "faster"}),
    ("straggler", {"slow_rank": 7}, {}),
    ("data_parallel", {}, {}),
    ("dp_exposed", {"ranks": 1}, {}),
    ("imbalance", {"seq_min": 9, "seq_max": 3}, {}),
    ("rl_post_training", {"ranks": 1}, {}),
    ("memory_pressure", {"mallocs": -1}, {}),
    ("sync_heavy", {"python_ms": -1.0}, {}),
    ("launch_bound", {"layer_us": 0.0}, {}),
    ("alloc_churn", {"free_us": -1.0}, {}),
    ("input_bound", {"batch_ms": -1.0}, {}),
    ("megatron_slow_worker", {}, {"layout": "kineto"}),
    ("rl_post_training", {}, {"layout": "megatron"}),
]


def cases() -> list[tuple[str, str, dict[str, Any]]]:
    """(case name, scenario, knobs with ``seed``/``platform``/``layout``/``whatif``/``whatifs``)."""
    from gpuprof.simulate import SCENARIOS, WHATIFS
    from gpuprof.simulate.fixes import FREE_HOST

    out: list[tuple[str, str, dict[str, Any]]] = []
    for s in SCENARIOS:
        for seed in (0, 1):
            out.append((f"{s}-seed{seed}", s, {"seed": seed}))
        other = "cuda" if s == "alloc_churn" else "rocm"
        out.append((f"{s}-{other}", s, {"platform": other, "seed": 2}))
        out.append((f"{s}-whatif-all", s, {"whatif": "all"}))
        if not s.startswith("megatron_"):
            for fix in WHATIFS:
                if fix != FREE_HOST:
                    out.append((f"{s}-whatif-{fix}", s, {"whatif": fix, "whatifs": False}))
    for name, knobs in PIPELINE_VARIANTS.items():
        out.append((f"pipeline-{name}", "pipeline", dict(knobs)))
        out.append((f"pipeline-{name}-rocm-seed3", "pipeline", {**knobs, "platform": "rocm", "seed": 3}))
    for s, name, knobs in OTHER_VARIANTS:
        out.append((f"{s}-{name}", s, dict(knobs)))
    out.append(("pipeline-plain-json", "pipeline", {"compress": False, "steps": 1}))
    out.append(("pipeline-megatron-plain-json", "pipeline", {"compress": False, "layout": "megatron"}))
    spec = importlib.util.spec_from_file_location("make_samples", REPO / "sample_traces" / "make_samples.py")
    assert spec is not None and spec.loader is not None
    samples = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(samples)
    for folder, (s, knobs) in samples.SAMPLES.items():
        out.append((f"sample-{folder}", s, {"seed": 0, **knobs}))
    return out


def _digest(path: Path) -> str:
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    return hashlib.sha256(data).hexdigest()


def _texts() -> dict[str, str]:
    from gpuprof.cli.simulate import _help_text, _list_text
    from gpuprof.simulate import DEFAULT_LAYOUT, SCENARIOS, knobs_of

    texts = {"help": _help_text(), "list": _list_text(None), "list-80": _list_text(80)}
    texts["knobs"] = json.dumps({s: knobs_of(s) for s in SCENARIOS}, sort_keys=False)
    texts["default-layout"] = json.dumps(DEFAULT_LAYOUT)
    return texts


def _refusals() -> dict[str, str]:
    from gpuprof.errors import GpuprofError
    from gpuprof.simulate import prepare

    out: dict[str, str] = {}
    for i, (s, knobs, options) in enumerate(BAD_INPUTS):
        key = f"{i:02d} {s} {json.dumps(knobs, sort_keys=True)} {json.dumps(options, sort_keys=True)}"
        try:
            prepare(s, knobs, **options)
        except GpuprofError as exc:
            out[key] = f"{type(exc).__name__}: {exc}"
        else:
            out[key] = "accepted"
    return out


def save(dest: Path, only: str | None) -> int:
    sys.path.insert(0, str(REPO))
    from gpuprof.simulate import generate

    root = dest / "cases"
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    hashes: dict[str, dict[str, str]] = {}
    t_all = time.perf_counter()
    for name, scenario, knobs in cases():
        if only and only not in name:
            continue
        out = root / name
        t0 = time.perf_counter()
        generate(scenario, out, **knobs)
        hashes[name] = {str(p.relative_to(out)): _digest(p) for p in sorted(out.rglob("*")) if p.is_file()}
        print(f"{name:55s} {len(hashes[name]):3d} files {time.perf_counter() - t0:6.2f} s", flush=True)
    doc = {
        "only": only,
        "cases": hashes,
        "texts": {k: hashlib.sha256(v.encode()).hexdigest() for k, v in _texts().items()},
        "refusals": _refusals(),
    }
    (dest / "hashes.json").write_text(json.dumps(doc, indent=1, sort_keys=True))
    for k, v in _texts().items():
        (dest / f"text-{k}.txt").write_text(v)
    n = sum(len(h) for h in hashes.values())
    print(f"{len(hashes)} cases, {n} files, {time.perf_counter() - t_all:.1f} s; hashes in {dest / 'hashes.json'}")
    return 0


def compare(before: Path, after: Path) -> int:
    a = json.loads((before / "hashes.json").read_text())
    b = json.loads((after / "hashes.json").read_text())
    bad = 0
    partial = a.get("only") or b.get("only")
    for section in ("cases", "texts", "refusals"):
        x, y = a.get(section, {}), b.get(section, {})
        if section == "cases" and partial:  # a save --only: compare the cases both ran
            x, y = ({k: v for k, v in d.items() if k in x and k in y} for d in (x, y))
        for key in sorted(set(x) | set(y)):
            if key not in y:
                print(f"{section}/{key}: only before")
                bad += 1
            elif key not in x:
                print(f"{section}/{key}: only after")
                bad += 1
            elif x[key] != y[key]:
                bad += 1
                if section == "cases":
                    moved = sorted(f for f in set(x[key]) | set(y[key]) if x[key].get(f) != y[key].get(f))
                    print(f"cases/{key}: {len(moved)} file(s) differ: {', '.join(moved[:6])}")
                elif section == "refusals":
                    print(f"refusals/{key}:\n   before: {x[key]}\n   after:  {y[key]}")
                else:
                    print(f"texts/{key} differs (see text-{key}.txt in both folders)")
    cases = a.get("cases", {})
    if partial:
        cases = {k: v for k, v in cases.items() if k in b.get("cases", {})}
    n_files = sum(len(h) for h in cases.values())
    total = len(cases) + len(a.get("texts", {})) + len(a.get("refusals", {}))
    print(
        f"{total - bad} of {total} identical ({len(cases)} cases, {n_files} files, "
        f"{len(a.get('texts', {}))} texts, {len(a.get('refusals', {}))} refusals)"
        + (f"; {bad} differ" if bad else "")
    )
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    commands = {
        "save": ("simulate every case into DIR/cases and hash what is written", ["dest"]),
        "compare": ("compare two saved sets of hashes", ["before", "after"]),
    }
    for name, (text, folders) in commands.items():
        cmd = sub.add_parser(name, help=text)
        for folder in folders:
            cmd.add_argument(folder, type=Path)
        if name == "save":
            cmd.add_argument("--only", help="cases whose name contains this text")
    args = ap.parse_args()
    return save(args.dest, args.only) if args.cmd == "save" else compare(args.before, args.after)

if __name__ == "__main__":
    sys.exit(main())
