"""The package layout of docs/architecture.md holds: arrows run only down the flow.

Read from the source's own import statements (every one, function-level imports included;
only ``if TYPE_CHECKING:`` blocks are left out, since they never run), so that a lazy import
cannot hide a circle or an arrow that points back up the flow.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

import gpuprof

PACKAGE = Path(gpuprof.__file__).parent

# The stages in the order data flows (docs/architecture.md). A module may import its own
# package and any package of a lower rank; never one of the same rank or higher.
RANK = {
    "errors": 0,
    "util": 1,
    "model": 2,
    "session": 3,
    "record": 4,
    "readers": 4,
    "accounting": 5,
    "job": 6,
    "advice": 7,
    "render": 8,
    "ci": 9,
    "pipeline": 10,
    "simulate": 10,
    "api": 11,
    "cli": 12,
    # Code that runs in the user's training process calls the API.
    "integrations": 12,
    # The public shims over gpuprof.integrations (``gpuprof.torch.trace_handler`` and the
    # callbacks), ``python -m gpuprof`` and the package itself, which re-exports the API.
    "torch": 13,
    "lightning": 13,
    "hf": 13,
    "__main__": 13,
    "": 13,
}


def module_names(root: Path = PACKAGE) -> dict[str, Path]:
    out = {}
    for path in root.rglob("*.py"):
        parts = ("gpuprof", *path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = getattr(test, "id", None) or getattr(test, "attr", None)
            if name == "TYPE_CHECKING":
                for sub in node.body:
                    skip.update(id(n) for n in ast.walk(sub))
    return skip


def imports_of(name: str, path: Path, known: Iterable[str]) -> set[str]:
    """The gpuprof modules ``name`` imports at run time, each mapped to a known module."""
    known = set(known)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_checking_nodes(tree)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "gpuprof")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "gpuprof":
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in known else target)

    def nearest(mod: str) -> str | None:
        while mod not in known:
            if "." not in mod:
                return None
            mod = mod.rsplit(".", 1)[0]
        return mod

    return {m for m in (nearest(f) for f in found) if m is not None and m != name}


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    mods = module_names(root)
    return {name: imports_of(name, path, mods) for name, path in mods.items()}


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def upward_imports(graph: Mapping[str, Iterable[str]]) -> list[str]:
    bad = []
    for src, targets in graph.items():
        for dst in targets:
            a, b = stage(src), stage(dst)
            if a != b and RANK[b] >= RANK[a]:
                bad.append(f"{src} -> {dst}")
    return sorted(bad)


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_every_top_level_name_has_a_stage(graph: dict[str, set[str]]) -> None:
    unplaced = sorted({stage(m) for m in graph} - set(RANK))
    assert unplaced == [], f"add these to the stage list (and docs/architecture.md): {unplaced}"


def test_no_import_circles(graph: dict[str, set[str]]) -> None:
    assert cycles(graph) == []


def test_arrows_run_only_down_the_flow(graph: dict[str, set[str]]) -> None:
    assert upward_imports(graph) == []


def test_the_model_imports_no_other_stage(graph: dict[str, set[str]]) -> None:
    reach = {t for m, ts in graph.items() if stage(m) == "model" for t in ts}
    assert {stage(t) for t in reach} <= {"model", "errors", "util"}


def test_the_models_one_late_binding_names_the_renderers() -> None:
    """The report finds its views by module name (no import statement, so the graph above
    cannot see it): that name must be the renderers' package, which must provide them."""
    import importlib

    from gpuprof.model import report

    assert report.VIEWS_MODULE == "gpuprof.render"
    views = importlib.import_module(report.VIEWS_MODULE).VIEWS
    assert all(callable(getattr(views, name)) for name in ("render", "save", "frame"))
    source = (PACKAGE / "model" / "report.py").read_text()
    assert source.count("import_module(") == 1  # no second late binding crept in


def test_every_stage_says_what_it_takes_and_gives() -> None:
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert doc and len(doc) > 120, f"{init.relative_to(PACKAGE.parent)} needs a docstring"


def test_architecture_doc_names_every_stage() -> None:
    doc = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    packages = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
    missing = [p for p in packages if f"`gpuprof/{p}/`" not in doc]
    assert missing == []


# A module does one job; past this many lines it has taken on a second (docs/architecture.md,
# "Where code goes"). Generated or data-only files would be listed here with their reason;
# none is today.
MAX_MODULE_LINES = 500
LONG_MODULES: dict[str, str] = {}


def long_modules(root: Path = PACKAGE, limit: int = MAX_MODULE_LINES) -> list[str]:
    out = []
    for name, path in sorted(module_names(root).items()):
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > limit and name not in LONG_MODULES:
            out.append(f"{name}: {n} lines")
    return out


def test_every_module_does_one_job() -> None:
    assert long_modules() == [], f"split these by job (limit {MAX_MODULE_LINES} lines)"


# The checks themselves must be able to fail: a small package with one circle and one arrow
# pointing up the flow.


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_the_checks_find_a_circle_and_an_upward_arrow(tmp_path: Path) -> None:
    root = tmp_path / "gpuprof"
    _write(
        root,
        {
            "__init__.py": "",
            "model/__init__.py": "",
            "model/report.py": "def show():\n    from gpuprof.render import text\n",
            "render/__init__.py": "",
            "render/text.py": "from gpuprof.model import report\n",
            "job/__init__.py": "",
            "job/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from gpuprof.advice import x\n"
            "from . import b\n",
            "job/b.py": "from .a import thing\n",
        },
    )
    g = import_graph(root)
    assert g["gpuprof.job.a"] == {"gpuprof.job.b"}  # the TYPE_CHECKING import does not count
    assert sorted(map(tuple, cycles(g))) == [
        ("gpuprof.job.a", "gpuprof.job.b"),
        ("gpuprof.model.report", "gpuprof.render.text"),
    ]
    assert upward_imports(g) == ["gpuprof.model.report -> gpuprof.render.text"]


def test_the_size_check_finds_a_long_module(tmp_path: Path) -> None:
    root = tmp_path / "gpuprof"
    _write(root, {"__init__.py": "", "job/__init__.py": "", "job/big.py": "x = 1\n" * 11})
    assert long_modules(root, limit=10) == ["gpuprof.job.big: 11 lines"]
    assert long_modules(root, limit=11) == []
