"""What one package of gpuprof hands to another is typed: no ``dict[str, Any]`` across packages.

A name crosses a package boundary when a module of another package imports it (or imports
its module). Such a function's parameters and return, and such a class's fields and public
methods, may not be a mapping of strings to anything: a renamed key would then break a
distant file with no type checker to notice. The one exception is a JSON document at an
edge (:mod:`gpuprof.util.jsontypes`), and each place that hands one across is listed in
``JSON_EDGES`` below with what it is, so a new one is a decision in review.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "gpuprof"

# A mapping of strings to anything, however spelled.
UNTYPED = re.compile(r"\b(?:dict|Dict|Mapping|MutableMapping)\[str, *(?:typing\.)?Any\]")
JSON = re.compile(r"\bJson(?:Object|Mapping)\b")

# Where a JSON document crosses a package, and what it is.
JSON_EDGES = {
    "gpuprof.accounting.stepclock.series": "the report's step_clock section (a plot's points)",
    "gpuprof.ci.gate_output.checks_json": "extra keys of the check's JSON document",
    "gpuprof.ci.schemas.check_schema": "a JSON Schema",
    "gpuprof.ci.schemas.history_schema": "a JSON Schema",
    "gpuprof.job.stepview.step_timeline": "the report's timeline section, drawn by the HTML",
    "gpuprof.model.report.RankReport.extra": "a rank's further JSON keys",
    "gpuprof.model.report.Report.extra": "the report's further JSON sections",
    "gpuprof.model.report.report_to_dict": "the report as JSON",
    "gpuprof.render.charts.read_timeline": "a saved report's timeline section, read defensively",
    "gpuprof.session.reader.Session.events": "the session's events.jsonl records as read",
    "gpuprof.session.reader.Session.meta": "session.json as read (untrusted)",
    "gpuprof.session.windows.WindowFiles.diagnosis": "a window's diagnosis.json as read",
    "gpuprof.session.windows.WindowRequest.change": "the change that asked for a window, as written",
    "gpuprof.session.windows.diagnosis_from_dict": "a window's diagnosis.json, checked",
    "gpuprof.session.writer.SessionWriter.write_meta": "session.json",
    "gpuprof.session.writer.write_json_atomic": "a JSON file",
    "gpuprof.simulate.knobs_of": "a scenario's knobs, as the command line and truth file give them",
    "gpuprof.simulate.prepare": "a scenario's knobs, as the command line and truth file give them",
}


@dataclass(frozen=True)
class Crossing:
    """A name (``module.name`` or ``module.Class.member``) another package uses, and the
    annotations it carries."""

    name: str
    annotations: tuple[str, ...]


def _modules(root: Path) -> dict[str, ast.Module]:
    out = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = ast.parse(path.read_text(encoding="utf-8"))
    return out


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _used_across(mods: dict[str, ast.Module]) -> set[tuple[str, str | None]]:
    """``(module, name)`` imported from another package; ``name`` ``None``: the whole module."""
    used: set[tuple[str, str | None]] = set()
    for importer, tree in mods.items():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "gpuprof"):
                continue
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                target, name = (sub, None) if sub in mods else (node.module, alias.name)
                if _package(target) != _package(importer):
                    used.add((target, name))
    return used


def _signature(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[str, ...]:
    a = fn.args
    anns = [x.annotation for x in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg] if x and x.annotation]
    return tuple(ast.unparse(x) for x in [*anns, *([fn.returns] if fn.returns else [])])


def crossings(root: Path = PACKAGE) -> list[Crossing]:
    """Every public function, class field and public method another package can reach."""
    mods = _modules(root)
    out: list[Crossing] = []
    for module, name in sorted(_used_across(mods), key=str):
        for node in mods[module].body if module in mods else []:
            own = getattr(node, "name", None)
            if own is None or own.startswith("_") or (name is not None and own != name):
                continue
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append(Crossing(f"{module}.{own}", _signature(node)))
            elif isinstance(node, ast.ClassDef):
                for st in node.body:
                    if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                        out.append(Crossing(f"{module}.{own}.{st.target.id}", (ast.unparse(st.annotation),)))
                    elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)) and not st.name.startswith("_"):
                        out.append(Crossing(f"{module}.{own}.{st.name}", _signature(st)))
    return out


def _serializer(name: str) -> bool:
    # A record's own JSON form (to_dict / from_dict) is the edge it exists for.
    return name.rsplit(".", 1)[-1] in {"to_dict", "from_dict", "to_json"}


def test_no_untyped_mapping_crosses_a_package() -> None:
    bad = [
        f"{c.name}: {a}"
        for c in crossings()
        if not _serializer(c.name)
        for a in c.annotations
        if UNTYPED.search(a)
    ]
    assert bad == [], "a mapping of str to Any crosses a package (a typed record, or a JSON edge listed here):\n" + "\n".join(bad)


def test_each_json_edge_is_listed_and_each_listed_one_exists() -> None:
    found = {c.name for c in crossings() if not _serializer(c.name) and any(JSON.search(a) for a in c.annotations)}
    assert sorted(found - set(JSON_EDGES)) == [], "a JSON document crosses a package unlisted: say what it is in JSON_EDGES"
    assert sorted(set(JSON_EDGES) - found) == [], "JSON_EDGES names a place that no longer hands JSON across: drop it"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("def f(x: dict[str, Any]) -> int: ...", ["a.m.f: dict[str, Any]"]),
        ("def f(x: int) -> Mapping[str, Any] | None: ...", ["a.m.f: Mapping[str, Any] | None"]),
        ("class C:\n    facts: Mapping[str, Any]\n", ["a.m.C.facts: Mapping[str, Any]"]),
        ("class C:\n    def to_dict(self) -> dict[str, Any]: ...\n", []),
        ("def f(x: dict[str, int]) -> None: ...", []),
        ("def _f(x: dict[str, Any]) -> None: ...", []),
    ],
)
def test_the_check_sees_what_it_should(tmp_path: Path, source: str, expected: list[str]) -> None:
    # Package "a" defines m.f / m.C; package "b" imports it: the check must see the crossing.
    root = tmp_path / "gpuprof"
    for folder in ("a", "b"):
        (root / folder).mkdir(parents=True)
        (root / folder / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "a" / "m.py").write_text("from typing import Any, Mapping\n" + source)
    (root / "b" / "use.py").write_text("from gpuprof.a import m\n")
    got = [
        f"{c.name.removeprefix('gpuprof.')}: {a}"
        for c in crossings(root)
        if not _serializer(c.name)
        for a in c.annotations
        if UNTYPED.search(a)
    ]
    assert got == expected
