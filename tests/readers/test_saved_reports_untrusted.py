"""Saved reports are untrusted input like traces: bounded like traces, and what they say is
shown, never obeyed (issue 20, cases 13, 14, 19)."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path
from typing import Any

import pytest
from clirun import run_cli

from gpuprof.model import schema as schema_mod
from gpuprof.model import validate as validate_mod
from gpuprof.readers.saved import read_report

ROOT = Path(__file__).resolve().parents[2]
STRAGGLER = ROOT / "sample_traces" / "straggler"


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("saved") / "report.json"
    assert run_cli("analyze", str(STRAGGLER), "-o", str(out)).code == 0
    return json.loads(out.read_text())


def _write(path: Path, doc: Any, gz: bool = False) -> Path:
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data, compresslevel=9) if gz else data)
    return path


# --- case 13: a report bomb ------------------------------------------------------------------


@pytest.mark.parametrize("command", ["analyze", "baseline"])
def test_a_report_bomb_is_refused_before_it_is_held(
    saved: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    # 20 MB of one string in a 20 KB .json.gz; the limit on text held whole is set to 1 MB
    # here (256 MB by default: the same limit as one trace event).
    monkeypatch.setenv("GPUPROF_MAX_EVENT_MB", "1")
    doc = dict(saved, warnings=["a" * 20_000_000])
    bomb = _write(tmp_path / "bomb.json.gz", doc, gz=True)
    assert bomb.stat().st_size < 100_000
    argv = {
        "analyze": ("analyze", str(bomb)),
        "baseline": ("check", str(STRAGGLER), "--no-config", "--baseline", str(bomb)),
    }[command]
    r = run_cli(*argv)
    assert r.code == 2 and len(r.stderr_lines) == 1, r.stderr
    assert r.stderr_lines[0].startswith(f"gpuprof: {bomb}: holds more than 1 MB of JSON text")
    assert "GPUPROF_MAX_EVENT_MB=2" in r.stderr


def test_max_input_gb_applies_to_saved_reports(saved: dict[str, Any], tmp_path: Path) -> None:
    doc = dict(saved, warnings=["a" * 2_000_000])
    big = _write(tmp_path / "big.json.gz", doc, gz=True)
    r = run_cli("analyze", str(big), "--max-input-gb", "0.001")
    assert r.code == 2 and "the --max-input-gb limit" in r.stderr and len(r.stderr_lines) == 1


def test_a_damaged_gzip_report_is_not_read_in_part(saved: dict[str, Any], tmp_path: Path) -> None:
    data = bytearray(gzip.compress(json.dumps(saved).encode()))
    data[-6] ^= 0xFF  # the CRC: every byte of JSON is there, the file is still damaged
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(bytes(data))
    r = run_cli("analyze", str(bad))
    assert r.code == 2 and len(r.stderr_lines) == 1 and "gzip" in r.stderr


# --- case 14: the validator's work follows the report's structure, not its numbers -----------


def test_validation_work_does_not_grow_with_the_numbers_in_a_report(
    saved: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    validated: list[int] = []
    real = validate_mod._validator()

    class Counting:
        def iter_errors(self, instance: Any) -> Any:
            validated.append(_count(instance))
            return real.iter_errors(instance)

    monkeypatch.setattr(validate_mod, "_validator", lambda: Counting())
    for n in (20, 200_000):
        doc = json.loads(json.dumps(saved))
        doc["ranks"][0]["step_times_us"] = [1000.0 + i % 7 for i in range(n)]
        assert validate_mod.first_problem(doc) is None
    # The values handed to the JSON Schema validator (~15 us each): the same for 20 steps
    # and for 200,000 (2 million took 40 s and 1.5 GB).
    assert validated[0] == validated[1]


def _count(v: Any) -> int:
    if isinstance(v, dict):
        return 1 + sum(_count(x) for x in v.values())
    if isinstance(v, list):
        return 1 + sum(_count(x) for x in v)
    return 1


def test_two_million_step_times_read_back(saved: dict[str, Any], tmp_path: Path) -> None:
    doc = json.loads(json.dumps(saved))
    doc["ranks"][0]["step_times_us"] = [1000.0 + i % 7 for i in range(2_000_000)]
    report = read_report(_write(tmp_path / "r.json", doc))
    assert len(report.ranks[0].step_times_us) == 2_000_000


def _full_validation_ok(doc: Any) -> bool:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(json.loads(schema_mod.shipped_schema_text())).is_valid(doc)


@pytest.mark.parametrize("seed", range(40))
def test_sampled_validation_agrees_with_the_full_validator(saved: dict[str, Any], seed: int) -> None:
    r = random.Random(seed)
    values: list[Any] = [0, 3, 2.0, 2.5, 17.25, -1, -0.5, "x", True, None, 10**6]
    doc = json.loads(json.dumps(saved))
    arrays = [
        (doc["ranks"][r.randrange(len(doc["ranks"]))], "step_times_us"),
        (doc["recommendations"][0], "ranks"),
        (doc["recommendations"][0], "evidence"),
        (doc, "warnings"),
        (doc, "inputs"),
    ]
    where, key = r.choice(arrays)
    good = {"step_times_us": [1.5, 3.0, 0], "ranks": [0, 1, 3], "evidence": ["a"], "warnings": ["w"], "inputs": ["i"]}[key]
    items = [r.choice(good) for _ in range(r.randint(17, 400))]
    for _ in range(r.choice([0, 0, 1, 2])):
        items[r.randrange(len(items))] = r.choice(values)
    where[key] = items
    problem = schema_mod.first_problem(doc)
    assert (problem is None) == _full_validation_ok(doc), problem
    if problem is not None:  # the path names an element that is really wrong
        index = int(problem.split(f"{key}[", 1)[1].split("]", 1)[0])
        probe = json.loads(json.dumps(doc))
        probe_where = probe if where is doc else _same(probe, doc, where)
        probe_where[key] = [good[0]] * len(items)
        probe_where[key][index] = items[index]
        assert not _full_validation_ok(probe)


def _same(probe: dict[str, Any], doc: dict[str, Any], where: dict[str, Any]) -> dict[str, Any]:
    for i, rank in enumerate(doc["ranks"]):
        if rank is where:
            return probe["ranks"][i]  # type: ignore[no-any-return]
    return probe["recommendations"][0]  # type: ignore[no-any-return]


def test_the_shipped_schema_keeps_to_what_sampled_validation_allows() -> None:
    """Arrays are validated on a sample of representatives (first of each type, smallest and
    largest number, 16 items at least); that is exact only for these keywords."""
    scalar_item_keywords = {"type", "minimum", "description"}
    doc = json.loads(schema_mod.shipped_schema_text())

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            assert not {"uniqueItems", "contains", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                        "multipleOf", "pattern", "maxLength", "minLength"} & set(node)
            for bound in ("minItems", "maxItems"):
                assert node.get(bound, 0) <= validate_mod.SAMPLE_ABOVE
            items = node.get("items")
            if isinstance(items, dict) and items.get("type") in ("string", "number", "integer", "boolean"):
                assert set(items) <= scalar_item_keywords, items
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(doc)


# --- case 19: strings of a hand-edited report reach a terminal or Markdown escaped ----------


EVIL = "x\x1b]52;c;SGFjaw==\x07\x1b[2J\x9b31m\u202eevil"


def _evil_report(saved: dict[str, Any], tmp_path: Path) -> Path:
    doc = json.loads(json.dumps(saved))
    doc["warnings"] = [f"warning {EVIL}"]
    doc["recommendations"][0]["title"] = f"title {EVIL}"
    doc["recommendations"][0]["evidence"] = [f"evidence {EVIL}"]
    doc["ranks"][0]["device"] = f"GPU {EVIL}"
    return _write(tmp_path / "evil.json", doc)


def _no_control(text: str) -> None:
    assert not any(c in text for c in "\x1b\x07\x9b\u202e"), repr(text[:200])


@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_report_strings_reach_stdout_escaped(saved: dict[str, Any], tmp_path: Path, fmt: str) -> None:
    r = run_cli("analyze", str(_evil_report(saved, tmp_path)), "--format", fmt)
    assert r.code == 0
    _no_control(r.stdout)
    assert "warning x\\x1b" in r.stdout and "52;c;SGFjaw==" in r.stdout  # shown, not obeyed


def test_report_strings_reach_files_escaped(saved: dict[str, Any], tmp_path: Path) -> None:
    evil = _evil_report(saved, tmp_path)
    for name in ("x.md", "x.txt"):
        assert run_cli("analyze", str(evil), "-o", str(tmp_path / name)).code == 0
        _no_control((tmp_path / name).read_text())
    r = run_cli("check", str(evil), "--no-config", "--min-compute-pct", "1", "--junit", str(tmp_path / "j.xml"),
                "--save-report", str(tmp_path / "s.md"))
    assert r.code == 0
    _no_control((tmp_path / "j.xml").read_text() + (tmp_path / "s.md").read_text() + r.stdout)


def test_with_colour_only_gpuprofs_own_sequences_are_kept(saved: dict[str, Any], tmp_path: Path) -> None:
    doc = json.loads(json.dumps(saved))
    doc["warnings"] = ["hidden \x1b[8mconcealed\x1b[0m and \x1b[2J cleared"]
    r = run_cli("analyze", str(_write(tmp_path / "c.json", doc)), "--color", "always")
    assert r.code == 0
    assert "\x1b[1m" in r.stdout  # the report's own bold
    assert "\x1b[8m" not in r.stdout and "\x1b[2J" not in r.stdout
    assert "\\x1b[8mconcealed" in r.stdout


def test_the_python_sinks_escape_too(saved: dict[str, Any], tmp_path: Path) -> None:
    """The same filter where a report leaves gpuprof outside the command line: the torch
    handler's text on stderr, and Report.save to Markdown or text."""
    import io

    from gpuprof.integrations.torch import print_text_report

    report = read_report(_evil_report(saved, tmp_path))
    out = io.StringIO()
    print_text_report(report, file=out)
    _no_control(out.getvalue())
    for name in ("r.md", "r.txt"):
        report.save(tmp_path / name)
        _no_control((tmp_path / name).read_text())
