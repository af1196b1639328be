"""Regenerate the simulated samples in ``sample_traces/`` (run from the repository root).

    python sample_traces/make_samples.py

Each entry is exactly ``gpuprof simulate SCENARIO KNOB=VALUE... --seed 0 -o sample_traces/NAME``;
``platform`` and ``layout`` among the knobs are the ``--platform`` and ``--layout`` options.
Each folder gets its ground truth in ``truth/ground_truth.json`` (gpuprof.simulate.TRUTH_FILE),
a subfolder no trace reader looks into.
``cpu-training/`` is not simulated: ``record_cpu_trace.py`` records it with torch.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

# The megatron presets' export knobs as they were for issue 19.
ISSUE19_EXPORT: dict[str, Any] = {"sequence_parallel": False, "loss_dp_sync": False, "launch_gap_us": 0.0}

# folder -> (scenario, knobs); the README has one line per folder.
SAMPLES: dict[str, tuple[str, dict[str, Any]]] = {
    "healthy": ("healthy", {"steps": 2}),
    "pipeline-1f1b": ("pipeline", {"steps": 2}),
    "pipeline-slow-stage": ("pipeline", {"steps": 2, "slow_stage": 2}),
    "pipeline-dp2": ("pipeline", {"steps": 2, "dp": 2, "microbatches": 4}),
    "dp-exposed": ("dp_exposed", {"steps": 2}),
    "dp-overlapped": ("dp_overlapped", {"steps": 2}),
    "straggler": ("straggler", {"steps": 2}),
    "imbalance": ("imbalance", {"steps": 3}),
    "memory-pressure": ("memory_pressure", {"steps": 2}),
    "input-bound": ("input_bound", {"steps": 2}),
    "sync-heavy": ("sync_heavy", {"steps": 2}),
    "launch-bound": ("launch_bound", {"steps": 2}),
    "rl-post-training": (
        "rl_post_training",
        {"steps": 2, "tokens_min": 32, "tokens_max": 320, "reward_ms": 4.0},
    ),
    # the five situations of issue 10, each with its what-if truth
    "sync-then-host": ("sync_heavy", {"steps": 2, "items_per_layer": 1, "python_ms": 2.0, "layer_ms": 1.0}),
    "pipeline-unannotated": ("pipeline", {"steps": 2, "microbatches": 4, "annotate": False}),
    "pipeline-dp4-slow-rank": ("pipeline", {"steps": 1, "dp": 4, "slow_rank": 0, "slowdown": 2.0}),
    "pipeline-slow-stage-dp-spread": (
        "pipeline",
        {"steps": 1, "dp": 2, "slow_stage": 3, "replica_spread": 0.3},
    ),
    "alloc-churn-rocm": ("alloc_churn", {"steps": 2, "platform": "rocm"}),
    "megatron-timeline": (
        "pipeline",
        {"steps": 2, "dp": 2, "dist_opt": True, "slow_stage": 3, "batched_p2p": True, "layout": "megatron"},
    ),
    # the two large 3D-parallel jobs of issue 19, as real exports record them; written before
    # issue 28 gave the presets the layernorm all-reduce, the last stage's untimed loss
    # all-reduce and the gaps between timers, which stay off here so that these folders
    # (inputs of the analyzer's tests) are what this script writes
    "megatron-slow-worker": ("megatron_slow_worker", {"layout": "megatron", **ISSUE19_EXPORT}),
    "megatron-uneven-data": ("megatron_uneven_data", {"layout": "megatron", **ISSUE19_EXPORT}),
}


def main() -> int:
    sys.path.insert(0, str(HERE.parent))
    from gpuprof.simulate import generate

    for name, (scenario, knobs) in SAMPLES.items():
        out = HERE / name
        if out.exists():
            shutil.rmtree(out)
        generate(scenario, out, seed=0, **knobs)
        size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
        print(f"{name:22} {scenario:18} {size / 1024:6.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
