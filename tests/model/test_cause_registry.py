"""Issue 32: a cause is one declaration (gpuprof.model.causes), and every table that lists
causes reads it from there.

The enum stays the contract (its values are the JSON's cause names); nothing here adds a
member. Instead the declarations are changed before the rest of the package is imported,
in a process of its own, and every table must follow: a table typed out by hand would not.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpuprof.accounting.attribution import PRECEDENCE
from gpuprof.advice.context import _JOB_LEVEL, CATEGORY_NEEDS
from gpuprof.advice.finding import said
from gpuprof.advice.phrasebook import sentence, words
from gpuprof.advice.wording import HOST_SIDE
from gpuprof.model import causes
from gpuprof.model.report import CAUSES, Cause
from gpuprof.render.figures import CAUSE_SHORT
from gpuprof.render.palette import CAUSE_COLORS

ROOT = Path(__file__).resolve().parents[2]


def test_every_cause_is_declared_once_and_other_comes_last() -> None:
    assert set(causes.REGISTRY) == set(CAUSES)
    assert all(causes.REGISTRY[c].cause is c for c in CAUSES)
    assert causes.precedence()[-1] is Cause.OTHER
    with pytest.raises(ValueError, match="declared twice"):
        causes.declare(causes.REGISTRY[Cause.HOST])


def test_the_check_refuses_a_cause_without_declaration_or_a_precedence_twice() -> None:
    reg = dict(causes.REGISTRY)
    del reg[Cause.SYNC]
    with pytest.raises(ValueError, match="sync"):
        causes.check(reg)
    reg = dict(causes.REGISTRY) | {Cause.SYNC: dataclasses.replace(causes.REGISTRY[Cause.SYNC], precedence=7)}
    with pytest.raises(ValueError, match="precedences"):
        causes.check(reg)
    swapped = dict(causes.REGISTRY) | {
        Cause.OTHER: dataclasses.replace(causes.REGISTRY[Cause.OTHER], precedence=7),
        Cause.HOST: dataclasses.replace(causes.REGISTRY[Cause.HOST], precedence=8),
    }
    with pytest.raises(ValueError, match="last"):
        causes.check(swapped)


def test_the_tables_equal_the_declarations() -> None:
    reg = causes.REGISTRY
    assert PRECEDENCE == causes.precedence()
    assert PRECEDENCE[:3] == (Cause.PIPELINE_BUBBLE, Cause.STRAGGLER, Cause.COMMUNICATION)  # docs/attribution.md
    assert {k: v for k, v in CAUSE_COLORS.items() if k != "compute"} == {c.value: reg[c].color for c in CAUSES}
    assert dict(CAUSE_SHORT) == {c: reg[c].short for c in CAUSES}
    assert {c: {e.value for e in n} for c, n in CATEGORY_NEEDS.items()} == {c: set(reg[c].needs) for c in CAUSES}
    assert set(_JOB_LEVEL) == {Cause.STRAGGLER, Cause.COMMUNICATION, Cause.PIPELINE_BUBBLE}
    assert set(HOST_SIDE) == {Cause.HOST, Cause.DATALOADER, Cause.SYNC}
    for c in CAUSES:
        assert sentence(said("title.general", cause=c.value)) == reg[c].title
        assert reg[c].missing in sentence(said("general.why", cause=c.value))
        assert words(said("general.actions", cause=c.value, compiled=False)) == reg[c].actions


def test_the_documented_precedence_is_the_declared_one() -> None:
    text = (ROOT / "docs" / "attribution.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\d+) \| `([a-z_]+)` \|", text, flags=re.MULTILINE)
    assert [(int(n), name) for n, name in rows] == [(causes.REGISTRY[c].precedence, c.value) for c in PRECEDENCE]


# Run before anything else of the package is imported: host swaps places with sync and
# changes every other property; the tables must show the change.
_CHANGED = r"""
import dataclasses, json
from gpuprof.model import causes
from gpuprof.model.report import Cause
R = causes.REGISTRY
R[Cause.HOST] = dataclasses.replace(
    R[Cause.HOST], precedence=6, color="#123456", short="hst", title="Host title", missing="host missing",
    actions=("host action",), needs=frozenset({"compute_kernels"}), host_side=False, between_ranks=True,
    waits_for_ranks=True,
)
R[Cause.SYNC] = dataclasses.replace(R[Cause.SYNC], precedence=7)
causes.check(R)

from gpuprof.accounting.attribution import PRECEDENCE
from gpuprof.advice.context import CATEGORY_NEEDS, _JOB_LEVEL
from gpuprof.advice.finding import said
from gpuprof.advice.phrasebook import sentence, words
from gpuprof.advice.wording import HOST_SIDE
from gpuprof.job import stepview
from gpuprof.render.figures import CAUSE_SHORT
from gpuprof.render.palette import CAUSE_COLORS
from gpuprof.pipeline import windowdiag
from gpuprof.simulate import truth

print(json.dumps({
    "precedence": [c.value for c in PRECEDENCE],
    "truth_precedence": [c.value for c in truth.PRECEDENCE],
    "color": CAUSE_COLORS["host"],
    "short": CAUSE_SHORT[Cause.HOST],
    "needs": sorted(e.value for e in CATEGORY_NEEDS[Cause.HOST]),
    "job_level": Cause.HOST in _JOB_LEVEL,
    "host_side": Cause.HOST in HOST_SIDE,
    "device_first": "host" in stepview._DEVICE_FIRST,
    "waits": "host" in windowdiag._WAIT_CAUSES,
    "title": sentence(said("title.general", cause="host")),
    "why": sentence(said("general.why", cause="host")),
    "actions": list(words(said("general.actions", cause="host", compiled=False))),
}))
"""


def test_every_table_reads_the_declarations() -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    got = json.loads(subprocess.run([sys.executable, "-c", _CHANGED], capture_output=True, text=True, check=True,
                                    env=env, cwd=ROOT).stdout)
    assert got["precedence"][5:7] == ["host", "sync"]
    assert got["truth_precedence"] == got["precedence"][:-1]
    assert got["color"] == "#123456" and got["short"] == "hst"
    assert got["needs"] == ["compute_kernels"]
    assert got["job_level"] and got["device_first"] and got["waits"] and not got["host_side"]
    assert got["title"] == "Host title" and "host missing" in got["why"] and got["actions"] == ["host action"]
