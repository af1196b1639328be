"""Training steps from whatever step markers a Kineto trace holds.

``torch.profiler``'s ``ProfilerStep#N`` ranges are the step markers of choice. Traces
recorded without ``prof.step()`` (a profiler used as a context manager around a few
iterations, traces exported by other tools) often mark steps another way. When no
``ProfilerStep#N`` is present, the first of these kinds that the trace holds is used:

1. A host range that brackets one training step (outermost occurrences only, numbered
   1, 2, ... in trace order):

   * ``## train_step ##`` (a ``record_function`` label in the ``## name ##`` style);
   * ``run_training_batch`` (PyTorch Lightning's profiler action around one batch);
   * ``training_step`` / ``train_step``: HF Trainer's and Lightning's step methods, and
     a user's own ``train_step`` function, as annotations
     (``[LightningModule]Model.training_step``) or Python frames
     (``transformers/trainer.py(3000): training_step``, ``train.py(82): train_step``).

   Step *N* begins where its range begins and ends where range *N + 1* begins (the data
   loading and bookkeeping between two ranges is part of the step); the last ends with
   its range.

2. ``Optimizer.step#<Optimizer>.step``: the end of each optimizer step ends a training
   step, so *n* optimizer steps give *n - 1* complete steps (numbered 1 .. n-1; where the
   first one began is not in the trace). With several optimizers the one called most
   often is used, and among those the one that finishes last in an iteration (a wrapper
   such as an EMA optimizer around the real one).

Bracketing ranges that start more than once between two optimizer steps mark
micro-batches (gradient accumulation), not steps: the optimizer steps are used then.

:func:`find_steps` returns the steps and a label saying which marker was used
(:data:`PROFILER_STEP` or the marker's name as found in the trace).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from gpuprof.model import classify as cl
from gpuprof.model.table import Table
from gpuprof.model.timeline import Category, Step

PROFILER_STEP = "ProfilerStep#N"

OPTIMIZER_STEP = re.compile(r"^Optimizer\.step#")


def find_steps(host: Table) -> tuple[tuple[Step, ...], str | None]:
    """The steps of a Kineto host table and the marker they come from (``None``: none)."""
    steps = profiler_steps(host)
    if steps:
        return steps, PROFILER_STEP
    names = host.labels("name").tolist()
    codes = host.codes("name")
    starts = host["start_us"]
    ends = host["end_us"]
    optimizer = _optimizer_ends(names, codes, starts, ends)
    for _, pattern in cl.STEP_RANGE_MARKERS:
        wanted = [i for i, n in enumerate(names) if pattern.search(n)]
        if not wanted:
            continue
        rows = np.flatnonzero(np.isin(codes, wanted))
        s, e = _outermost(starts[rows], ends[rows])
        if optimizer is not None and _several_per_step(s, optimizer[1]):
            break  # micro-batches of gradient accumulation: the optimizer marks the steps
        label = _common_label(names, codes[rows])
        return _bracketed(s, e), label
    if optimizer is not None and optimizer[1].size >= 2:
        label, opt_ends = optimizer
        return tuple(Step(k, float(opt_ends[k - 1]), float(opt_ends[k])) for k in range(1, opt_ends.size)), label
    return (), None


def profiler_steps(host: Table) -> tuple[Step, ...]:
    """``ProfilerStep#N`` ranges from host annotations (cpu-side, not the GPU duplicates)."""
    rows = np.flatnonzero(host["category"] == int(Category.STEP))
    labels = host.labels("name").tolist() + ["nan"]
    codes = host.codes("name")[rows].astype(np.int64)
    names = [labels[c] for c in np.where(codes < 0, len(labels) - 1, codes).tolist()]
    spans: dict[int, tuple[float, float]] = {}
    for name, s, e in zip(names, host["start_us"][rows].tolist(), host["end_us"][rows].tolist()):
        m = cl.STEP_NUMBER.match(name)
        if m is None:
            continue
        num = int(m.group(1))
        old = spans.get(num)
        spans[num] = (float(s), float(e)) if old is None else (min(old[0], s), max(old[1], e))
    return tuple(Step(num, s, e) for num, (s, e) in sorted(spans.items(), key=lambda kv: kv[1][0]))


def _outermost(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ranges not inside another one (sorted by start)."""
    order = np.lexsort((-ends, starts))
    s, e = starts[order], ends[order]
    keep = np.ones(s.size, bool)
    reach = -np.inf
    for i in range(s.size):
        if e[i] <= reach:
            keep[i] = False
        else:
            reach = e[i]
    return s[keep], e[keep]


def _bracketed(starts: np.ndarray, ends: np.ndarray) -> tuple[Step, ...]:
    """Step N from the start of range N to the start of range N + 1 (the last: its end)."""
    nxt = np.append(starts[1:], ends[-1:]) if starts.size else starts
    return tuple(Step(k + 1, float(a), float(b)) for k, (a, b) in enumerate(zip(starts, nxt)))


def _optimizer_ends(
    names: Sequence[str], codes: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> tuple[str, np.ndarray] | None:
    """The chosen optimizer's name and the sorted ends of its outermost steps."""
    best: tuple[int, float, str, np.ndarray] | None = None
    for i, n in enumerate(names):
        if not OPTIMIZER_STEP.match(n):
            continue
        rows = np.flatnonzero(codes == i)
        if rows.size == 0:
            continue
        _, e = _outermost(starts[rows], ends[rows])
        e = np.sort(e)
        key = (int(e.size), float(e[0]))  # most calls, then the one finishing last
        if best is None or key > best[:2]:
            best = (key[0], key[1], n, e)
    return None if best is None else (best[2], best[3])


def _several_per_step(range_starts: np.ndarray, opt_ends: np.ndarray) -> bool:
    """True when two bracketing ranges start between the same two optimizer steps."""
    if opt_ends.size < 2 or range_starts.size < 2:
        return False
    interval = np.searchsorted(opt_ends, range_starts, side="right")
    inside = (interval > 0) & (interval < opt_ends.size)
    counts = np.bincount(interval[inside], minlength=opt_ends.size + 1)
    return bool((counts > 1).any())


def _common_label(names: Sequence[str], codes: np.ndarray) -> str:
    """The marker's name as the trace writes it (the most frequent spelling)."""
    values, counts = np.unique(codes, return_counts=True)
    return names[int(values[int(np.argmax(counts))])]


def marker_note(steps: Sequence[Step], marker: str | None) -> str | None:
    """A line for the report saying which marker gave the steps, when it is not
    ``ProfilerStep#N``; ``None`` otherwise."""
    if marker is None or marker == PROFILER_STEP or not steps:
        return None
    if OPTIMIZER_STEP.match(marker):
        return (
            f"no ProfilerStep markers: each step ends where {marker} ends "
            f"({len(steps) + 1} optimizer steps, {len(steps)} complete steps between them)"
        )
    return (
        f"no ProfilerStep markers: steps are the {len(steps)} {marker!r} ranges "
        "(each step runs from the start of one to the start of the next)"
    )

