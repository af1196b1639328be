"""``gpuprof check`` results as terminal text, Markdown (job summaries) and JUnit XML.

JUnit is built with :mod:`xml.etree.ElementTree`, which escapes text and attributes; the
characters XML 1.0 cannot carry at all (most control characters) are removed first, since a
trace-derived path could contain them and a CI server would reject the whole file.
"""

from __future__ import annotations

import io
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpuprof.ci.gate import CheckResult
from gpuprof.model import figures as fg
from gpuprof.render.markdown import md_escape
from gpuprof.util import phrases

_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _val(value: float | None, unit: str) -> str:
    if value is None:
        return fg.NA
    return f"{value:.1f}%" if unit == "%" else f"{value:.1f} ms"


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
        bound = ">= " if r.name.endswith("compute_pct") else "<= "
        verdict = Text("ok", style="green") if r.passed else Text("FAIL", style="bold red")
        table.add_row(Text(r.name), _val(r.measured, r.unit), bound + _val(r.allowed, r.unit), verdict)
    buf = io.StringIO()
    console = Console(file=buf, width=max(40, width) if wrap else 100_000, force_terminal=color, no_color=not color,
                      color_system="standard" if color else None, markup=False, highlight=False)
    console.print(table)
    console.print(Text(summary_line(results)), soft_wrap=not wrap)
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines()) + "\n"


def checks_markdown(results: Sequence[CheckResult], title: str = "gpuprof check") -> str:
    """A Markdown table for ``$GITHUB_STEP_SUMMARY``."""
    head = f"### {md_escape(title)}: {verdict(results)}"
    lines = [head, "", "| check | measured | allowed | result |", "|---|---:|---:|---|"]
    for r in results:
        lines.append(
            f"| {md_escape(r.name)} | {_val(r.measured, r.unit)} | {_val(r.allowed, r.unit)} | "
            + ("ok" if r.passed else f"**FAIL**: {md_escape(r.message)}")
            + " |"
        )
    return "\n".join(lines) + "\n"


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
    for r in results:
        case = ET.SubElement(ts, "testcase", {"classname": "gpuprof.check", "name": _clean(r.name), "time": "0"})
        out = ET.SubElement(case, "system-out")
        out.text = _clean(r.message)
        if not r.passed:
            fail = ET.SubElement(case, "failure", {"message": _clean(r.message), "type": "threshold"})
            fail.text = _clean(
                f"{r.message}\nmeasured: {_val(r.measured, r.unit)}\nallowed: {_val(r.allowed, r.unit)}"
            )
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
