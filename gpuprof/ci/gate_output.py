"""``gpuprof check`` results as terminal text, Markdown (job summaries), JUnit XML and JSON.

A check with a verdict (the step-time distributions against a baseline, ``baseline.step``)
shows the change with its interval where other checks show their measured value, the floor
where they show their limit, and the verdict's own lines (:mod:`gpuprof.ci.verdict_text`)
below the table. In JUnit an inconclusive verdict that passes is a skipped test case.

JUnit is built with :mod:`xml.etree.ElementTree`, which escapes text and attributes; the
characters XML 1.0 cannot carry at all (most control characters) are removed first, since a
trace-derived path could contain them and a CI server would reject the whole file.
"""

from __future__ import annotations

import io
import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpuprof.ci.gate import CheckResult
from gpuprof.ci.verdict import Kind
from gpuprof.ci.verdict_text import verdict_lines, verdict_markdown
from gpuprof.render import figures as fg
from gpuprof.render.markdown import md_escape
from gpuprof.util import phrases
from gpuprof.util.jsontypes import JsonMapping, JsonObject

_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


CHECK_SCHEMA = "gpuprof.check/1"


def _val(value: float | None, unit: str) -> str:
    if value is None:
        return fg.NA
    return f"{value:.1f}%" if unit == "%" else f"{value:.1f} ms"


def _measured(r: CheckResult) -> str:
    v = r.verdict
    if v is None:
        return _val(r.measured, r.unit)
    if v.effect_pct is None:
        return v.kind.value
    return f"{phrases.signed_pct(v.effect_pct)} [{phrases.signed_pct(v.low_pct)}, {phrases.signed_pct(v.high_pct)}]"


def _allowed(r: CheckResult) -> str:
    if r.verdict is not None:
        return f"floor {r.allowed:g}%"
    bound = ">= " if r.name.endswith("compute_pct") else "<= "
    return bound + _val(r.allowed, r.unit)


def _result(r: CheckResult) -> str:
    if r.verdict is not None and r.verdict.kind is Kind.INCONCLUSIVE and r.passed:
        return "ok (inconclusive)"
    return "ok" if r.passed else "FAIL"


def _verdict_block(results: Sequence[CheckResult]) -> list[str]:
    out: list[str] = []
    for r in results:
        if r.verdict is not None:
            out += [f"{r.name}: {line}" if i == 0 else line for i, line in enumerate(verdict_lines(r.verdict))]
    return out


def verdict(results: Sequence[CheckResult]) -> str:
    """``all 3 checks passed``, ``the 1 check passed``, ``1 of 3 checks failed``."""
    bad = sum(1 for r in results if not r.passed)
    n = len(results)
    if not bad:
        return "the 1 check passed" if n == 1 else f"all {n} checks passed"
    return f"{bad} of {phrases.count(n, 'check')} failed" if n > 1 else "the 1 check failed"


def summary_line(results: Sequence[CheckResult]) -> str:
    bad = [r for r in results if not r.passed]
    head = f"gpuprof check: {verdict(results)}"
    return head + "".join(f"\n  FAIL {r.name}: {r.message}" for r in bad)


def checks_text(results: Sequence[CheckResult], width: int = 100, wrap: bool = True, color: bool = False) -> str:
    """A table of every check, then one line per failure. ``wrap`` (a terminal): fitted to
    ``width``; otherwise no line is broken, so a CI log keeps each FAIL on one line.
    ``color``: ``ok`` green and ``FAIL`` red (``check --color``)."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("check")
    table.add_column("measured", justify="right", no_wrap=True)
    table.add_column("allowed", justify="right", no_wrap=True)
    table.add_column("result", no_wrap=True)
    for r in results:
        verdict = Text(_result(r), style="green" if r.passed else "bold red")
        table.add_row(Text(r.name), _measured(r), _allowed(r), verdict)
    buf = io.StringIO()
    console = Console(file=buf, width=max(40, width) if wrap else 100_000, force_terminal=color, no_color=not color,
                      color_system="standard" if color else None, markup=False, highlight=False)
    console.print(table)
    for line in _verdict_block(results):
        console.print(Text(line), soft_wrap=not wrap)
    console.print(Text(summary_line(results)), soft_wrap=not wrap)
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines()) + "\n"


def checks_markdown(results: Sequence[CheckResult], title: str = "gpuprof check") -> str:
    """A Markdown table for ``$GITHUB_STEP_SUMMARY``, and the verdict's section under it."""
    head = f"### {md_escape(title)}: {verdict(results)}"
    lines = [head, "", "| check | measured | allowed | result |", "|---|---:|---:|---|"]
    for r in results:
        result = "**FAIL**: " + md_escape(r.message) if not r.passed else _result(r)
        lines.append(f"| {md_escape(r.name)} | {md_escape(_measured(r))} | {md_escape(_allowed(r) if r.verdict else _val(r.allowed, r.unit))} | {result} |")
    sections = [verdict_markdown(r.verdict) for r in results if r.verdict is not None]
    return "\n".join(lines) + "\n" + "".join("\n" + sec for sec in sections)


def _clean(text: str) -> str:
    return _XML_BAD.sub("\ufffd", text)


def checks_junit(results: Sequence[CheckResult], suite: str = "gpuprof check", subject: str = "") -> str:
    """JUnit XML: one ``testcase`` per check, a ``failure`` element for each failed one."""
    failures = sum(1 for r in results if not r.passed)
    root = ET.Element("testsuites", {"name": "gpuprof", "tests": str(len(results)), "failures": str(failures)})
    ts = ET.SubElement(
        root,
        "testsuite",
        {"name": _clean(suite), "tests": str(len(results)), "failures": str(failures), "errors": "0", "skipped": "0"},
    )
    if subject:
        props = ET.SubElement(ts, "properties")
        ET.SubElement(props, "property", {"name": "inputs", "value": _clean(subject)})
    skipped = 0
    for r in results:
        case = ET.SubElement(ts, "testcase", {"classname": "gpuprof.check", "name": _clean(r.name), "time": "0"})
        out = ET.SubElement(case, "system-out")
        detail = "\n".join(verdict_lines(r.verdict)) if r.verdict is not None else r.message
        out.text = _clean(detail)
        if not r.passed:
            fail = ET.SubElement(case, "failure", {"message": _clean(r.message), "type": "threshold" if r.verdict is None else "verdict"})
            fail.text = _clean(
                detail if r.verdict is not None
                else f"{r.message}\nmeasured: {_val(r.measured, r.unit)}\nallowed: {_val(r.allowed, r.unit)}"
            )  # fmt: skip
        elif r.verdict is not None and r.verdict.kind is Kind.INCONCLUSIVE:
            ET.SubElement(case, "skipped", {"message": _clean(r.message)})
            skipped += 1
    ts.set("skipped", str(skipped))
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def checks_dict(results: Sequence[CheckResult], extra: JsonMapping | None = None) -> JsonObject:
    """The checks as a JSON document (schema ``gpuprof.check/1``, :mod:`gpuprof.ci.check_schema`):
    the gate's result, every check, the step verdict (``null`` without a baseline) and
    ``extra`` keys (inputs, baseline runs, history)."""
    steps = next((r for r in results if r.verdict is not None), None)
    doc: dict[str, Any] = {
        "schema": CHECK_SCHEMA,
        "passed": all(r.passed for r in results),
        "summary": verdict(results),
        "checks": [
            {"name": r.name, "measured": r.measured, "allowed": r.allowed, "unit": r.unit, "passed": r.passed, "message": r.message}
            for r in results
        ],
        "verdict": None if steps is None or steps.verdict is None else steps.verdict.to_dict(),
    }
    doc.update(extra or {})
    return doc


def checks_json(results: Sequence[CheckResult], extra: JsonMapping | None = None) -> str:
    return json.dumps(checks_dict(results, extra), indent=2, allow_nan=False) + "\n"
