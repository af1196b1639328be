"""Findings as data, words from one phrasebook (issue 23, item 4).

Advisors return :class:`~gpuprof.advice.finding.Finding` records; only
:mod:`gpuprof.advice.phrasebook` writes sentences; each recommendation carries its facts
(named numbers) beside the prose, in memory and in the JSON report, and a report saved
before ``facts`` existed still loads.
"""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gpuprof
import gpuprof.render  # installs the report's views (save)
from gpuprof.advice import ADVISORS, AdviceContext, _load
from gpuprof.advice.context import Worded
from gpuprof.advice.finding import Finding, fact, said
from gpuprof.advice.phrasebook import PHRASES, recommendation, sentence, words
from gpuprof.advice.phrasebook.book import TEMPLATES
from gpuprof.errors import GpuprofError
from gpuprof.model.report import Cause
from gpuprof.pipeline import run_analysis
from gpuprof.util.phrases import duration

ADVICE = Path(gpuprof.__file__).parent / "advice"
PHRASEBOOK = ADVICE / "phrasebook"
SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
# Samples whose advice covers the local, straggler, communication and pipeline families.
FAMILIES = ("input-bound", "alloc-churn-rocm", "launch-bound", "sync-heavy", "imbalance", "dp-exposed",
            "pipeline-slow-stage", "memory-pressure")


def _advisor_modules() -> list[Path]:
    return [p for p in sorted(ADVICE.rglob("*.py")) if PHRASEBOOK not in p.parents]


def _docstrings(tree: ast.AST) -> set[int]:
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _in_raise(tree: ast.AST) -> set[int]:
    return {id(n) for r in ast.walk(tree) if isinstance(r, ast.Raise) for n in ast.walk(r)}


# --- the phrasebook is the only place that writes words ------------------------------------


def test_no_advisor_module_writes_a_sentence() -> None:
    """Outside the phrasebook, advice code builds no Recommendation and holds no prose: every
    string that is not a docstring or an error message is a name (a phrase, an id, a key),
    which has no space in it. The advisors before the phrasebook wrote their English here."""
    prose: list[str] = []
    built: list[str] = []
    for path in _advisor_modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _docstrings(tree) | _in_raise(tree)
        where = path.relative_to(ADVICE.parent.parent)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Recommendation":
                built.append(f"{where}:{node.lineno}")
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip \
                    and " " in node.value.strip():
                prose.append(f"{where}:{node.lineno}: {node.value[:60]!r}")
    assert not built, f"Recommendation built outside the phrasebook: {built}"
    assert not prose, "prose outside the phrasebook:\n" + "\n".join(prose)


def test_every_phrase_an_advisor_names_is_in_the_phrasebook() -> None:
    """A phrase named by its literal name (``said("x", ...)``) exists: a typo on a rare path
    would otherwise only fail when that path runs."""
    named: set[str] = set()
    for path in _advisor_modules() + sorted(PHRASEBOOK.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "said"
                    and node.args and isinstance(node.args[0], ast.Constant)):
                named.add(str(node.args[0].value))
    assert len(named) > 100  # the walk found the advisors' records
    missing = sorted(n for n in named if n not in PHRASES and n not in TEMPLATES)
    assert not missing, f"phrases named but not in the phrasebook: {missing}"


def test_the_phrasebook_reads_findings_only() -> None:
    """The phrasebook imports no advisor (words come from the finding's values, not from a
    look back into the measuring code)."""
    bad: list[str] = []
    for path in sorted(PHRASEBOOK.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gpuprof.advice")
                    and not node.module.startswith(("gpuprof.advice.phrasebook", "gpuprof.advice.finding"))):
                bad.append(f"{path.name}: {node.module}")
    assert not bad, bad


def test_every_advisor_is_worded_from_findings() -> None:
    _load()
    assert len(ADVISORS) >= 10 and all(isinstance(a, Worded) for a in ADVISORS)


def test_a_template_must_say_every_value_and_have_each_it_needs() -> None:
    with pytest.raises(ValueError, match="does not say"):
        words(said("dataloader.calls", rank=0, mean_us=1.0, calls=3, spare=1))
    with pytest.raises(ValueError, match="needs"):
        words(said("dataloader.calls", rank=0, mean_us=1.0))
    with pytest.raises(KeyError, match="no phrase"):
        words(said("no.such.phrase"))
    assert sentence(said("dataloader.calls", rank=2, mean_us=1500.0, calls=3)).startswith("On rank 2 each DataLoader")


def test_a_fact_is_a_number_a_name_or_unknown() -> None:
    assert fact(np.float32(2.5)) == 2.5 and type(fact(np.float32(2.5))) is float
    assert fact(np.int64(7)) == 7 and type(fact(np.int64(7))) is int
    assert fact(math.nan) is None and fact(math.inf) is None
    assert fact("backward") == "backward" and fact(None) is None
    for bad in (True, np.bool_(False), [1, 2], {"a": 1}):
        with pytest.raises(TypeError):
            fact(bad)
    f = Finding("x", Cause.HOST, 1.0, said("title.host-overhead"), facts={"lost_us": np.float64(3.0), "bad_pct": math.nan})
    assert f.facts == {"lost_us": 3.0, "bad_pct": None}
    assert recommendation(f).facts == {"lost_us": 3.0, "bad_pct": None}


# --- the facts say what the evidence says --------------------------------------------------


def _findings(sample: str) -> list[Finding]:
    a = run_analysis([SAMPLES / sample])
    ctx = AdviceContext(summaries=a.summaries, reports=a.report.ranks, cross=a.cross.findings, samples=None,
                        whatifs=a.cross.whatifs)
    out: list[Finding] = []
    _load()
    for adv in ADVISORS:
        assert isinstance(adv, Worded)
        out.extend(adv.find(ctx))
    return out


def test_facts_are_the_numbers_the_evidence_is_written_from() -> None:
    """Each number a finding's facts name reads in its evidence as the evidence writes it:
    the replayed step before and after, the idle time and share of a local finding, the
    rank it names."""
    checked = 0
    ids: set[str] = set()
    for sample in FAMILIES:
        for f in _findings(sample):
            text = " | ".join(recommendation(f).evidence)
            facts: dict[str, Any] = dict(f.facts)
            ids.add(f.id)
            if facts.get("step_us") is not None and facts.get("step_after_us") is not None:
                assert f"{duration(facts['step_us'])} -> {duration(facts['step_after_us'])}" in text, (f.id, text)
                checked += 1
            if facts.get("lost_us_per_step") is not None and facts.get("lost_pct") is not None:
                assert f"idled {duration(facts['lost_us_per_step'])}" in text, (f.id, text)
                assert f"({facts['lost_pct']:.1f}% of the" in text, (f.id, text)
                checked += 1
            for key in ("rank", "slow_rank"):
                if isinstance(facts.get(key), int):
                    assert f"rank {facts[key]}" in text.lower(), (f.id, key, text)
                    checked += 1
    assert checked >= 20, checked
    # the families the samples were picked for all spoke
    assert {"dataloader-starvation", "memory-allocator", "sync-host-blocking", "straggler-rank"} <= ids, ids
    assert any(i.startswith("pipeline-") for i in ids) and any(i.startswith(("host-", "comm")) for i in ids), ids


def test_facts_have_units_in_their_names() -> None:
    """A number's unit is in its name (``_us``, ``_pct``, ``_bytes``, ``_gbps``, ...) or it
    is a count, a ratio or a rank; a name is a string."""
    units = ("_us", "_us_per_step", "_pct", "_bytes", "_gbps", "_per_ms", "_per_step")
    counted = ("rank", "ranks", "calls", "steps", "peers", "stages", "chunks", "kernels", "broadcasts", "ratio",
               "reads", "arrivals", "collectives", "microbatches", "groups", "barriers", "stage", "copies", "workers",
               "ranks_affected", "ranks_last")
    bad = []
    for sample in FAMILIES:
        for f in _findings(sample):
            for k, v in f.facts.items():
                if isinstance(v, (int, float)) and not k.endswith(units) and not k.endswith(counted):
                    bad.append(f"{f.id}: {k}")
    assert not bad, sorted(set(bad))


# --- in the JSON report ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[gpuprof.Report, Path]:
    report = run_analysis([SAMPLES / "input-bound"]).report
    path = report.save(tmp_path_factory.mktemp("facts") / "report.json")
    return report, path


def test_facts_reach_the_json_report_and_read_back_exactly(saved: tuple[gpuprof.Report, Path]) -> None:
    report, path = saved
    doc = json.loads(path.read_text())
    rec = doc["recommendations"][0]
    assert rec["facts"] == dict(report.recommendations[0].facts) and rec["facts"]["lost_pct"] > 0
    assert rec["evidence"] == list(report.recommendations[0].evidence)  # the prose stays beside them
    back = gpuprof.load_report(path)
    assert [r.facts for r in back.recommendations] == [r.facts for r in report.recommendations]
    assert back == report


def test_a_report_saved_before_facts_existed_still_loads(saved: tuple[gpuprof.Report, Path], tmp_path: Path) -> None:
    report, path = saved
    doc = json.loads(path.read_text())
    for rec in doc["recommendations"]:
        del rec["facts"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(doc))
    back = gpuprof.load_report(old)
    assert [r.facts for r in back.recommendations] == [{} for _ in report.recommendations]
    assert [r.evidence for r in back.recommendations] == [r.evidence for r in report.recommendations]
    assert [r.title for r in back.recommendations] == [r.title for r in report.recommendations]


@pytest.mark.parametrize("facts", [[1, 2], {"nested": {"a": 1}}, {"flag": True}, "12 ms"])
def test_a_report_with_malformed_facts_is_refused_by_name(
    saved: tuple[gpuprof.Report, Path], tmp_path: Path, facts: Any
) -> None:
    _, path = saved
    doc = json.loads(path.read_text())
    doc["recommendations"][0]["facts"] = facts
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(GpuprofError, match=r"recommendations\[0\]\.facts") as err:
        gpuprof.load_report(bad)
    assert str(bad) in str(err.value)
