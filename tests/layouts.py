"""Rewrite a simulated job into the layouts real tools write (for tests).

``gpuprof.simulate.generate`` writes one well-formed Kineto trace per rank
(``rank<R>.pt.trace.json.gz``, ``distributedInfo`` with rank, world size and process
groups, ``ProfilerStep#N`` markers). Real jobs arrive otherwise; each function here
turns such a job into one of those shapes, so that a test can check that the report on
the rewritten job says what it says on the original (or holds back what it cannot know):

* :func:`per_rank` with :func:`drop_world_size` / :func:`drop_distributed_info`: split
  files with no world size (or no ``distributedInfo`` at all: rank from the file name);
* :func:`per_rank` with :func:`step_markers`: ``ProfilerStep#N`` replaced by the markers
  users emit (``Optimizer.step`` only, ``## train_step ##``, Lightning's
  ``run_training_batch``, HF Trainer's ``training_step`` Python frames);
* :func:`per_rank` with :func:`nccl_only` / :func:`gpu_only`: filtered exports;
* :func:`tracefusion` / :func:`sglang_merge` / :func:`plain_concat`: every rank in one file,
  the way AMD TraceLens's TraceFusion writes it (``pid = rank * M + pid`` with ``M`` a
  power of ten above the largest pid, ``args.rank`` on the events, correlation ids and
  flow ids offset the same way, no top-level keys but ``traceEvents``), the way
  SGLang's trace merger writes it (``pid`` = ``"[TP03] <pid>"``, the first file's
  top-level keys), and a plain concatenation with no rank marks at all.
"""

from __future__ import annotations

import copy
import gzip
import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

Doc = dict[str, Any]

HOST_CATS = frozenset(
    {"cpu_op", "cuda_runtime", "cuda_driver", "user_annotation", "python_function", "cpu_instant_event"}
)
DEVICE_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"})
_RANK_FILE = re.compile(r"rank(\d+)\.pt\.trace\.json(?:\.gz)?$")


def load(path: Path) -> Doc:
    data = path.read_bytes()
    if path.name.endswith(".gz"):
        data = gzip.decompress(data)
    doc: Doc = json.loads(data)
    return doc


def save(doc: Doc, path: Path) -> Path:
    """Write ``doc`` as the profiler does: one event per line (large traces are then read
    piece by piece), top-level keys first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    events = ",\n".join(json.dumps(e) for e in doc["traceEvents"])
    text = (json.dumps(head)[:-1] + (", " if head else "") + '"traceEvents": [\n' + events + "\n]}").encode()
    path.write_bytes(gzip.compress(text, 1) if path.name.endswith(".gz") else text)
    return path


def rank_files(job: Path) -> dict[int, Path]:
    """``{rank: path}`` of a simulated job's traces."""
    out = {}
    for p in sorted(job.iterdir()):
        m = _RANK_FILE.match(p.name)
        if m:
            out[int(m.group(1))] = p
    if not out:
        raise FileNotFoundError(f"no rank*.pt.trace.json* in {job}")
    return out


def per_rank(job: Path, out: Path, *transforms: Callable[[Doc], Doc], name: str = "rank{rank}.json.gz") -> Path:
    """Apply ``transforms`` to each rank's trace and write them to ``out`` (file names
    from ``name``); returns ``out``."""
    for rank, path in rank_files(job).items():
        doc = load(path)
        for t in transforms:
            doc = t(doc)
        save(doc, out / name.format(rank=rank))
    return out


# --- per-rank rewrites ------------------------------------------------------------------


_GROUP_ARGS = ("Group size", "Process Group Ranks", "Process Group Description")


def _no_group_args(doc: Doc) -> Doc:
    """Communication events lose the group's size and members (as older PyTorch writes them)."""
    doc = dict(doc)
    out = []
    for e in doc["traceEvents"]:
        args = e.get("args")
        if isinstance(args, dict) and any(k in args for k in _GROUP_ARGS):
            e = {**e, "args": {k: v for k, v in args.items() if k not in _GROUP_ARGS}}
        out.append(e)
    doc["traceEvents"] = out
    return doc


def drop_world_size(doc: Doc) -> Doc:
    """``distributedInfo`` keeps the rank but loses ``world_size`` and the process groups;
    communication events lose the group size."""
    doc = dict(doc)
    info = dict(doc.get("distributedInfo") or {})
    for key in ("world_size", "pg_config", "pg_count"):
        info.pop(key, None)
    doc["distributedInfo"] = info
    return _no_group_args(doc)


def drop_distributed_info(doc: Doc) -> Doc:
    """No ``distributedInfo`` at all (the rank must come from the file name), no group
    sizes on communication events."""
    return _no_group_args({k: v for k, v in doc.items() if k != "distributedInfo"})


def _events(doc: Doc, keep: Callable[[dict[str, Any]], bool]) -> Doc:
    doc = dict(doc)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if keep(e)]
    return doc


def is_nccl_kernel(e: dict[str, Any]) -> bool:
    return e.get("cat") == "kernel" and "nccl" in str(e.get("name", "")).lower()


def nccl_only(doc: Doc) -> Doc:
    """Only the NCCL kernels (and metadata): a common export for looking at collectives."""
    return _events(doc, lambda e: e.get("ph") == "M" or is_nccl_kernel(e))


def nccl_only_with_host(doc: Doc) -> Doc:
    """Every host event, but of the device events only the NCCL kernels."""
    return _events(doc, lambda e: e.get("cat") not in DEVICE_CATS or is_nccl_kernel(e))


def gpu_only(doc: Doc) -> Doc:
    """No host event at all (no ops, runtime calls, annotations, flows): device events only."""
    return _events(doc, lambda e: e.get("cat") not in HOST_CATS and e.get("cat") != "ac2g")


def step_markers(style: str) -> Callable[[Doc], Doc]:
    """Replace ``ProfilerStep#N`` by another step marker.

    ``optimizer``: no step marker but the ``Optimizer.step#AdamW.step`` ranges the
    simulator writes; ``train_step``: ``## train_step ##`` annotations; ``lightning``:
    ``run_training_batch`` annotations; ``hf``: Python frames
    ``transformers/trainer.py(3000): training_step``.
    """
    names = {
        "train_step": ("user_annotation", "## train_step ##"),
        "lightning": ("user_annotation", "run_training_batch"),
        "hf": ("python_function", "transformers/trainer.py(3000): training_step"),
    }

    def rewrite(doc: Doc) -> Doc:
        doc = dict(doc)
        out = []
        for e in doc["traceEvents"]:
            if str(e.get("name", "")).startswith("ProfilerStep#"):
                if style == "optimizer" or e.get("cat") == "gpu_user_annotation":
                    continue
                cat, name = names[style]
                e = {**e, "cat": cat, "name": name}
            out.append(e)
        doc["traceEvents"] = out
        return doc

    return rewrite


# --- every rank in one file --------------------------------------------------------------


def _power_above(value: int) -> int:
    """TraceFusion's multiplier: ten to the (digits of the largest value + 1)."""
    return 10 ** (math.ceil(math.log10(max(value, 2))) + 1)


def tracefusion(job: Path, out_file: Path, rank_on: str = "all") -> Path:
    """All ranks in one file as TraceFusion writes it.

    ``rank_on``: ``all`` puts ``args.rank`` on every event (what TraceFusion does),
    ``metadata`` only on the process metadata events (``process_name``, ...).
    """
    files = rank_files(job)
    first = load(next(iter(files.values())))["traceEvents"]
    max_pid = max((e["pid"] for e in first if isinstance(e.get("pid"), int)), default=1)
    max_corr = max(
        (e["args"]["correlation"] for e in first if isinstance((e.get("args") or {}).get("correlation"), int)),
        default=1,
    )
    max_id = max((e["id"] for e in first if isinstance(e.get("id"), int)), default=1)
    pid_mult, corr_mult, id_mult = _power_above(max_pid), _power_above(max_corr), _power_above(max_id)
    merged: list[dict[str, Any]] = []
    for rank, path in files.items():
        for e in load(path)["traceEvents"]:
            if e.get("cat") in ("Trace", "python_function"):
                continue
            e = copy.deepcopy(e)
            args = e.setdefault("args", {})
            if rank_on == "all" or (e.get("ph") == "M" and str(e.get("name", "")).startswith("process_")):
                args["rank"] = rank
            if isinstance(e.get("pid"), int):
                args["pid_raw"] = e["pid"]
                e["pid"] += rank * pid_mult
            if isinstance(e.get("id"), int):
                args["id_raw"] = e["id"]
                e["id"] += rank * id_mult
            if isinstance(args.get("correlation"), int):
                args["correlation_raw"] = args["correlation"]
                args["correlation"] += rank * corr_mult
            merged.append(e)
    return save({"traceEvents": merged}, out_file)


def sglang_merge(job: Path, out_file: Path) -> Path:
    """All ranks in one file as SGLang's trace merger writes it: ``pid`` becomes
    ``"[TP<rank:02d>] <pid>"``; the top-level keys are the first file's."""
    files = rank_files(job)
    merged: Doc = {"traceEvents": []}
    for rank, path in files.items():
        doc = load(path)
        for e in doc["traceEvents"]:
            merged["traceEvents"].append({**e, "pid": f"[TP{rank:02d}] {e.get('pid')}"})
        for k, v in doc.items():
            if k != "traceEvents" and k not in merged:
                merged[k] = v
    return save(merged, out_file)


def plain_concat(job: Path, out_file: Path) -> Path:
    """Every rank's events in one file, nothing saying which rank each came from."""
    files = rank_files(job)
    events: list[dict[str, Any]] = []
    for path in files.values():
        events.extend(load(path)["traceEvents"])
    return save({"traceEvents": events}, out_file)
