"""The JSON report (schema gpuprof.report/1; its keys: docs/report.md)."""

from __future__ import annotations

import json

from gpuprof.model.report import Report, report_to_dict
from gpuprof.render.registry import register


@register("json")
def render_json(report: Report, width: int = 100) -> str:
    return json.dumps(report_to_dict(report), indent=2, allow_nan=False) + "\n"
