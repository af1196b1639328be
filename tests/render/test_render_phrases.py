"""The renderers' phrase table (:mod:`gpuprof.render.phrases`) against its callers.

Every template id a renderer says exists, each call gives exactly the template's fields,
every template words with values, and the modules that moved their sentences here do not
grow an inline sentence again.
"""

from __future__ import annotations

import ast
import re
import string
from pathlib import Path

import pytest

import gpuprof.render as render_pkg
from gpuprof.render import findings
from gpuprof.render.phrases import TEMPLATES, say, sentence

RENDER = Path(render_pkg.__file__).parent
# The modules whose sentences live in the phrase table.
WORDED = ("findings.py", "figures.py")
# Three words of letters in a row: prose, not a format or a key.
PROSE = re.compile(r"[A-Za-z']+ [A-Za-z']+ [A-Za-z']+")


def _fields(template: str) -> dict[str, str]:
    return {name: spec or "" for _, name, spec, _ in string.Formatter().parse(template) if name is not None}


def _calls(module: str) -> list[ast.Call]:
    tree = ast.parse((RENDER / module).read_text(encoding="utf-8"))
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "say"]


def _dummy(spec: str) -> object:
    return 1234.5 if spec else "x"


@pytest.mark.parametrize("phrase", sorted(TEMPLATES))
def test_every_template_words_with_values(phrase: str) -> None:
    values = {k: _dummy(spec) for k, spec in _fields(TEMPLATES[phrase]).items()}
    text = say(phrase, **values)
    assert "{" not in text and "}" not in text
    assert text.strip(), phrase


def test_an_unfilled_field_is_an_error() -> None:
    with pytest.raises(KeyError):
        say("stragglers.waited")
    with pytest.raises(KeyError):
        say("no.such.phrase")


@pytest.mark.parametrize("module", WORDED)
def test_every_call_names_a_template_and_fills_exactly_its_fields(module: str) -> None:
    calls = _calls(module)
    assert calls, f"{module} says nothing through the phrase table"
    used = set()
    for call in calls:
        arg = call.args[0]
        if isinstance(arg, ast.Constant):
            ids = {str(arg.value)}
        elif isinstance(arg, ast.IfExp):  # say("a" if ... else "b", ...): both take the values
            assert isinstance(arg.body, ast.Constant) and isinstance(arg.orelse, ast.Constant), ast.unparse(call)
            ids = {str(arg.body.value), str(arg.orelse.value)}
        else:  # say(f"whatif.bound.{name}"): one per what-if that bounds a fix
            assert isinstance(arg, ast.JoinedStr), ast.unparse(call)
            prefix = "".join(str(v.value) for v in arg.values if isinstance(v, ast.Constant))
            ids = {p for p in TEMPLATES if p.startswith(prefix)}
            assert ids, ast.unparse(call)
        given = {k.arg for k in call.keywords}
        for phrase in ids:
            assert phrase in TEMPLATES, f"{module}: {ast.unparse(call)}"
            assert set(_fields(TEMPLATES[phrase])) == given, f"{module}: {ast.unparse(call)}"
        used |= ids
    if module == "findings.py":
        assert {p for p in TEMPLATES if p.startswith("whatif.bound.")} == {f"whatif.bound.{k}" for k in findings.NOT_A_FIX}


@pytest.mark.parametrize("module", WORDED)
def test_no_inline_sentence_is_written_again(module: str) -> None:
    """An f-string, or a string added to another, with three words of prose in it is a
    sentence written beside the table: it belongs in :data:`TEMPLATES`."""
    assert _inline_prose((RENDER / module).read_text(encoding="utf-8")) == []


def _inline_prose(source: str) -> list[str]:
    """The f-strings and string sums in ``source`` that read as prose (a field counts as a
    word: ``f"Rank {r} arrived last"`` is four)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.JoinedStr):
            text = "".join(str(v.value) if isinstance(v, ast.Constant) else "x" for v in node.values)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            text = " ".join(str(s.value) for s in (node.left, node.right) if isinstance(s, ast.Constant) and isinstance(s.value, str))
        else:
            continue
        if PROSE.search(text):
            found.append(ast.unparse(node))
    return found


def test_the_guard_sees_an_inline_sentence() -> None:
    assert _inline_prose('t = f"Rank {r} arrived last"') == ["f'Rank {r} arrived last'"]
    assert _inline_prose('t = text + "; the other ranks waited"') != []
    assert _inline_prose('t = f"{pct:.1f}" + f"the {role}" + say("x", n=1)') == []


def test_a_sentence_joins_its_pieces_and_ends() -> None:
    opening = say("critical.steps", rank=3, role="pace-setter", count=4, steps=5)
    assert sentence(opening, say("critical.spread", ranks=2)) == (
        "Rank 3 was the pace-setter in 4 of 5 steps; 2 different ranks were over the run."
    )


def test_the_findings_word_a_straggler_through_the_table() -> None:
    out = findings._stragglers([{"rank": 3, "last_arrivals": 9, "collectives": 10, "caused_wait_us_per_step": 1500.0,
                                 "phase": "forward", "phase_ratio": 1.5}])
    assert out == [
        "Rank 3 arrived last at 9 of 10 collectives; the other ranks waited 1.5 ms per step for it; "
        + "its forward takes 1.50× the others' median."
    ]


def test_an_empty_report_says_why_it_has_nothing_to_show() -> None:
    from reportfactory import report

    from gpuprof.render import figures

    empty = report([], [])
    assert figures.nothing_to_analyze(empty) == "nothing to analyze: no rank with device activity was found in the input"
    assert figures.no_recommendation(empty) == "No recommendation: no cause of lost time stands out."
    empty.extra["samples"] = {"gpus": []}
    assert figures.nothing_to_analyze(empty) == (
        "nothing to analyze per rank: no profiler trace in the input, only the NVML samples below"
    )
