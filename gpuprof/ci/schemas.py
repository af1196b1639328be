"""The JSON Schemas of what the gate writes: ``gpuprof check --json`` (``gpuprof.check/1``)
and a history line (``gpuprof.history/1``); ``gpuprof schema check`` and ``gpuprof schema
history`` print them. The verdict's object is the same in ``gpuprof diff --format json``.

Within version 1 keys may be added; none is renamed or dropped (as for the report).
"""

from __future__ import annotations

from typing import Any

from gpuprof.ci.gate_output import CHECK_SCHEMA
from gpuprof.ci.history import HISTORY_SCHEMA
from gpuprof.ci.samples import PARTS
from gpuprof.ci.verdict import Kind
from gpuprof.util.jsontypes import JsonObject

_DRAFT = "https://json-schema.org/draft/2020-12/schema"


def _num(description: str, nullable: bool = True, **more: Any) -> dict[str, Any]:
    return {"description": description, "type": ["number", "null"] if nullable else "number", **more}


_PART = {
    "type": "object",
    "properties": {
        "base_ms_per_step": _num("the baseline's mean time per step, ms"),
        "current_ms_per_step": _num("this run's mean time per step, ms"),
        "change_ms_per_step": _num("this run's minus the baseline's, ms per step"),
        "low_ms_per_step": _num("low end of the change's interval (null: no per-step data, no interval)"),
        "high_ms_per_step": _num("high end of the change's interval"),
    },
    "required": ["base_ms_per_step", "current_ms_per_step", "change_ms_per_step", "low_ms_per_step", "high_ms_per_step"],
    "additionalProperties": True,
}

VERDICT: dict[str, Any] = {
    "description": "the verdict on the step-time distributions against the baseline (docs/gate.md)",
    "type": "object",
    "properties": {
        "verdict": {"enum": [k.value for k in Kind]},
        "passed": {"type": "boolean", "description": "false for a regression, not comparable, and inconclusive with strict"},
        "reason": {"type": "string", "description": "why, for inconclusive and not comparable; what the floor did otherwise"},
        "step": {
            "type": "object",
            "properties": {
                "change_pct": _num("the step's change, % (Hodges-Lehmann ratio - 1; positive: slower)"),
                "low_pct": _num("low end of the interval, %"),
                "high_pct": _num("high end of the interval, %"),
                "confidence_pct": _num("the interval's level, %", nullable=False),
                "p_value": _num("two-sided p-value of the Mann-Whitney test (widened with the run-to-run spread)"),
                "method": {"type": ["string", "null"], "description": "exact or normal, '+ run-to-run spread' when pooled runs widened it"},
                "run_spread_pct": _num("the baseline runs' run-to-run standard deviation beyond their steps' noise, % (null: under 3 runs)"),
                "base_median_ms": _num("the baseline's median step, ms"),
                "current_median_ms": _num("this run's median step, ms"),
            },
            "required": ["change_pct", "low_pct", "high_pct", "confidence_pct", "p_value", "method"],
            "additionalProperties": True,
        },
        "min_effect_pct": _num("the floor: the smallest change of the step that counts, %", nullable=False, minimum=0),
        "strict": {"type": "boolean"},
        "steps": {
            "type": "object",
            "properties": {k: {"type": "integer", "minimum": 0} for k in ("current", "base", "min_per_side")},
            "required": ["current", "base", "min_per_side"],
            "additionalProperties": True,
        },
        "baseline_runs": {"type": "integer", "minimum": 0},
        "causes": {
            "description": "what moved with the verdict, the largest change first: compute or causes",
            "type": "array",
            "items": {"enum": list(PARTS)},
        },
        "parts": {
            "description": "compute and each cause, ms per step (mean over ranks); empty before any comparing",
            "type": "object",
            "properties": {p: _PART for p in PARTS},
            "additionalProperties": False,
        },
        "parts_note": {"type": "string"},
    },
    "required": ["verdict", "passed", "reason", "step", "min_effect_pct", "steps", "causes", "parts"],
    "additionalProperties": True,
}


def check_schema() -> JsonObject:
    """The schema of ``gpuprof check --json``."""
    return {
        "$schema": _DRAFT,
        "title": CHECK_SCHEMA,
        "description": "gpuprof check's result: every check, and the verdict against the baseline or history",
        "type": "object",
        "properties": {
            "schema": {"const": CHECK_SCHEMA},
            "passed": {"type": "boolean", "description": "the gate's result (exit code 0)"},
            "summary": {"type": "string"},
            "checks": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "measured": _num("the measured value (for baseline.step: the step's change, %); null: cannot say"),
                        "allowed": _num("the limit (for baseline.step: the floor, %)", nullable=False),
                        "unit": {"enum": ["%", "ms"]},
                        "passed": {"type": "boolean"},
                        "message": {"type": "string"},
                    },
                    "required": ["name", "measured", "allowed", "unit", "passed", "message"],
                    "additionalProperties": True,
                },
            },
            "verdict": {"anyOf": [VERDICT, {"type": "null"}]},
            "inputs": {"type": "array", "items": {"type": "string"}},
            "baselines": {"type": "array", "items": {"type": "string"}},
            "history": {
                "type": "object",
                "description": "the history the baseline came from: its runs, change points and last stable segment",
                "properties": {
                    "file": {"type": "string"},
                    "runs": {"type": "integer", "minimum": 0},
                    "baseline_runs": {"type": "array", "items": {"type": "integer", "minimum": 1}},
                    "segment": {"type": ["array", "null"], "items": {"type": "integer"}},
                    "change_points": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "run": {"type": "integer", "minimum": 1},
                                "commit": {"type": ["string", "null"]},
                                "change_pct": {"type": "number"},
                                "before_ms": {"type": "number"},
                                "after_ms": {"type": "number"},
                                "p_value": {"type": "number"},
                            },
                            "required": ["run", "change_pct", "before_ms", "after_ms"],
                        },
                    },
                },
                "required": ["file", "runs", "baseline_runs", "change_points"],
                "additionalProperties": True,
            },
        },
        "required": ["schema", "passed", "checks", "verdict"],
        "additionalProperties": True,
    }


def _series() -> dict[str, Any]:
    return {"type": "array", "items": {"type": "number", "minimum": 0}}


def history_schema() -> JsonObject:
    """The schema of one line of a ``--history`` file."""
    return {
        "$schema": _DRAFT,
        "title": HISTORY_SCHEMA,
        "description": "one run in a gpuprof check history (one JSON object per line, appended)",
        "type": "object",
        "properties": {
            "schema": {"const": HISTORY_SCHEMA},
            "time": {"type": "string", "description": "when the run was checked, UTC, ISO 8601"},
            "commit": {"type": ["string", "null"]},
            "inputs": {"type": "array", "items": {"type": "string"}},
            "verdict": {"anyOf": [{"enum": [k.value for k in Kind]}, {"type": "null"}]},
            "step_ms": {**_series(), "description": "the job's time of each step (slowest rank), ms"},
            "parts_ms": {
                "description": "compute and each cause per step (mean over ranks), ms, parallel to step_ms; null: not known",
                "type": ["object", "null"],
                "properties": {p: _series() for p in PARTS},
            },
            "totals_ms": {"type": ["object", "null"], "properties": {p: {"type": "number"} for p in PARTS}},
            "fingerprint": {
                "type": "object",
                "properties": {
                    "world_size": {"type": ["integer", "null"]},
                    "devices": {"type": "array", "items": {"type": "string"}},
                    "parallel": {"type": "object", "additionalProperties": {"type": "integer"}},
                    "kernels": {"type": "object", "additionalProperties": {"type": "number"}},
                },
            },
        },
        "required": ["schema", "time", "step_ms", "fingerprint"],
        "additionalProperties": True,
    }
