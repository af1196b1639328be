"""The JSON Schema of a session report's whole-run keys (``step_clock``, ``phases``,
``windows``, ``changes``; :mod:`gpuprof.pipeline.runreport` makes them). All optional: a
report of traces alone, or of an older gpuprof, has none of them. Included in the report's
schema by :mod:`gpuprof.model.schema`.
"""

from __future__ import annotations

from typing import Any


def _n(kind: str, description: str, **more: Any) -> dict[str, Any]:
    return {"description": description, "type": [kind, "null"], **more}


_NUM_LIST = {"type": "array", "items": {"type": "number"}}
_INT_LIST = {"type": "array", "items": {"type": "integer"}}

_DIAGNOSIS: dict[str, Any] = {
    "description": "the window's diagnosis (gpuprof.pipeline.windowdiag): null when it was not made",
    "type": ["object", "null"],
    "properties": {
        "ok": {"type": "boolean"},
        "error": _n("string", "why the window could not be analyzed"),
        "cpu_only": {"type": "boolean", "description": "no GPU activity: the breakdown is the host's step"},
        "step_us": _n("number", "the job's mean profiled step in the window (its critical rank's)", minimum=0),
        "critical_rank": _n("integer", "the rank the others wait for", minimum=0),
        "waiting_ranks": {"description": "ranks that wait at least 10 % of a step for it", **_INT_LIST},
        "profiled_steps": {"type": "integer", "minimum": 0},
        "breakdown_us_per_step": {
            "description": "the critical rank's step split into compute and causes, microseconds per profiled step",
            "type": "object", "additionalProperties": {"type": "number"},
        },
        "top": {
            "description": "the top causes: the first recommendations, else the largest causes",
            "type": "array",
            "items": {"type": "object", "properties": {
                "cause": {"type": "string"},
                "us_per_step": _n("number", "the cause's time per profiled step on the critical rank"),
                "pct_of_step": _n("number", "that time's share of the step, %"),
                "saved_us_per_step": _n("number", "the recommendation's saving per step"),
                "savings_pct": _n("number", "the recommendation's saving, % of the step"),
                "title": {"type": "string"},
            }, "required": ["cause"], "additionalProperties": True},
        },
    },
    "additionalProperties": True,
}

RUN_PROPERTIES: dict[str, Any] = {
    "step_clock": {
        "description": "every optimizer step's time by the job's own clock (the torch hooks), over the whole run",
        "type": "object",
        "properties": {
            "steps": {"type": "integer", "minimum": 0, "description": "steps with a time"},
            "processes": {"type": "integer", "minimum": 0},
            "median_us": _n("number", "the job's median step time", minimum=0),
            "series": {
                "description": "the job's step time for a plot: every step, or (binned) the median, fastest and "
                "slowest step of bins of consecutive steps",
                "type": "object",
                "properties": {"binned": {"type": "boolean"}, "step": _INT_LIST, "last_step": _INT_LIST,
                               "median_us": _NUM_LIST, "min_us": _NUM_LIST, "max_us": _NUM_LIST},
                "required": ["binned", "step", "last_step", "median_us", "min_us", "max_us"],
                "additionalProperties": True,
            },
            "slowest_rank": {
                "description": "a rank consistently the last to reach backward (gpuprof.record.rankclock); null: none",
                "type": ["object", "null"],
                "properties": {"rank": {"type": "integer", "minimum": 0}, "excess_us": {"type": "number"},
                               "slowest_pct": {"type": "number"}, "steps": {"type": "integer"},
                               "first_step": {"type": "integer"}, "last_step": {"type": "integer"}},
                "additionalProperties": True,
            },
        },
        "additionalProperties": True,
    },
    "phases": {
        "description": "training, eval, checkpoint, idle; rollout and update in RL post-training (from the step clock "
        "and the NVML samples, gpuprof.accounting.runphases)",
        "type": "object",
        "properties": {
            "source": {"enum": ["steps+nvml", "steps", "nvml"]},
            "rl_post_training": {"type": "boolean"},
            "run_s": {"type": "number", "minimum": 0},
            "segments": {"type": "array", "items": {"type": "object", "properties": {
                "kind": {"type": "string"}, "start_s": {"type": "number"}, "end_s": {"type": "number"},
                "duration_s": {"type": "number"}, "first_step": _n("integer", "its first optimizer step"),
                "last_step": _n("integer", "its last optimizer step"), "steps": {"type": "integer", "minimum": 0},
                "util_mean_pct": _n("number", "mean GPU utilization"),
                "idle_pct": _n("number", "share of its polls with every GPU idle"),
                "mem_mean_bytes": _n("integer", "the largest GPU's memory used, mean"),
                "mem_peak_bytes": _n("integer", "the largest GPU's memory used, peak"),
            }, "required": ["kind", "start_s", "end_s"], "additionalProperties": True}},
            "by_kind": {"description": "per kind: phases, duration_s, share_pct of the run, steps, util_mean_pct, "
                        "idle_pct", "type": "object", "additionalProperties": {"type": "object"}},
        },
        "additionalProperties": True,
    },
    "windows": {
        "description": "every profiling window: 0 is the first (traces/), later ones were triggered by a change, "
        "a schedule or a demand (windows/)",
        "type": "array",
        "items": {"type": "object", "properties": {
            "window": {"type": "integer", "minimum": 0},
            "reason": _n("string", "first, change, every or demand"),
            "detail": _n("string", "why, in words"),
            "start_step": _n("integer", "its first recorded optimizer step"),
            "last_step": _n("integer", "its last recorded optimizer step"),
            "requested_at_step": _n("integer", "the furthest step reached when it was asked for"),
            "traces": {"type": "array", "items": {"type": "string"}, "description": "relative to the session"},
            "traces_kept": {"type": "boolean"},
            "status": {"enum": ["recorded", "failed", "unfinished", "missed", "not reached"]},
            "diagnosis": _DIAGNOSIS,
        }, "required": ["window", "status"], "additionalProperties": True},
    },
    "changes": {
        "description": "each shift of the step time over the run (gpuprof.record.changepoint) and what changed "
        "between the diagnosed windows around it",
        "type": "array",
        "items": {"type": "object", "properties": {
            "step": {"type": "integer", "description": "the first step at the new level"},
            "detected_step": {"type": "integer"},
            "before_us": {"type": "number"}, "after_us": {"type": "number"}, "change_pct": {"type": "number"},
            "window_before": _n("integer", "the diagnosed window before it"),
            "window_after": _n("integer", "the diagnosed window after it"),
            "causes": {"type": "array", "items": {"type": "object", "properties": {
                "cause": {"type": "string"}, "delta_us_per_step": {"type": "number"},
                "rank": _n("integer", "the critical rank of the window after it")},
                "required": ["cause", "delta_us_per_step"], "additionalProperties": True}},
            "text": {"type": "string"},
        }, "required": ["step", "before_us", "after_us", "change_pct", "text"], "additionalProperties": True},
    },
}

__all__ = ["RUN_PROPERTIES"]
