"""Ground truth of a simulated job, from the simulator's own bookkeeping.

While it runs, the simulator records for each rank the compute kernels and, for every
stretch of the compute stream that holds no compute, the reason it knows for it: the host
was late because it waited for data, blocked on a synchronization, freed memory, or was
simply slow to launch; the stream waited for a point-to-point transfer or a collective; a
copy or memset ran. A collective kernel is split into the wait for the last rank and the
transfer itself. Job-level reasons are added once all ranks have run: in a pipeline, the
drain is the time from a stage's last pipeline compute to the last one of its pipeline.

The truth per rank is then the same accounting that the analysis does (docs/attribution.md): the
window (the span of the ``ProfilerStep`` ranges) splits into compute and lost time, and
each lost microsecond goes to the first cause, in the documented precedence order, whose
reason covers it. Nothing here reads a trace or calls the analyzer.

``truth/ground_truth.json`` (:data:`TRUTH_FILE`: beside the traces in a subfolder, where no
trace reader looks, never inside a trace)::

    {
      "schema": "gpuprof.simulate.truth/1",
      "scenario": "pipeline", "knobs": {...}, "seed": 0,
      "platform": "cuda" | "rocm", "layout": "kineto" | "megatron",
      "fixes": [],                      # what-if fixes the written job already has
      "files": {"0": "rank0.pt.trace.json.gz", ...},
      "ranks": [{"rank": 0, "window_us": ..., "compute_us": ...,
                 "lost_us": {"pipeline_bubble": ..., ... all eight causes},
                 "compute_by_phase_us": {"pipeline": ..., "optimizer": ...}}, ...],
      "expected": {"top_category": "pipeline_bubble" | null,
                   "intended": "pipeline_bubble" | null,
                   "culprit_ranks": [2],
                   "theoretical_bubble_fraction": 0.27 | null,
                   "measured_bubble_fraction": 0.29 | null, ...},
      "whatif": {"baseline_step_us": ..., "intended": [...], "applied": [...],
                 "step_us": {name: ...}, "savings_pct": {name: ...},
                 "culprit_ranks": {name: [...]}} | null
    }

Times are microseconds; per rank ``compute_us + sum(lost_us) == window_us``.
``top_category`` is the cause with the most lost time over all ranks, or ``null`` for a run
with nothing worth fixing (no cause reaches :data:`MINOR_SHARE` of the summed windows).
``intended`` is what the scenario is built to show with its default knobs (other knobs
can change the answer; ``top_category`` always follows the simulation). ``culprit_ranks``
are the ranks where the cause originates (the slow rank or stage; for imbalance and RL,
each step's slowest rank). ``measured_bubble_fraction`` is the mean over ranks of
``pipeline_bubble / (pipeline_bubble + compute_by_phase_us["pipeline"])``, to compare with
the schedule's theoretical fraction. Scenarios may add keys (``seq_lens``,
``rollout_tokens``, ``slowest_rank_per_step``, ``compute_factors``).

``whatif`` is the truth of each what-if (:mod:`gpuprof.simulate.whatif` defines its keys;
the fixes are :mod:`gpuprof.simulate.fixes`): the job simulated again with the fix, same
seed, and its step time (the slowest rank's ``window / steps``) compared with
``baseline_step_us``: ``savings_pct = 100 * (1 - step_us / baseline_step_us)``. ``intended``
names the fixes the scenario is built to show, ``applied`` every fix that changes this
job (``all`` applies them together), ``culprit_ranks`` the ranks a job-level fix speeds
up. ``null`` when the what-ifs were not computed (``--no-whatifs``).

In the ``megatron`` layout every rank's timer ops are in one timeline file; ``ranks``
still holds the kernel-level truth of the simulation (the timers cannot show host gaps
inside a forward or backward pass), and ``whatif`` is the same as for the Kineto layout.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpuprof.accounting.attribution import PRECEDENCE as ATTRIBUTION_PRECEDENCE
from gpuprof.model import intervals as iv
from gpuprof.model.report import CAUSES, Cause
from gpuprof.simulate.rank import RankSim

TRUTH_SCHEMA = "gpuprof.simulate.truth/1"
# In a subfolder: a tool that reads every *.json of a trace folder as a trace (HTA, a
# folder scan) never takes the answer for a rank. Older outputs kept it beside the traces.
TRUTH_FILE = "truth/ground_truth.json"
OLD_TRUTH_FILE = "ground_truth.json"

# The project's documented precedence (the first cause whose reason covers a lost
# microsecond gets it); the simulator's own reasons are split by the same order, and what
# none of them covers is "other".
PRECEDENCE: tuple[Cause, ...] = tuple(c for c in ATTRIBUTION_PRECEDENCE if c is not Cause.OTHER)

# A cause below this share of the window is not worth a recommendation.
MINOR_SHARE = 0.05


@dataclass(frozen=True)
class RankTruth:
    rank: int
    window_us: float
    compute_us: float
    lost_us: Mapping[Cause, float]
    phase_compute_us: Mapping[str, float]


def rank_truth(sim: RankSim) -> RankTruth:
    """The exact split of one simulated rank's window into compute and lost-by-cause."""
    assert sim.window is not None
    lo, hi = sim.window
    compute = iv.clip(iv.union(np.frombuffer(sim.compute_s), np.frombuffer(sim.compute_e)), lo, hi)
    remaining = iv.complement(compute, lo, hi)
    lost: dict[Cause, float] = {c: 0.0 for c in CAUSES}
    for cause in PRECEDENCE:
        s, e = sim.claims[cause]
        if not len(s) or remaining[0].size == 0:
            continue
        got = iv.intersect(remaining, iv.union(np.frombuffer(s), np.frombuffer(e)))
        lost[cause] = iv.total(got)
        remaining = iv.subtract(remaining, got)
    # OTHER's own claims and whatever nothing explains
    lost[Cause.OTHER] = iv.total(remaining)
    return RankTruth(sim.rank, hi - lo, iv.total(compute), lost, dict(sim.phase_compute_us))


def top_category(truths: Sequence[RankTruth]) -> Cause | None:
    """The cause with the most lost time over all ranks, or ``None`` when all are minor."""
    window = sum(t.window_us for t in truths)
    totals = {c: sum(t.lost_us[c] for t in truths) for c in CAUSES if c is not Cause.OTHER}
    best = max(totals, key=lambda c: totals[c])
    return best if window > 0 and totals[best] / window >= MINOR_SHARE else None


def truth_document(
    scenario: str,
    knobs: Mapping[str, Any],
    seed: int,
    files: Mapping[int, str],
    truths: Sequence[RankTruth],
    expected: Mapping[str, Any],
) -> dict[str, Any]:
    top = top_category(truths)
    exp: dict[str, Any] = {
        "top_category": None if top is None else top.value,
        "culprit_ranks": [],
        "theoretical_bubble_fraction": None,
        "measured_bubble_fraction": None,
    }
    exp.update(expected)
    return {
        "schema": TRUTH_SCHEMA,
        "scenario": scenario,
        "knobs": dict(knobs),
        "seed": seed,
        "files": {str(r): f for r, f in sorted(files.items())},
        "ranks": [
            {
                "rank": t.rank,
                "window_us": round(t.window_us, 3),
                "compute_us": round(t.compute_us, 3),
                "lost_us": {c.value: round(t.lost_us[c], 3) for c in CAUSES},
                "compute_by_phase_us": {k: round(v, 3) for k, v in sorted(t.phase_compute_us.items())},
            }
            for t in truths
        ],
        "expected": exp,
    }


def renumber_ranks(doc: dict[str, Any], stride: int) -> dict[str, Any]:
    """The document with simulated rank ``r`` named ``r * stride`` everywhere a rank is
    named: a Megatron timeline of a job with tensor parallelism holds TP rank 0 of each
    position, whose global rank is the simulated rank times the TP size."""
    if stride == 1:
        return doc
    out = dict(doc)
    out["files"] = {str(int(r) * stride): f for r, f in doc["files"].items()}
    out["ranks"] = [{**row, "rank": row["rank"] * stride} for row in doc["ranks"]]
    exp = dict(doc["expected"])
    exp["culprit_ranks"] = [r * stride for r in exp.get("culprit_ranks", [])]
    out["expected"] = exp
    wi = doc.get("whatif")
    if wi:
        out["whatif"] = {**wi, "culprit_ranks": {k: [r * stride for r in v] for k, v in wi["culprit_ranks"].items()}}
    return out


def write_truth(out_dir: Path, doc: Mapping[str, Any]) -> Path:
    """Write the ground truth (:data:`TRUTH_FILE`) atomically, next to the traces' folder."""
    path = out_dir / TRUTH_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, path)
    return path


def truth_path(out_dir: str | Path) -> Path | None:
    """Where the ground truth of a simulated folder is (``None``: not a simulated folder)."""
    for name in (TRUTH_FILE, OLD_TRUTH_FILE):
        path = Path(out_dir) / name
        if path.is_file():
            return path
    return None


def read_truth(out_dir: str | Path) -> dict[str, Any]:
    """The ground truth of a folder ``gpuprof simulate`` wrote (older outputs included)."""
    path = truth_path(out_dir) or Path(out_dir) / TRUTH_FILE
    data: dict[str, Any] = json.loads(path.read_text())
    return data
